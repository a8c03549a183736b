"""mutation: in-place writes that autograd does not know about.

Broken Functions the check must catch, then correct Functions that a naive mutation check would
flag (mark_dirty, aliasing outputs).
"""
from __future__ import annotations

import torch
from torch.autograd import Function
from torch.autograd.function import once_differentiable

from zoo import VEC, spec_for

# ============================================================================ broken


class ForwardMutatesInput(Function):
    EXPECT = ("mutation", "GV221", "x")
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        return x * 1

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


class BackwardMutatesSaved(Function):
    EXPECT = ("mutation", "GV222", "x")
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.mul_(2)


class SavedThenScaled(Function):
    """The formula is right for the value saved; forward scales it in place afterwards, and
    autograd records versions only when forward returns."""

    EXPECT = ("mutation", "GV224", "x")
    SPEC = spec_for(x={"shape": [5]}, a=2.0)

    @staticmethod
    def forward(ctx, x, a):
        t = torch.tanh(x)
        ctx.save_for_backward(t)
        ctx.a = a
        t.mul_(a)
        return t.clone()

    @staticmethod
    def backward(ctx, grad):
        (t,) = ctx.saved_tensors
        return grad * ctx.a * (1 - t * t), None


class BackwardMutatesGrad(Function):
    EXPECT = ("mutation", "GV223", None)
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def backward(ctx, grad):
        return grad.mul_(3)


class BackwardScalesSavedThroughNumpy(Function):
    """backward scales a saved intermediate through a numpy view (the version counter does
    not move): the next backward on the same graph reads the scaled values."""

    EXPECT = ("mutation", "GV222", None)
    PATTERN = "a second backward (retain_graph=True) gives another gradient"
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(2 * x)
        return x * x

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        (twice,) = ctx.saved_tensors
        out = grad * twice
        view = twice.numpy()
        view *= 3
        return out


# ============================================================================ correct


class ReshapeAliasesInput(Function):
    """``reshape`` of a contiguous input aliases it. naive mutation: the output shares the
    input's storage, which is not an in-place write to the input."""

    SPEC = spec_for(x={"shape": [2, 6]})

    @staticmethod
    def forward(ctx, x):
        return x.reshape(3, 4)

    @staticmethod
    def backward(ctx, grad):
        return grad.reshape(2, 6)


class InplaceAddScalar(Function):
    """In-place on the input, declared with mark_dirty. naive mutation: the input changes."""

    SPEC = spec_for(x={"shape": [4]})

    @staticmethod
    def forward(ctx, x):
        x.add_(1.0)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class InplaceSigmoidSavesOutput(Function):
    """In-place sigmoid that saves its (dirty) output for backward. naive mutation and
    saved_tensors: the saved tensor is the caller's input."""

    SPEC = spec_for(x={"shape": [5]})

    @staticmethod
    def forward(ctx, x):
        x.sigmoid_()
        ctx.mark_dirty(x)
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * y * (1 - y)


class KernelScratchSaved(Function):
    """backward's kernel writes into a scratch tensor saved by forward, through a numpy view
    (as numba kernels do): the same values every time, never the caller's. naive mutation:
    "a saved tensor changed in backward, so a second backward sees other values" (GV222 as
    an error); a second backward gives the same gradients, so it is a note."""

    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x, torch.empty_like(x))
        return x * x

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        x, scratch = ctx.saved_tensors
        torch.mul(x, 2.0, out=torch.from_numpy(scratch.numpy()))
        return grad * scratch
