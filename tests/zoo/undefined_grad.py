"""undefined_grad: outputs whose gradient is undefined, because the caller does not use them.

Broken Functions the check must catch, then correct Functions that a naive undefined_grad check
would flag.
"""
from __future__ import annotations

import torch
from torch.autograd import Function

from zoo import VEC, spec_for

# ============================================================================ broken


class NoneGradCrash(Function):
    EXPECT = ("undefined_grad", "GV231", None)
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        ctx.set_materialize_grads(False)
        return x * 2, x * 3

    @staticmethod
    def backward(ctx, grad_a, grad_b):
        return grad_a * 2 + grad_b * 3


class NoneGradWrong(Function):
    EXPECT = ("undefined_grad", "GV232", "x")
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        ctx.set_materialize_grads(False)
        return x * 2, x * 3

    @staticmethod
    def backward(ctx, grad_a, grad_b):
        if grad_a is None or grad_b is None:
            return torch.zeros(5, dtype=torch.float64)
        return grad_a * 2 + grad_b * 3


# ============================================================================ correct


class SplitPartlyUsed(Function):
    """Two outputs, gradients not materialized, None handled. naive undefined_grad: None in."""

    SPEC = spec_for(x={"shape": [4]})

    @staticmethod
    def forward(ctx, x):
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x)
        return x * 2, x * x

    @staticmethod
    def backward(ctx, grad_double, grad_square):
        (x,) = ctx.saved_tensors
        if grad_double is None and grad_square is None:
            return None
        grad = torch.zeros_like(x)
        if grad_double is not None:
            grad = grad + 2 * grad_double
        if grad_square is not None:
            grad = grad + 2 * x * grad_square
        return grad


class GlobalMaxPoolIndices(Function):
    """Max over the last dim of [N, C, L] with argmax indices. naive undefined_grad: the indices'
    gradient slot."""

    SPEC = spec_for(x={"shape": [2, 3, 4]})

    @staticmethod
    def forward(ctx, x):
        values, indices = x.max(-1)
        ctx.mark_non_differentiable(indices)
        ctx.save_for_backward(indices)
        ctx.shape = x.shape
        return values, indices

    @staticmethod
    def backward(ctx, grad, grad_indices):
        (indices,) = ctx.saved_tensors
        return grad.new_zeros(ctx.shape).scatter(-1, indices.unsqueeze(-1), grad.unsqueeze(-1))
