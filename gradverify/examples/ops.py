"""Examples beyond Function classes (specs/ops.yaml): a custom op with ``register_autograd``,
``register_fake`` and ``register_vmap``; a plain function of two Functions; an ``nn.Module``
whose forward calls a Function. Importing this module registers the op
``gradverify_examples::scaled_sin``."""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from gradverify.examples.basic import Exp


@torch.library.custom_op("gradverify_examples::scaled_sin", mutates_args=())
def scaled_sin(x: Tensor, alpha: float) -> Tensor:
    """alpha * sin(x), computed outside autograd (as a kernel in C++ or Triton would be)."""
    return alpha * torch.sin(x)


@scaled_sin.register_fake
def _(x: Tensor, alpha: float) -> Tensor:
    return torch.empty_like(x)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    x, alpha = inputs
    ctx.save_for_backward(x)
    ctx.alpha = alpha


def _backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, None]:
    (x,) = ctx.saved_tensors
    grad_x = grad * ctx.alpha * torch.cos(x) if ctx.needs_input_grad[0] else None
    return grad_x, None


scaled_sin.register_autograd(_backward, setup_context=_setup_context)


@scaled_sin.register_vmap
def _(info: Any, in_dims: tuple[Any, ...], x: Tensor, alpha: float) -> tuple[Tensor, int]:
    x_dim = in_dims[0]
    return scaled_sin(x, alpha), 0 if x_dim is None else x_dim


def softplus_exp(x: Tensor, y: Tensor) -> Tensor:
    """A plain function over Functions: log(1 + exp(x)) * y, with Exp from the basic examples."""
    return torch.log1p(Exp.apply(x)) * y


class _AffineFn(torch.autograd.Function):
    @staticmethod
    def forward(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        return x @ weight.t() + bias

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Tensor, ...], output: Tensor) -> None:
        x, weight, _ = inputs
        ctx.save_for_backward(x, weight)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        x, weight = ctx.saved_tensors
        grad_x = grad @ weight
        grad_weight = grad.reshape(-1, grad.shape[-1]).t() @ x.reshape(-1, x.shape[-1])
        grad_bias = grad.reshape(-1, grad.shape[-1]).sum(0)
        return grad_x, grad_weight, grad_bias


class Affine(torch.nn.Module):
    """y = x W^T + b through a custom Function; its parameters are checked as inputs."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(out_features, in_features) / in_features)
        self.bias = torch.nn.Parameter(torch.zeros(out_features))

    def forward(self, x: Tensor) -> Tensor:
        return _AffineFn.apply(x, self.weight, self.bias)
