"""Deliberately wrong Functions: `gradverify check specs/broken` shows what failures look like."""
import torch
from torch.autograd import Function


class SinWrongSign(Function):
    """backward returns -cos(x): the sign is flipped."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sin(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return -grad * torch.cos(x)


class SquareForgetsGrad(Function):
    """backward returns 2x without multiplying by the incoming gradient."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x


class ScaleMissingNone(Function):
    """forward takes (x, factor) but backward returns one gradient only."""

    @staticmethod
    def forward(ctx, x, factor):
        ctx.factor = factor
        return x * factor

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.factor


class MatmulTransposed(Function):
    """grad for `b` is transposed; square shapes would hide it, distinct ones do not."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a @ b

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return grad @ b.t(), (a.t() @ grad).t().t().t()


class CubeDetachedBackward(Function):
    """First order is right, but backward detaches x: second derivatives are wrong."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 3 * x.detach() ** 2


class NaiveLogSumExp(Function):
    """log(sum(exp(x))) without subtracting the max: fine in float64, inf in float32 for x > 88."""

    @staticmethod
    def forward(ctx, x):
        e = x.exp()
        ctx.save_for_backward(x)
        return e.sum(-1).log()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        e = x.exp()
        return grad.unsqueeze(-1) * e / e.sum(-1, keepdim=True)
