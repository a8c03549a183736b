"""A zoo of Functions for the tests.

Broken ones carry ``EXPECT = (check, code, input)``: the check that must catch them, the code
it must report, and the input it must name (None when no single input is concerned).
Correct ones carry ``EXPECT = None`` and must fail no check. Each carries its ``SPEC``.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch
from torch.autograd import Function
from torch.autograd.function import once_differentiable

VEC = {"cases": [{"name": "vec", "args": {"x": {"shape": [5]}}}]}
MAT = {"cases": [{"name": "mat", "args": {"x": {"shape": [2, 3]}}}]}


def spec_for(*args, **named):
    return {"cases": [{"name": "c", "args": dict(named) if named else list(args)}]}


# ============================================================================ broken: contract


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


# ============================================================================ broken: gradcheck


class SinWrongSign(Function):
    EXPECT = ("gradcheck", "GV121", "x")
    PATTERN = "sign flipped"
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return -grad * x.cos()


class SquareMissingFactor(Function):
    EXPECT = ("gradcheck", "GV121", "x")
    PATTERN = "off by a constant factor 0.5"
    SPEC = MAT

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x


class WeightGradZero(Function):
    EXPECT = ("gradcheck", "GV121", "w")
    PATTERN = "zero gradient"
    SPEC = spec_for(x={"shape": [3]}, w={"shape": [3]})

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        return grad * w, None


class IgnoresIncomingGrad(Function):
    EXPECT = ("gradcheck", "GV121", "x")
    PATTERN = "not multiplied by the incoming gradient"
    SPEC = MAT

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.exp()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return x.exp()


class GuidedReluDropsNegative(Function):
    """Guided backprop (monai's _AutoGradReLU): passes bare gradcheck in both modes, which only
    feed non-negative incoming gradients."""

    EXPECT = ("gradcheck", "GV127", "x")
    PATTERN = "negative incoming gradients are dropped"
    SPEC = spec_for(x={"shape": [2, 3], "init": "uniform", "low": -2, "high": 2})

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (x > 0) * (grad > 0)


class ClipsIncomingGrad(Function):
    """Clips the incoming gradient to [-1, 1]: one-hot +1 probes never see it."""

    EXPECT = ("gradcheck", "GV127", "x")
    SPEC = spec_for(x={"shape": [6]})

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad.clamp(-1, 1) * 2 * x


class MatmulTransposedGrad(Function):
    EXPECT = ("gradcheck", "GV121", "b")
    PATTERN = "transposed"
    SPEC = spec_for(a={"shape": [2, 3]}, b={"shape": [3, 3]})

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a @ b

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return grad @ b.t(), (a.t() @ grad).t()


class FirstRowWrong(Function):
    EXPECT = ("gradcheck", "GV121", "x")
    PATTERN = "only rows [0]"
    SPEC = spec_for(x={"shape": [4, 3]})

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        g = grad * 2
        g[0] = 0
        return g


class SecondInputWrong(Function):
    """Only the second input's gradient is wrong: the finding must name it."""

    EXPECT = ("gradcheck", "GV121", "scale")
    SPEC = spec_for(x={"shape": [2, 3]}, scale={"shape": [3]})

    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x, scale)
        return x * scale

    @staticmethod
    def backward(ctx, grad):
        x, scale = ctx.saved_tensors
        return grad * scale, (grad * x).sum(0) + 0.1


class ReluAtZero(Function):
    """A correct ReLU evaluated exactly at its kink: a spec problem, reported as a warning."""

    EXPECT = ("gradcheck", "GV122", "x")
    SEVERITY = "warning"
    SPEC = spec_for(x={"values": [0.0, 0.0, 1.0], "dtype": "float64"})

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (x > 0).to(grad.dtype)


# ============================================================================ broken: gradgradcheck


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


# ============================================================================ broken: needs_input_grad


class UnboundWhenPartial(Function):
    EXPECT = ("needs_input_grad", "GV201", "w")
    SPEC = spec_for(x={"shape": [2, 3]}, w={"shape": [3, 4]})

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x @ w

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        if ctx.needs_input_grad[0]:
            gx = grad @ w.t()
            shared = x.t()
        if ctx.needs_input_grad[1]:
            gw = shared @ grad
        return gx if ctx.needs_input_grad[0] else None, gw if ctx.needs_input_grad[1] else None


class WrongNeedsIndex(Function):
    EXPECT = ("needs_input_grad", "GV202", "w")
    SPEC = spec_for(x={"shape": [3]}, w={"shape": [3]})

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        gx = grad * w if ctx.needs_input_grad[0] else None
        gw = grad * x if ctx.needs_input_grad[0] else None  # wrong index
        return gx, gw


class WastedGradient(Function):
    EXPECT = ("needs_input_grad", "GV204", "w")
    SEVERITY = "warning"
    SPEC = spec_for(x={"shape": [2, 3]}, w={"shape": [2, 3], "requires_grad": False})

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        return grad * w, grad * x


