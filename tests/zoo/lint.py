"""lint: known-bad patterns in the Function's source.

Broken Functions the check must catch.
"""
from __future__ import annotations

from torch.autograd import Function

from zoo import VEC

# ============================================================================ broken


class SavesTwice(Function):
    EXPECT = ("lint", "GV264", None)
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


class LegacyAPIs(Function):
    EXPECT = ("lint", "GV261", None)
    SEVERITY = "warning"
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_variables
        return 2 * x * grad


class DataInBackward(Function):
    EXPECT = ("lint", "GV263", None)
    SEVERITY = "warning"
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 2 + 0 * x.data
