"""vmap: torch.func.vmap over a batch equals a loop.

Broken Functions the check must catch, then correct Functions that a naive vmap check would flag.
"""
from __future__ import annotations

from torch.autograd import Function

from zoo import spec_for

# ============================================================================ broken


class WrongVmapRule(Function):
    EXPECT = ("vmap", "GV311", None)
    SPEC = spec_for(x={"shape": [4]})

    @staticmethod
    def forward(x):
        return x * 2

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return grad * 2

    @staticmethod
    def vmap(info, in_dims, x):
        return x * 3, in_dims[0]   # not what forward computes


class VmapRuleMixesBatch(Function):
    EXPECT = ("vmap", "GV311", None)
    SPEC = spec_for(x={"shape": [4]})

    @staticmethod
    def forward(x):
        return x - x.mean()

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return grad - grad.mean()

    @staticmethod
    def vmap(info, in_dims, x):
        x = x.movedim(in_dims[0], 0)
        return x - x.mean(), 0   # the mean over the whole batch, not per sample


# ============================================================================ correct


class ExplicitVmapScale(Function):
    """An explicit vmap staticmethod and a non-tensor argument. naive vmap: the in_dims of
    non-tensor arguments are None."""

    SPEC = spec_for(x={"shape": [4]}, factor=3.0)

    @staticmethod
    def forward(x, factor):
        return x * factor

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.factor = inputs[1]

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.factor, None

    @staticmethod
    def vmap(info, in_dims, x, factor):
        return ExplicitVmapScale.apply(x, factor), in_dims[0]


class InplaceExpVmap(Function):
    """exp_ in place with mark_dirty and a vmap staticmethod (torch's own NumpyExp_ pattern).
    Users apply it to a non-leaf; a per-sample-gradient probe that calls it on a leaf meets
    autograd's leaf error (a false GV313): the probe must call it as users do, on a copy."""

    EXPECT = None
    SPEC = spec_for(x={"shape": [4]})

    @staticmethod
    def forward(x):
        return x.exp_()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.mark_dirty(inputs[0])
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, grad):
        (result,) = ctx.saved_tensors
        return grad * result

    @staticmethod
    def vmap(info, in_dims, x):
        InplaceExpVmap.apply(x)
        return x, in_dims[0]
