"""setup_context style with forward-mode AD (jvp) and vmap support, as torch.func needs."""
from __future__ import annotations

import torch
from torch.autograd import Function


class ScaledTanh(Function):
    """y = scale * tanh(x); usable under torch.func.vmap, jvp, jacfwd and grad."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, scale: float):
        return torch.tanh(x) * scale

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, scale = inputs
        ctx.scale = scale
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    @staticmethod
    def backward(ctx, grad_y):
        (x,) = ctx.saved_tensors
        return grad_y * ctx.scale * (1 - torch.tanh(x) ** 2), None

    @staticmethod
    def jvp(ctx, x_tangent, scale_tangent):
        (x,) = ctx.saved_tensors
        return x_tangent * ctx.scale * (1 - torch.tanh(x) ** 2)
