"""gradgradcheck: second-order gradients (double backward) against finite differences.

Broken Functions the check must catch, then correct ones it must pass or skip:
@once_differentiable, sparse, piecewise linear.
"""
from __future__ import annotations

import numpy as np
import torch
from torch.autograd import Function
from torch.autograd.function import once_differentiable

from zoo import VEC, spec_for

# ============================================================================ broken


class CubeDetached(Function):
    EXPECT = ("gradgradcheck", "GV141", "x")
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 3 * x.detach() ** 2


class WrongFactorDetached(Function):
    """Two defects: the first derivative's factor is wrong (2x^2 for x^3) and its own
    derivative is silently zero (detached). Bare gradgradcheck fails on the second whatever
    the first: both must show in one run (the check runs after a gradcheck failure)."""

    EXPECT = ("gradgradcheck", "GV141", "x")
    ALSO = ("gradcheck", "GV121")
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 2 * x.detach() ** 2


class NumpyBackward(Function):
    EXPECT = ("gradgradcheck", "GV142", "x")
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        out = np.cos(x.detach().numpy()) * grad.detach().numpy()
        return torch.from_numpy(out)


class AbsDetachesIncomingGrad(Function):
    """Piecewise linear: d2/dx2 is zero, so only d(grad)/d(grad_output) can reveal the detach
    (the block that gradverify's gradgradcheck missed before)."""

    EXPECT = ("gradgradcheck", "GV144", "x")
    PATTERN = "does not depend on the incoming gradient"
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.abs()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad.detach() * x.sign()


class LinearGradData(Function):
    """A linear map whose backward reads grad.data: no second derivative w.r.t. x to miss."""

    EXPECT = ("gradgradcheck", "GV142", "x")
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def backward(ctx, grad):
        return grad.data * 3


class GatherDetachesIncomingGrad(Function):
    """A gather whose backward scatters a detached incoming gradient."""

    EXPECT = ("gradgradcheck", "GV142", "x")
    SPEC = spec_for(x={"shape": [5]}, index={"values": [4, 1, 1], "dtype": "int64"})

    @staticmethod
    def forward(ctx, x, index):
        ctx.save_for_backward(index)
        ctx.n = x.shape[0]
        return x[index]

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        return grad.new_zeros(ctx.n).index_add(0, index, grad.detach()), None


class SparseProductDetachesValues(Function):
    """The GAT sparse matmul without @once_differentiable: its saved sparse matrix carries no
    graph to ``values``, so d(grad b)/d(values) is silently zero."""

    EXPECT = ("gradgradcheck", "GV141", "values")
    SPEC = spec_for(indices={"values": [[0, 1, 2], [1, 2, 0]], "dtype": "int64"},
                    values={"shape": [3]}, b={"shape": [3, 2]})

    @staticmethod
    def forward(ctx, indices, values, b):
        a = torch.sparse_coo_tensor(indices, values, (3, 3))
        ctx.save_for_backward(a, b)
        return torch.sparse.mm(a, b)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        grad_values = grad_b = None
        if ctx.needs_input_grad[1]:
            rows, cols = a._indices()
            grad_values = (grad.index_select(0, rows) * b.index_select(0, cols)).sum(1)
        if ctx.needs_input_grad[2]:
            grad_b = torch.sparse.mm(a.t(), grad)
        return None, grad_values, grad_b


class DoubleBackwardWrongFormula(Function):
    """First order right; backward uses an intermediate from forward that was not saved."""

    EXPECT = ("gradgradcheck", "GV141", "x")
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        ctx.cos = x.cos().detach()
        return x.sin()

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.cos


# ============================================================================ correct


class OnceDifferentiableSin(Function):
    """once_differentiable: gradgradcheck must be a skip, not a failure."""

    EXPECT = None
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.cos()


class FixedSparseAdjacency(Function):
    """A graph convolution with a constant sparse adjacency saved for backward: twice
    differentiable, since backward is a sparse matmul of the incoming gradient. naive
    gradgradcheck/saved_tensors: sparse saved tensors."""

    SPEC = spec_for(indices={"values": [[0, 1, 2, 2], [1, 2, 0, 1]], "dtype": "int64"},
                    x={"shape": [3, 2]})

    @staticmethod
    def forward(ctx, indices, x):
        adjacency = torch.sparse_coo_tensor(indices, x.new_ones(indices.shape[1]),
                                            (x.shape[0], x.shape[0])).coalesce()
        ctx.save_for_backward(adjacency)
        return torch.sparse.mm(adjacency, x)

    @staticmethod
    def backward(ctx, grad):
        (adjacency,) = ctx.saved_tensors
        return None, torch.sparse.mm(adjacency.t(), grad)


class NumpyOnceDifferentiable(Function):
    """backward computes with numpy and says so with @once_differentiable. naive gradgradcheck:
    the graph break; naive lint: numpy in backward."""

    SPEC = spec_for(x={"shape": [4]})

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return torch.from_numpy(np.cos(x.numpy()) * grad.numpy())


class AbsAtRandomPoints(Function):
    """|x| at random points: piecewise linear, second derivative zero. naive gradgradcheck: the
    zero Hessian; the incoming-gradient probe must see d(grad)/d(grad_output) = sign(x)."""

    SPEC = spec_for(x={"shape": [6]})

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.abs()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.sign()


class MaxPool1d(Function):
    """Max over windows of 2 with a gather in backward: piecewise linear. naive gradgradcheck: a
    constant gradient with respect to x."""

    SPEC = spec_for(x={"shape": [2, 6]})

    @staticmethod
    def forward(ctx, x):
        values, arg = x.reshape(x.shape[0], -1, 2).max(-1)
        index = arg + 2 * torch.arange(values.shape[1], device=values.device)
        ctx.save_for_backward(index)
        ctx.shape = x.shape
        return values

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        return grad.new_zeros(ctx.shape).scatter(1, index, grad)
