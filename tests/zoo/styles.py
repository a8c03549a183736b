"""Correct Functions in each style torch accepts: ctx or setup_context, classmethods, *grads and
*inputs, optional and non-tensor arguments, mark_dirty, jvp and vmap.

Each must pass or skip every check.
"""
from __future__ import annotations

import torch
from torch.autograd import Function

from zoo import MAT, VEC, spec_for

# ============================================================================ correct


class Exp(Function):
    EXPECT = None
    SPEC = MAT

    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * y


class ScaleShift(Function):
    """Non-tensor arguments of several kinds, one of them a tuple."""

    EXPECT = None
    SPEC = spec_for(x={"shape": [2, 3]}, scale=2.5, shift={"tuple": [1, 2]}, flag=True, tag="a")

    @staticmethod
    def forward(ctx, x, scale, shift, flag, tag):
        ctx.scale = scale
        return x * scale + sum(shift) * flag

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.scale, None, None, None, None


class SinCos(Function):
    """Two differentiable outputs."""

    EXPECT = None
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin(), x.cos()

    @staticmethod
    def backward(ctx, grad_sin, grad_cos):
        (x,) = ctx.saved_tensors
        return grad_sin * x.cos() - grad_cos * x.sin()


class MaxWithIndices(Function):
    """A non-differentiable integer output marked as such."""

    EXPECT = None
    SPEC = spec_for(x={"shape": [3, 4]})

    @staticmethod
    def forward(ctx, x):
        values, indices = x.max(1)
        ctx.mark_non_differentiable(indices)
        ctx.save_for_backward(indices)
        ctx.shape = x.shape
        return values, indices

    @staticmethod
    def backward(ctx, grad_values, grad_indices):
        (indices,) = ctx.saved_tensors
        return grad_values.new_zeros(ctx.shape).scatter(1, indices[:, None], grad_values[:, None])


class InplaceMul(Function):
    """In-place with mark_dirty."""

    EXPECT = None
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        x.mul_(3)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad * 3


class SetupContextMul(Function):
    """setup_context style."""

    EXPECT = None
    SPEC = spec_for(x={"shape": [2, 3]}, y={"shape": [2, 3]})

    @staticmethod
    def forward(x, y):
        return x * y

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        gx = grad * y if ctx.needs_input_grad[0] else None
        gy = grad * x if ctx.needs_input_grad[1] else None
        return gx, gy


class OptionalBias(Function):
    """An optional tensor argument passed as None."""

    EXPECT = None
    SPEC = {"cases": [{"name": "none", "args": [{"shape": [2, 3]}, None]},  # noqa: RUF012
                      {"name": "bias", "args": [{"shape": [2, 3]}, {"shape": [3]}]}]}

    @staticmethod
    def forward(ctx, x, bias: torch.Tensor | None = None):
        ctx.has_bias = bias is not None
        return x * 2 + (bias if bias is not None else 0)

    @staticmethod
    def backward(ctx, grad):
        gx = grad * 2 if ctx.needs_input_grad[0] else None
        gb = grad.sum(0) if ctx.has_bias and ctx.needs_input_grad[1] else None
        return gx, gb


class ClassmethodStyle(Function):
    """@classmethod forward/backward and extra trailing Nones are accepted, as torch accepts."""

    EXPECT = None
    SPEC = VEC

    @classmethod
    def forward(cls, ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @classmethod
    def backward(cls, ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 2 * x, None, None


class VarGrads(Function):
    """backward(ctx, *grads), and an integer index input."""

    EXPECT = None
    SPEC = spec_for(x={"shape": [5]}, index={"values": [4, 0, 2], "dtype": "int64"})

    @staticmethod
    def forward(ctx, x, index):
        ctx.save_for_backward(index)
        ctx.n = x.shape[0]
        return x[index]

    @staticmethod
    def backward(ctx, *grads):
        (index,) = ctx.saved_tensors
        return grads[0].new_zeros(ctx.n).index_add(0, index, grads[0]), None


class FrozenInput(Function):
    """An input declared requires_grad: false."""

    EXPECT = None
    SPEC = spec_for(x={"shape": [2, 3]}, w={"shape": [2, 3], "requires_grad": False})

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        return grad * w if ctx.needs_input_grad[0] else None, \
            grad * x if ctx.needs_input_grad[1] else None


class CubeFunctional(Function):
    """setup_context + jvp + vmap staticmethod, all correct."""

    EXPECT = None
    SPEC = spec_for(x={"shape": [2, 3]})

    @staticmethod
    def forward(x):
        return x ** 3

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 3 * x ** 2

    @staticmethod
    def jvp(ctx, x_t):
        (x,) = ctx.saved_tensors
        return 3 * x ** 2 * x_t

    @staticmethod
    def vmap(info, in_dims, x):
        return CubeFunctional.apply(x), in_dims[0]


class SumOfMany(Function):
    """forward(ctx, *xs): the inputs are named xs[0], xs[1], ... naive inference: a *args
    forward has no required parameter, so nothing would be checked."""

    SPEC = spec_for(xs=[{"shape": [3]}, {"shape": [3]}, {"shape": [3]}])

    @staticmethod
    def forward(ctx, *xs):
        ctx.count = len(xs)
        return torch.stack(xs).sum(0)

    @staticmethod
    def backward(ctx, grad):
        return tuple(grad for _ in range(ctx.count))
