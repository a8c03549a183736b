"""checkpoint: under torch.utils.checkpoint (non-reentrant), outputs and gradients are eager's.

Broken Functions the check must catch, and correct look-alikes a naive version would flag.
"""
from __future__ import annotations

from torch.autograd import Function
from torch.autograd.function import once_differentiable

from zoo import spec_for

_PAIR = spec_for(x={"shape": [3]}, w={"shape": [3]})
_STEP = [0]


# ============================================================================ broken


class RotatingScale(Function):
    """forward saves x scaled by a power of two that each call advances (delayed scaling: the
    scale of this step, the next step's for the next call) and keeps the factor on ctx;
    backward unscales with it. Every call is right in eager, but checkpoint's recomputation
    saves x with the next call's scale while ctx keeps the first run's."""

    EXPECT = ("checkpoint", "GV391", "w")
    SPEC = _PAIR

    @staticmethod
    def forward(x, w):
        return x * w

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, w = inputs
        _STEP[0] += 1
        ctx.scale = 2.0 ** (_STEP[0] % 4)
        ctx.save_for_backward(x * ctx.scale, w)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        scaled, w = ctx.saved_tensors
        return grad * w, grad * scaled / ctx.scale


# ============================================================================ look-alikes


class ScaleInPlaceDirty(Function):
    """naive checkpoint/saved_hooks: forward writes into its input (mark_dirty); called on
    the checkpointed region's own input, torch refuses the recomputation (the input changed
    since the first run), and called on a leaf it refuses the write: users call it on a copy
    made inside the region, and so does the check."""

    SPEC = spec_for(x={"shape": [4]})

    @staticmethod
    def forward(x):
        return x.mul_(3.0)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.mark_dirty(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        return grad * 3.0
