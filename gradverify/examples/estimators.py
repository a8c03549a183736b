"""Straight-through / surrogate-gradient estimators: the gradient is deliberately not the
derivative, so gradcheck must fail; their specs declare it under ``expect:``."""
from __future__ import annotations

import torch
from torch.autograd import Function


class SignSTE(Function):
    """Forward: sign(x). Backward: the hard-tanh straight-through estimator, grad * 1{|x| <= 1}."""

    @staticmethod
    def forward(x):
        return torch.sign(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad_y):
        (x,) = ctx.saved_tensors
        return grad_y * (x.abs() <= 1).to(grad_y.dtype)
