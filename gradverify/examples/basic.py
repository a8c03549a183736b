"""Elementwise Functions: exp, multiply by a constant, in-place ReLU. Each is written in
setup_context style (forward without ctx, ``setup_context`` saving what backward needs), the
style torch.func can transform."""
from __future__ import annotations

import torch
from torch.autograd import Function


class Exp(Function):
    """y = exp(x); backward reuses the saved output."""

    @staticmethod
    def forward(x):
        return torch.exp(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, grad_y):
        (y,) = ctx.saved_tensors
        return grad_y * y


class MulConstant(Function):
    """y = x * constant, with a Python number argument (its gradient is None)."""

    @staticmethod
    def forward(x, constant: float):
        return x * constant

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.constant = inputs[1]

    @staticmethod
    def backward(ctx, grad_y):
        return grad_y * ctx.constant, None


class InplaceReLU(Function):
    """max(x, 0) written into x itself: forward marks it dirty and returns it."""

    @staticmethod
    def forward(x):
        return x.clamp_(min=0)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.mark_dirty(inputs[0])
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, grad_y):
        (y,) = ctx.saved_tensors
        return grad_y * (y > 0).to(grad_y.dtype)