class ForwardNeedsGrad(Function):
    EXPECT = ("needs_input_grad", "GV205", None)
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        if not x.requires_grad:
            raise RuntimeError("expected an input that requires grad")
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


# ============================================================================ broken: saved_tensors


class OutputOnCtx(Function):
    EXPECT = ("saved_tensors", "GV211", None)
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.y = y
        return y

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.y


class InputOnCtx(Function):
    EXPECT = ("saved_tensors", "GV213", "x")
    SPEC = spec_for(x={"shape": [4]}, w={"shape": [4]})

    @staticmethod
    def forward(ctx, x, w):
        ctx.x = x
        ctx.save_for_backward(w)
        return x * w

    @staticmethod
    def backward(ctx, grad):
        (w,) = ctx.saved_tensors
        return grad * w, grad * ctx.x


class DataAliasSaved(Function):
    """Saving `.data` drops the version counter: in-place changes go unnoticed."""

    EXPECT = ("saved_tensors", "GV213", "x")
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x.data)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


class IntermediateOnCtx(Function):
    EXPECT = ("saved_tensors", "GV212", None)
    SEVERITY = "warning"
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        ctx.cos = x.cos()
        return x.sin()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        return grad * ctx.cos


# ============================================================================ broken: mutation


class ForwardMutatesInput(Function):
    EXPECT = ("mutation", "GV221", "x")
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        return x * 1

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


class BackwardMutatesSaved(Function):
    EXPECT = ("mutation", "GV222", "x")
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.mul_(2)


class SavedThenScaled(Function):
    """The formula is right for the value saved; forward scales it in place afterwards, and
    autograd records versions only when forward returns."""

    EXPECT = ("mutation", "GV224", "x")
    SPEC = spec_for(x={"shape": [5]}, a=2.0)

    @staticmethod
    def forward(ctx, x, a):
        t = torch.tanh(x)
        ctx.save_for_backward(t)
        ctx.a = a
        t.mul_(a)
        return t.clone()

    @staticmethod
    def backward(ctx, grad):
        (t,) = ctx.saved_tensors
        return grad * ctx.a * (1 - t * t), None


class BackwardMutatesGrad(Function):
    EXPECT = ("mutation", "GV223", None)
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def backward(ctx, grad):
        return grad.mul_(3)


# ============================================================================ broken: undefined_grad


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


# ============================================================================ broken: determinism


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


# ============================================================================ broken: layout


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


# ============================================================================ broken: lint


class SavesTwice(Function):
    EXPECT = ("lint", "GV264", None)
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


class LegacyAPIs(Function):
    EXPECT = ("lint", "GV261", None)
    SEVERITY = "warning"
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_variables
        return 2 * x * grad


class DataInBackward(Function):
    EXPECT = ("lint", "GV263", None)
    SEVERITY = "warning"
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 2 + 0 * x.data


# ============================================================================ broken: forward_ad


class WrongJvp(Function):
    EXPECT = ("forward_ad", "GV301", "x")
    PATTERN = "sign flipped"
    SPEC = VEC

    @staticmethod
    def forward(x):
        return x.sin()

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.cos()

    @staticmethod
    def jvp(ctx, x_t):
        (x,) = ctx.saved_tensors
        return -x.cos() * x_t


class JvpWithoutSavedInput(Function):
    EXPECT = ("forward_ad", "GV301", "x")
    SPEC = VEC

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

    @staticmethod
    def jvp(ctx, x_t):
        return x_t   # forgot to multiply by exp(x)


# ============================================================================ broken: vmap


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


# ============================================================================ broken: precision


class NaiveLogSumExp(Function):
    EXPECT = ("precision", "GV321", None)
    SPEC = spec_for(x={"shape": [2, 3], "init": "uniform", "low": 85, "high": 95})

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.exp().sum(-1).log()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        e = x.exp()
        return grad.unsqueeze(-1) * e / e.sum(-1, keepdim=True)


class Float16Overflow(Function):
    """Fine in float32, overflows in float16: the spec checks float16 via the check's option."""

    EXPECT = ("precision", "GV321", None)
    SPEC = {"checks": {"precision": {"dtype": "float16"}},
            "cases": [{"args": {"x": {"shape": [4], "init": "uniform", "low": 10, "high": 12}}}]}

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.exp() / 1e3

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.exp() / 1e3


class Cancellation(Function):
    EXPECT = ("precision", "GV322", None)
    SEVERITY = "warning"
    SPEC = spec_for(x={"shape": [5], "init": "uniform", "low": 0, "high": 1})

    @staticmethod
    def forward(ctx, x):
        return (x + 1e5) - 1e5

    @staticmethod
    def backward(ctx, grad):
        return grad


