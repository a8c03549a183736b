"""saved_hooks: under saved_tensors_hooks whose pack copies each saved tensor, outputs and
gradients are eager's and backward runs.

Broken Functions the check must catch, and correct look-alikes a naive version would flag.
"""
from __future__ import annotations

from torch.autograd import Function
from torch.autograd.function import once_differentiable

from zoo import spec_for

_PAIR = spec_for(x={"shape": [3]}, w={"shape": [3]})


# ============================================================================ broken


class ScaleOnSavedTensor(Function):
    """forward saves w quantised to [-1, 1] with its scale set as an attribute of the saved
    tensor (as FP8 code carries a scale); backward reads it back from the saved tensor. Right
    in eager, where backward gets the object forward saved; under offloading hooks it gets a
    copy without the attribute and raises AttributeError."""

    EXPECT = ("saved_hooks", "GV272", None)
    SPEC = _PAIR

    @staticmethod
    def forward(x, w):
        return x * w

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, w = inputs
        scale = w.detach().abs().max()
        quantised = w.detach() / scale
        quantised.scale = scale
        ctx.save_for_backward(x, quantised)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        x, quantised = ctx.saved_tensors
        return grad * quantised * quantised.scale, grad * x


# ============================================================================ look-alikes


class SavesItsOutput(Function):
    """naive saved_hooks: forward saves its output; a pack that copies hands backward a tensor
    that is not the output object (another storage), which a check comparing saved objects or
    storages would call changed: only values count, and they are the same."""

    SPEC = spec_for(x={"shape": [2, 3]})

    @staticmethod
    def forward(x):
        return x.exp()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * y
