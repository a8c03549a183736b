"""The same function twice for the custom-op bench row: a custom op with register_autograd and
register_fake, and the equivalent autograd.Function class."""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


@torch.library.custom_op("gvbench::softplus", mutates_args=())
def softplus_op(x: Tensor, beta: float) -> Tensor:
    return torch.log1p(torch.exp(beta * x)) / beta


softplus_op.register_fake(lambda x, beta: torch.empty_like(x))


def _setup(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    ctx.save_for_backward(inputs[0])
    ctx.beta = inputs[1]


def _backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
    (x,) = ctx.saved_tensors
    return grad * torch.sigmoid(ctx.beta * x), None


softplus_op.register_autograd(_backward, setup_context=_setup)


class Softplus(torch.autograd.Function):
    @staticmethod
    def forward(x: Tensor, beta: float) -> Tensor:
        return torch.log1p(torch.exp(beta * x)) / beta

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        _setup(ctx, inputs, output)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        return _backward(ctx, grad)


@torch.library.custom_op("gvbench::softsign", mutates_args=())
def softsign_op(x: Tensor) -> Tensor:
    return x / (1 + x.abs())


softsign_op.register_fake(lambda x: torch.empty_like(x))
softsign_op.register_autograd(lambda ctx, g: g / (1 + ctx.saved_tensors[0].abs()) ** 2,
                              setup_context=lambda ctx, inputs, output:
                              ctx.save_for_backward(inputs[0]))


class Softsign(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:
        ctx.save_for_backward(x)
        return x / (1 + x.abs())

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> Tensor:
        return g / (1 + ctx.saved_tensors[0].abs()) ** 2


if __name__ == "__main__":
    # `python customop.py op|fn`: one forward and backward of the op or of the Function class
    # in a fresh interpreter, what torch alone charges for each (bench.py's custom op row).
    # It ends as gradverify's workers do, without tearing the interpreter down.
    import os
    import sys

    x = torch.randn(3, requires_grad=True)
    y = softplus_op(x, 2.0) if sys.argv[1:] == ["op"] else Softplus.apply(x, 2.0)
    y.sum().backward()
    os._exit(0)
