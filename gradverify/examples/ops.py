"""Examples beyond Function classes (specs/ops.yaml): a plain function of two Functions, and an
``nn.Module`` whose forward calls a Function. The custom op is in ``customop``."""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from gradverify.examples.basic import Exp


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
