"""layout: non-contiguous inputs and incoming gradients must give the same results.

Broken Functions the check must catch, then correct Functions that a naive layout check would flag.
"""
from __future__ import annotations

import torch
from torch.autograd import Function

from zoo import spec_for

# ============================================================================ broken


class ContiguousAssumed(Function):
    """Reads the storage as if contiguous, like a raw kernel on data_ptr."""

    EXPECT = ("layout", "GV251", "x")
    SPEC = spec_for(x={"shape": [2, 3]})

    @staticmethod
    def forward(ctx, x):
        flat = torch.as_strided(x, (x.numel(),), (1,), x.storage_offset())
        return (flat * 2).reshape(x.shape)

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


class ViewOnInput(Function):
    EXPECT = ("layout", "GV252", "x")
    SPEC = spec_for(x={"shape": [2, 3]})

    @staticmethod
    def forward(ctx, x):
        ctx.shape = x.shape
        return x.view(-1) * 2

    @staticmethod
    def backward(ctx, grad):
        return (grad * 2).reshape(ctx.shape)


class GradContiguousAssumed(Function):
    EXPECT = ("layout", "GV253", None)
    SPEC = spec_for(x={"shape": [2, 3]})

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        flat = torch.as_strided(grad, (grad.numel(),), (1,), grad.storage_offset())
        return (flat * 2).reshape(grad.shape)


class AttentionGradView(Function):
    """Scales a [B, H, L, D] attention output per head; backward starts with
    grad.view(B * H, L, D), as fused attention kernels do. Every check passed it, yet it
    crashes a user's first training step: the output is transpose(1, 2).reshape(...)-ed
    downstream, so the incoming gradient's leading dims are permuted in memory."""

    EXPECT = ("layout", "GV254", None)
    PATTERN = "calls .view() on the incoming gradient"
    SPEC = spec_for(q={"shape": [2, 3, 4, 5]}, scale={"shape": [3], "requires_grad": False})

    @staticmethod
    def forward(ctx, q, scale):
        ctx.save_for_backward(scale)
        b, h, seq, d = q.shape
        return (q.reshape(b * h, seq, d) * scale.repeat(b)[:, None, None]).view(b, h, seq, d)

    @staticmethod
    def backward(ctx, grad):
        (scale,) = ctx.saved_tensors
        b, h, seq, d = grad.shape
        flat = grad.view(b * h, seq, d)  # crashes on a permuted incoming gradient
        return (flat * scale.repeat(b)[:, None, None]).view(b, h, seq, d), None


# ============================================================================ correct


class TransposedOutput(Function):
    """A non-contiguous view output. naive layout/saved_tensors: the output's strides."""

    SPEC = spec_for(x={"shape": [2, 3]})

    @staticmethod
    def forward(ctx, x):
        return x.t()

    @staticmethod
    def backward(ctx, grad):
        return grad.t()


class ZeroDimScale(Function):
    """A 0-dim scale times a vector. naive layout/mutation: a 0-dim tensor has no strides to
    change and a single element to roll."""

    SPEC = spec_for(x={"shape": [3]}, scale={"shape": []})

    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x, scale)
        return x * scale

    @staticmethod
    def backward(ctx, grad):
        x, scale = ctx.saved_tensors
        grad_x = grad * scale if ctx.needs_input_grad[0] else None
        grad_scale = (grad * x).sum() if ctx.needs_input_grad[1] else None
        return grad_x, grad_scale
