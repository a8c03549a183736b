"""Functions whose CUDA path differs from their CPU path, for the CPU-vs-CUDA check (``device``)
in ``gpu.py``, with the correct Function they were copied from."""

from __future__ import annotations

import torch


class Scale3(torch.autograd.Function):
    """y = 3 x: the same on every device."""

    @staticmethod
    def forward(ctx, x):
        return 3 * x

    @staticmethod
    def backward(ctx, grad):
        return 3 * grad


class Scale3DropsFactorInCudaBackward(Scale3):
    """Scale3 whose backward's CUDA path drops the factor 3: gradcheck on CUDA sees it too."""

    @staticmethod
    def backward(ctx, grad):
        if grad.is_cuda:
            return grad
        return 3 * grad


class Scale3DropsFactorOnCuda(torch.autograd.Function):
    """Forward and backward agree with each other on CUDA (gradcheck passes there), but the
    CUDA path computes 2 x, not 3 x: only the comparison against the CPU shows it."""

    @staticmethod
    def forward(ctx, x):
        ctx.factor = 2 if x.is_cuda else 3
        return ctx.factor * x

    @staticmethod
    def backward(ctx, grad):
        return ctx.factor * grad
