"""contract: what autograd would reject or silently repair in backward's return value.

Broken Functions the check must catch, then correct Functions that a naive contract check would
flag.
"""
from __future__ import annotations

import torch
from torch.autograd import Function

from zoo import MAT, VEC, factory_case, spec_for

# ============================================================================ broken


class TooFewGradients(Function):
    EXPECT = ("contract", "GV102", None)
    SPEC = spec_for(x={"shape": [4]}, factor=2.0)

    @staticmethod
    def forward(ctx, x, factor):
        ctx.factor = factor
        return x * factor

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.factor


class TooManyGradients(Function):
    EXPECT = ("contract", "GV103", None)
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2, grad


class GradForNonTensor(Function):
    EXPECT = ("contract", "GV104", "dim")
    SPEC = spec_for(x={"shape": [3, 4]}, dim=1)

    @staticmethod
    def forward(ctx, x, dim):
        return x.cumsum(dim)

    @staticmethod
    def backward(ctx, grad):
        return grad.flip(1).cumsum(1).flip(1), torch.zeros(())


class GradWrongShape(Function):
    EXPECT = ("contract", "GV105", "x")
    SPEC = spec_for(x={"shape": [3, 4]})

    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def backward(ctx, grad):
        return (grad * 3).t()


class BiasGradUnsummed(Function):
    EXPECT = ("contract", "GV106", "bias")
    SEVERITY = "warning"
    SPEC = spec_for(x={"shape": [2, 3]}, bias={"shape": [3]})

    @staticmethod
    def forward(ctx, x, bias):
        return x + bias

    @staticmethod
    def backward(ctx, grad):
        return grad, grad


class GradFloat32(Function):
    EXPECT = ("contract", "GV107", "x")
    SEVERITY = "warning"
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return (grad * 2).float()


class GradForIndices(Function):
    EXPECT = ("contract", "GV108", "index")
    SEVERITY = "warning"
    SPEC = spec_for(x={"shape": [5]}, index={"values": [0, 2], "dtype": "int64"})

    @staticmethod
    def forward(ctx, x, index):
        ctx.save_for_backward(index)
        ctx.n = x.shape[0]
        return x[index]

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        return grad.new_zeros(ctx.n).index_add(0, index, grad), torch.zeros_like(index)


class BackwardArityWrong(Function):
    EXPECT = ("contract", "GV110", None)
    SPEC = MAT

    @staticmethod
    def forward(ctx, x):
        values, indices = x.max(1)
        ctx.mark_non_differentiable(indices)
        ctx.save_for_backward(indices)
        ctx.shape = x.shape
        return values, indices

    @staticmethod
    def backward(ctx, grad_values):
        (indices,) = ctx.saved_tensors
        return grad_values.new_zeros(ctx.shape).scatter(1, indices[:, None], grad_values[:, None])


class NonDiffOutputDepends(Function):
    EXPECT = ("contract", "GV111", None)
    SEVERITY = "warning"
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        normalised = x / x.norm()
        ctx.mark_non_differentiable(normalised)
        return x * 2, normalised

    @staticmethod
    def backward(ctx, grad, grad_normalised):
        return grad * 2


class GradIsNumber(Function):
    EXPECT = ("contract", "GV112", "x")
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        return x.sum()

    @staticmethod
    def backward(ctx, grad):
        return float(grad)


class BackwardRaises(Function):
    EXPECT = ("contract", "GV101", None)
    SPEC = spec_for(x={"shape": [2, 3]}, w={"shape": [3, 4]})

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x @ w

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        return grad @ w, grad @ x  # wrong shapes: raises


# ============================================================================ correct


class CountsAndMask(Function):
    """Returns a float, a bool mask and an integer count. naive contract: gradients for integer
    outputs; naive undefined_grad: three outputs, two of them not differentiable."""

    SPEC = spec_for(x={"shape": [6]})

    @staticmethod
    def forward(ctx, x):
        mask = x > 0
        count = mask.sum()
        ctx.mark_non_differentiable(mask, count)
        ctx.save_for_backward(mask)
        return x * mask, mask, count

    @staticmethod
    def backward(ctx, grad, grad_mask, grad_count):
        (mask,) = ctx.saved_tensors
        return grad * mask


def make_non_tensor_args(generator, dtype):
    x = torch.randn(2, 3, generator=generator, dtype=torch.float64).to(dtype).requires_grad_()
    return {"x": x, "n": 2, "scale": 0.5, "dims": (0, 1), "bias": None, "fn": torch.tanh}


class NonTensorArguments(Function):
    """ints, floats, tuples, None and a callable among the arguments. naive contract: a gradient
    slot for each; naive layout/saved_tensors: only tensors are changed."""

    SPEC = factory_case("make_non_tensor_args")

    @staticmethod
    def forward(ctx, x, n, scale, dims, bias, fn):
        ctx.save_for_backward(x)
        ctx.n, ctx.scale = n, scale
        out = (fn(x) * scale).pow(n)
        return out if bias is None else out + bias

    @staticmethod
    def backward(ctx, grad):
        # Recomputed from the saved input, not saved from forward (an intermediate computed
        # in forward carries no graph, and double backward through it would be wrong).
        (x,) = ctx.saved_tensors
        t = torch.tanh(x)
        dy = ctx.n * (t * ctx.scale).pow(ctx.n - 1) * grad
        return dy * ctx.scale * (1 - t * t), None, None, None, None, None


class QuickCumsum(Function):
    """LSS/BEVFusion's voxel pooling trick: a cumsum, then differences at the ends of runs of
    equal sorted ranks (a boolean keep mask saved for backward); the geometry passes through,
    marked non-differentiable. naive contract: the integer pass-through output."""

    SPEC = spec_for(x={"shape": [8, 2]},
                    geom={"values": [[0, 0], [0, 0], [1, 0], [1, 0], [1, 0], [2, 1], [3, 1],
                                     [3, 1]], "dtype": "int64"},
                    ranks={"values": [0, 0, 1, 1, 1, 2, 3, 3], "dtype": "int64"})

    @staticmethod
    def forward(ctx, x, geom, ranks):
        x = x.cumsum(0)
        kept = torch.ones(x.shape[0], device=x.device, dtype=torch.bool)
        kept[:-1] = ranks[1:] != ranks[:-1]
        x, geom = x[kept], geom[kept]
        x = torch.cat((x[:1], x[1:] - x[:-1]))
        ctx.save_for_backward(kept)
        ctx.mark_non_differentiable(geom)
        return x, geom

    @staticmethod
    def backward(ctx, grad_x, grad_geom):
        (kept,) = ctx.saved_tensors
        back = torch.cumsum(kept, 0)
        back[kept] -= 1
        return grad_x[back], None, None


class FloatOutputMarkedConstant(Function):
    """A norm used as a stop-gradient scale: the second output is float but marked
    non-differentiable on purpose. naive gradcheck: its numerical derivative is not zero. The
    contract's GV111 warning (that gradient path is silently zero) is the documented answer."""

    WARNS = {"contract": "GV111"}  # noqa: RUF012
    SPEC = spec_for(x={"shape": [4]})

    @staticmethod
    def forward(ctx, x):
        norm = x.norm()
        ctx.mark_non_differentiable(norm)
        return x * 2, norm

    @staticmethod
    def backward(ctx, grad, grad_norm):
        return grad * 2
