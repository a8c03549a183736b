"""autocast (opt-in, a composition): under torch.autocast the Function runs, and its outputs
and gradients stay within the low-precision dtype.

Broken Functions the check must catch, and correct look-alikes a naive version would flag.
"""
from __future__ import annotations

from torch.autograd import Function

_MATMUL = {"checks": {"autocast": True}, "cases": [
    {"name": "c", "args": {"x": {"shape": [2, 3]}, "w": {"shape": [3, 4]}}}]}

# ============================================================================ broken


class MatmulSavesFloat32(Function):
    """Under autocast, x @ w computes in bfloat16, so backward gets a bfloat16 incoming
    gradient and multiplies it with the float32 tensors it saved: it raises."""

    EXPECT = ("autocast", "GV371", None)
    SPEC = _MATMUL

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x @ w

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        return grad @ w.t(), x.t() @ grad


class OffsetCancels(Function):
    """Adds and removes a large offset after a matmul: in bfloat16 (autocast) the offset eats
    every digit of the result."""

    EXPECT = ("autocast", "GV372", None)
    SPEC = _MATMUL

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return (x @ w + 1000.0) - 1000.0

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        grad = grad.to(x.dtype)
        return grad @ w.t(), x.t() @ grad


# ============================================================================ look-alikes


class MatmulCastsIncomingGrad(Function):
    """naive autocast: a bfloat16 output for float32 inputs is what autocast asks for; backward
    casts the incoming gradient to what it saved, so it runs, within bfloat16."""

    SPEC = _MATMUL

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x @ w

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        grad = grad.to(x.dtype)
        return grad @ w.t(), x.t() @ grad


class SinUnaffected(Function):
    """naive autocast: no op of forward is autocast's, so nothing changes dtype."""

    SPEC = {"checks": {"autocast": True}, "cases": [{"args": {"x": {"shape": [5]}}}]}  # noqa: RUF012

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.cos()