class OneMinusCosTextbook(Function):
    """y = x - sin(x) with the textbook backward g * (1 - cos x): for x ~ 1e-3 the float32
    gradient is off by about 10% in norm (float64 hides it)."""

    EXPECT = ("precision", "GV322", None)
    SPEC = spec_for(x={"shape": [20], "init": "uniform", "low": 1e-4, "high": 1e-3})

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x - torch.sin(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (1 - torch.cos(x))


class VarianceCancels(Function):
    """A population variance whose backward is 2 (n x - sum x) / n**2: for data with mean 1e4
    and std 0.01 the float32 gradient is tens of percent off."""

    EXPECT = ("precision", "GV322", "x")
    SPEC = spec_for(x={"shape": [20], "init": "normal", "mean": 1e4, "std": 0.01})

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.var(unbiased=False)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        n = x.numel()
        return grad * 2 * (n * x - x.sum()) / n ** 2


# ============================================================================ broken: declared


class SpikeFloat32Surrogate(Function):
    """snntorch's surrogate spikes: forward returns float32 whatever the input dtype, and the
    spec declares gradcheck's failure. Bare gradgradcheck fails (float32 round-off), so ours must
    run after the expected failure and fail too."""

    EXPECT = ("gradgradcheck", "GV141", None)
    SPEC = {**spec_for(x={"shape": [4]}, alpha=2.0),
            "expect": {"gradcheck": "surrogate gradient by design"}}

    @staticmethod
    def forward(ctx, x, alpha):
        ctx.save_for_backward(x)
        ctx.alpha = alpha
        return (x > 0).float()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        a = ctx.alpha
        return a / 2 / (1 + (torch.pi / 2 * a * x) ** 2) * grad, None


# ============================================================================ broken: reference


def softplus_reference(x):
    return torch.nn.functional.softplus(x)


class WrongKernelGradient(Function):
    EXPECT = ("reference", "GV332", "x")
    SPEC = {"reference": "zoo:softplus_reference",
            "expect": {"gradcheck": "float32 kernel"},
            "cases": [{"args": {"x": {"shape": [6]}}}]}

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.nn.functional.softplus(x.float()).to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return (grad.float() * torch.sigmoid(2 * x.float())).to(grad.dtype)


class WrongKernelOutput(Function):
    EXPECT = ("reference", "GV331", None)
    SPEC = {"reference": "zoo:softplus_reference",
            "cases": [{"args": {"x": {"shape": [6]}}}]}

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.nn.functional.softplus(x) * 1.01

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.sigmoid(x) * 1.01


# ============================================================================ broken: compile


class ToListForward(Function):
    EXPECT = ("compile", "GV351", None)
    SPEC = {"checks": {"compile": True}, "cases": [{"args": {"x": {"shape": [3]}}}]}

    @staticmethod
    def forward(ctx, x):
        return torch.tensor([v * 2 for v in x.tolist()], dtype=x.dtype)

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


class DataDependentBranch(Function):
    EXPECT = ("compile", "GV351", None)
    SPEC = {"checks": {"compile": True}, "cases": [{"args": {"x": {"shape": [3]}}}]}

    @staticmethod
    def forward(ctx, x):
        if x.sum().item() > 0:
            return x * 2
        return x * 3

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


# ============================================================================ broken: complex


class ComplexMulNoConj(Function):
    EXPECT = ("gradcheck", "GV121", "z")
    SPEC = spec_for(z={"shape": [3], "dtype": "complex64"}, w={"shape": [3], "dtype": "complex64"})

    @staticmethod
    def forward(ctx, z, w):
        ctx.save_for_backward(z, w)
        return z * w

    @staticmethod
    def backward(ctx, grad):
        z, w = ctx.saved_tensors
        return grad * w, grad * z   # missing .conj()


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
    SPEC = {"cases": [{"name": "none", "args": [{"shape": [2, 3]}, None]},
                      {"name": "bias", "args": [{"shape": [2, 3]}, {"shape": [3]}]}]}

    @staticmethod
    def forward(ctx, x, bias: Optional[torch.Tensor] = None):
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


class ComplexScale(Function):
    """Correct complex Function."""

    EXPECT = None
    SPEC = spec_for(z={"shape": [2, 3], "dtype": "complex64"})

    @staticmethod
    def forward(ctx, z):
        ctx.save_for_backward(z)
        return z * z

    @staticmethod
    def backward(ctx, grad):
        (z,) = ctx.saved_tensors
        return grad * (2 * z).conj()


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


BROKEN = [obj for obj in list(globals().values())
          if isinstance(obj, type) and issubclass(obj, Function) and obj is not Function
          and getattr(obj, "EXPECT", None)]
CORRECT = [obj for obj in list(globals().values())
           if isinstance(obj, type) and issubclass(obj, Function) and obj is not Function
           and hasattr(obj, "EXPECT") and obj.EXPECT is None]
