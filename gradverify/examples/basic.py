"""Elementwise Functions: exp, multiply by a constant, in-place ReLU."""
from __future__ import annotations

import torch
from torch.autograd import Function


class Exp(Function):
    """y = exp(x); backward reuses the saved output."""

    @staticmethod
    def forward(ctx, x):
        y = torch.exp(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_y):
        (y,) = ctx.saved_tensors
        return grad_y * y


class MulConstant(Function):
    """y = x * constant, with a Python number argument (its gradient is None)."""

    @staticmethod
    def forward(ctx, x, constant: float):
        ctx.constant = constant
        return x * constant

    @staticmethod
    def backward(ctx, grad_y):
        return grad_y * ctx.constant, None


class InplaceReLU(Function):
    """max(x, 0) written into x itself: forward marks it dirty and returns it."""

    @staticmethod
    def forward(ctx, x):
        x.clamp_(min=0)
        ctx.mark_dirty(x)
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx, grad_y):
        (y,) = ctx.saved_tensors
        return grad_y * (y > 0).to(grad_y.dtype)
