"""Functions the benchmarks verify (correct ones, so every check runs to the end)."""
import torch
from torch.autograd import Function


class Softplus(Function):
    """Elementwise: the shape of most custom kernels."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.nn.functional.softplus(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.sigmoid(x)


class Bilinear(Function):
    """y = (x @ w) * x[:, :1]: two inputs, a matmul and a broadcast."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return (x @ w) * x[:, :1]

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        gx = gw = None
        scale = x[:, :1]
        if ctx.needs_input_grad[0]:
            gx = (grad * scale) @ w.t()
            gx[:, :1] += ((x @ w) * grad).sum(1, keepdim=True)
        if ctx.needs_input_grad[1]:
            gw = x.t() @ (grad * scale)
        return gx, gw


class SoftplusFunctional(Function):
    """Softplus in setup_context style: every composition check applies to it."""

    @staticmethod
    def forward(x):
        return torch.nn.functional.softplus(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.sigmoid(x)
