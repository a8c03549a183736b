"""Complex inputs and outputs: gradients are conjugated (Wirtinger calculus).

A broken Function gradcheck must catch, then correct complex Functions.
"""
from __future__ import annotations

from torch.autograd import Function

from zoo import spec_for

# ============================================================================ broken


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


class ComplexAbsSquared(Function):
    """|z|^2: a real output of a complex input. naive gradcheck/precision: complex Jacobians."""

    SPEC = spec_for(z={"shape": [3], "dtype": "complex64"})

    @staticmethod
    def forward(ctx, z):
        ctx.save_for_backward(z)
        return (z * z.conj()).real

    @staticmethod
    def backward(ctx, grad):
        (z,) = ctx.saved_tensors
        return 2 * grad * z


class ComplexExp(Function):
    """A holomorphic map: backward is grad * conj(exp(z)). naive checks: complex outputs."""

    SPEC = spec_for(z={"shape": [2, 3], "dtype": "complex64"})

    @staticmethod
    def forward(ctx, z):
        out = z.exp()
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * out.conj()
