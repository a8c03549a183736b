"""A kernel that only computes in float32, like many fused CUDA kernels.

float64 inputs are computed in float32 and cast back, so float64 finite differences see float32
round-off and gradcheck cannot judge it. Its spec declares that gradcheck failure and verifies
the kernel against a plain-PyTorch reference in the working dtype instead.
"""
from __future__ import annotations

import torch
from torch.autograd import Function


class Float32Softplus(Function):
    @staticmethod
    def forward(x):
        return torch.nn.functional.softplus(x.float()).to(x.dtype)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return (grad.float() * torch.sigmoid(x.float())).to(grad.dtype)


def softplus_reference(x):
    """The same math in plain PyTorch: autograd differentiates it in float64."""
    return torch.nn.functional.softplus(x)
