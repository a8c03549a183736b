"""Complex inputs: gradients follow PyTorch's convention (conjugate Wirtinger derivatives)."""
from __future__ import annotations

from torch.autograd import Function


class ComplexMul(Function):
    """z * w for complex tensors. For a holomorphic f, backward returns grad * conj(df/dz)."""

    @staticmethod
    def forward(z, w):
        return z * w

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad):
        z, w = ctx.saved_tensors
        grad_z = grad * w.conj() if ctx.needs_input_grad[0] else None
        grad_w = grad * z.conj() if ctx.needs_input_grad[1] else None
        return grad_z, grad_w
