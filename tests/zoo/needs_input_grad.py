"""needs_input_grad: backward must work when only some inputs require grad.

Broken Functions the check must catch, then correct Functions that a naive needs_input_grad check
would flag.
"""
from __future__ import annotations

import torch
from torch.autograd import Function

from zoo import VEC, spec_for

# ============================================================================ broken


class UnboundWhenPartial(Function):
    EXPECT = ("needs_input_grad", "GV201", "w")
    SPEC = spec_for(x={"shape": [2, 3]}, w={"shape": [3, 4]})

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x @ w

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        if ctx.needs_input_grad[0]:
            gx = grad @ w.t()
            shared = x.t()
        if ctx.needs_input_grad[1]:
            gw = shared @ grad
        return gx if ctx.needs_input_grad[0] else None, gw if ctx.needs_input_grad[1] else None


class WrongNeedsIndex(Function):
    EXPECT = ("needs_input_grad", "GV202", "w")
    SPEC = spec_for(x={"shape": [3]}, w={"shape": [3]})

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        gx = grad * w if ctx.needs_input_grad[0] else None
        gw = grad * x if ctx.needs_input_grad[0] else None  # wrong index
        return gx, gw


class WastedGradient(Function):
    EXPECT = ("needs_input_grad", "GV204", "w")
    SEVERITY = "info"  # a performance note, said once per spec
    SPEC = spec_for(x={"shape": [2, 3]}, w={"shape": [2, 3], "requires_grad": False})

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        return grad * w, grad * x


class ForwardNeedsGrad(Function):
    EXPECT = ("needs_input_grad", "GV205", None)
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        if not x.requires_grad:
            raise RuntimeError("expected an input that requires grad")
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


# ============================================================================ correct


class SuperpixelMeanPool(Function):
    """Mean of [C, N] features over an integer label map of N pixels into K segments. naive
    needs_input_grad: the label map is an integer input."""

    SPEC = spec_for(features={"shape": [2, 7]},
                    labels={"values": [0, 1, 1, 2, 0, 2, 2], "dtype": "int64"}, k=3)

    @staticmethod
    def forward(ctx, features, labels, k):
        sums = features.new_zeros(features.shape[0], k).index_add(1, labels, features)
        counts = torch.bincount(labels, minlength=k).clamp(min=1).to(features.dtype)
        ctx.save_for_backward(labels, counts)
        return sums / counts

    @staticmethod
    def backward(ctx, grad):
        labels, counts = ctx.saved_tensors
        return (grad / counts).index_select(1, labels), None, None


class InplaceAddReturnsIncoming(Function):
    """x += y in place with mark_dirty; backward returns the incoming gradient for both.
    naive needs_input_grad: a gradient returned for an input that needs none is "wasted work",
    but handing back the incoming gradient itself costs nothing."""

    SPEC = spec_for(x={"shape": [5]}, y={"shape": [5]})

    @staticmethod
    def forward(ctx, x, y):
        ctx.mark_dirty(x)
        return x.add_(y)

    @staticmethod
    def backward(ctx, grad):
        return grad, grad
