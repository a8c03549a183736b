"""Plain-PyTorch references for the kernels in ``kernels``: same argument order, same outputs.

They compute in the dtype they are handed, so float64 inputs give a float64 reference.
"""

from __future__ import annotations

import torch


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """y = x / sqrt(mean(x^2, row) + eps) * weight, for x [rows, N] and weight [N]."""
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


def logsumexp(x: torch.Tensor) -> torch.Tensor:
    """log(sum(exp(x), row)) for x [rows, N]; returns [rows]."""
    return torch.logsumexp(x, dim=-1)


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the halves (x1, x2) of x [rows, 2H] by cos/sin [rows, H]; out of place."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def scaled_silu(x: torch.Tensor, scale: float) -> torch.Tensor:
    """y = x * sigmoid(x) * scale, elementwise."""
    return x * torch.sigmoid(x) * scale


def mul_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """out = x * y + x, elementwise (x and y of one shape)."""
    return x * y + x
