"""Plain-PyTorch references for liger-kernel's Functions (``bench/gpu/liger.yaml``): the same
arguments in the same order, the same outputs, computed in the dtype they are handed."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, offset: float = 0.0,
             casting_mode: str = "llama", in_place: bool = True) -> torch.Tensor:
    """x / sqrt(mean(x^2, last dim) + eps) * (offset + weight)."""
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * (offset + weight)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
               eps: float) -> torch.Tensor:
    return F.layer_norm(x, x.shape[-1:], weight, bias, eps)


def silu_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """SwiGLU's gate: silu(a) * b."""
    return F.silu(a) * b


def gelu_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """GeGLU's gate: gelu(a) (tanh approximation, as liger computes it) * b."""
    return F.gelu(a, approximate="tanh") * b


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None,
                  ignore_index: int = -100, lse_square_scale: float = 0.0,
                  label_smoothing: float = 0.0, reduction: str = "mean",
                  ) -> tuple[torch.Tensor, None, None, None]:
    """Mean cross-entropy of the rows, in liger's four outputs (the last three unrequested)."""
    loss = F.cross_entropy(logits, target, weight, ignore_index=ignore_index,
                           reduction=reduction, label_smoothing=label_smoothing)
    return loss, None, None, None


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,
         sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Hugging Face Llama's rotary embedding: q [B, Hq, T, D], k [B, Hk, T, D], cos and sin
    [1, T, D]."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
