"""gradcheck: first-order Jacobians from backward against finite differences, and backward's
linearity in its incoming gradient.

Broken Functions the check must catch, then correct Functions that a naive gradcheck would flag.
"""
from __future__ import annotations

import torch
from torch.autograd import Function
from torch.autograd.function import once_differentiable

from zoo import MAT, VEC, factory_case, spec_for

# ============================================================================ broken


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


class TransposedOutputWrongFactor(Function):
    """Its output is a non-contiguous view (a transpose, as einsum returns): the Jacobian
    diagnosis must not crash on it (it once wrote one-hot rows with .view(-1)), and must
    name the input."""

    EXPECT = ("gradcheck", "GV121", "x")
    SPEC = MAT

    @staticmethod
    def forward(ctx, x):
        return torch.einsum("ij->ji", x * 2)

    @staticmethod
    def backward(ctx, grad):
        return grad.t() * 3


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
        _, w = ctx.saved_tensors
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


class ClampsItsInputInPlace(Function):
    """A forward that clamps its input in place (undeclared) and saves it: the values stay
    below the bound, so one call's result is right, but bare gradcheck calls forward again on
    the same tensor, whose version the write bumps, and the first call's backward raises
    "modified by an inplace operation" (soft-DTW's forward writing inf into its cost matrix).
    gradverify's gradcheck is called as torch calls it too, and says so as mutation's
    consequence."""

    EXPECT = ("gradcheck", "GV121", None)
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        x.clamp_(max=1e6)
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


# ============================================================================ correct


class LargeSoftsign(Function):
    """Large enough for fast mode (360,000 Jacobian entries). naive gradcheck: the slow-mode
    full Jacobian would take minutes."""

    SPEC = spec_for(x={"shape": [20, 30]})

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x / (1 + x.abs())

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad / (1 + x.abs()) ** 2


def make_float32_sparse(generator):
    """Takes no dtype and returns float32, as most hand-written factories do."""
    rows = torch.tensor([0, 0, 2, 3, 4, 5, 5])
    cols = torch.tensor([1, 3, 0, 2, 4, 1, 0])
    values = torch.randn(7, generator=generator)
    dense = torch.randn(5, 3, generator=generator)
    return torch.stack([rows, cols]), values, 6, dense


class FactoryWithoutDtype(Function):
    """A sparse-dense matmul whose factory takes only ``generator`` and returns float32.
    naive gradcheck: using the factory's tensors as returned runs gradcheck in float32, which
    invents GV121 ("only rows ... wrong") and GV113 on a correct Function."""

    SPEC = factory_case("make_float32_sparse")

    @staticmethod
    def forward(ctx, indices, values, n_rows, dense):
        rows, cols = indices
        ctx.save_for_backward(indices, values, dense)
        out = dense.new_zeros(n_rows, dense.shape[1])
        return out.index_add(0, rows, values.unsqueeze(1) * dense.index_select(0, cols))

    @staticmethod
    def backward(ctx, grad):
        indices, values, dense = ctx.saved_tensors
        rows, cols = indices
        g_rows = grad.index_select(0, rows)
        grad_values = (g_rows * dense.index_select(0, cols)).sum(1) \
            if ctx.needs_input_grad[1] else None
        grad_dense = torch.zeros_like(dense).index_add(0, cols, values.unsqueeze(1) * g_rows) \
            if ctx.needs_input_grad[3] else None
        return None, grad_values, None, grad_dense


class Float32BackwardArithmetic(Function):
    """Multiplies the incoming gradient in float32 inside a once-differentiable backward (a
    float32 kernel). naive gradcheck linearity: backward(c g) against c backward(g) at float64
    precision, with a scale c that is not a power of two, sees float32 round-off as
    non-linearity."""

    SPEC = spec_for(x={"shape": [6]})

    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        return (grad.float() * 3).to(grad.dtype)


class ClampsACopyInPlace(Function):
    """Clamps a copy of its input in place. naive gradcheck (a forward with an in-place write
    called again on the same tensors): the write is into a tensor of its own, so every call
    sees the same input, and backward the same saved one."""

    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        y = x.clone()
        y.clamp_(max=1e6)
        ctx.save_for_backward(x)
        return y * y

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x.clamp(max=1e6) * grad
