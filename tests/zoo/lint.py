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


# ============================================================================ correct


class NonStaticBackward(Function):
    """forward is static, backward is not (as in a published quantized linear layer):
    Function.apply calls backward on the class with ctx first, so torch runs it and every
    gradient check passes. naive lint: "torch rejects non-static (legacy) autograd Functions"
    (an error); it is a note (GV265)."""

    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    def backward(ctx, grad):  # not static: the pattern under test
        (x,) = ctx.saved_tensors
        return 2 * x * grad
