"""determinism: two backward passes on the same inputs and gradients must agree.

Broken Functions the check must catch, then correct Functions that a naive determinism check would
flag.
"""
from __future__ import annotations

import torch
from torch.autograd import Function

from zoo import VEC, spec_for

# ============================================================================ broken


class EmptyGarbage(Function):
    EXPECT = ("determinism", "GV241", "x")
    SPEC = spec_for(x={"shape": [64]})

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        out = torch.empty_like(grad)
        out[x > 0] = grad[x > 0]
        return out


class NoisyBackward(Function):
    EXPECT = ("determinism", "GV241", "x")
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2 + 1e-9 * torch.randn_like(grad)


# ============================================================================ correct


class ScatterSegmentSum(Function):
    """Segment sums over an integer segment id tied to the output's first dim. naive checks:
    integer input, scatter_add in forward (deterministic on CPU)."""

    SPEC = spec_for(values={"shape": [6, 2]},
                    segments={"values": [0, 0, 1, 2, 2, 2], "dtype": "int64"}, n=3)

    @staticmethod
    def forward(ctx, values, segments, n):
        ctx.save_for_backward(segments)
        return values.new_zeros(n, values.shape[1]).index_add(0, segments, values)

    @staticmethod
    def backward(ctx, grad):
        (segments,) = ctx.saved_tensors
        return grad.index_select(0, segments), None, None


class EmptyThenFilled(Function):
    """Allocates with torch.empty and writes every element. naive determinism: flagging
    torch.empty itself; the check fills freed memory with NaN, so only unwritten reads show."""

    SPEC = spec_for(x={"shape": [4, 3]})

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        out = torch.empty_like(x)
        out[:] = x * x
        return out

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        result = torch.empty_like(grad)
        result.copy_(2 * x * grad)
        return result
