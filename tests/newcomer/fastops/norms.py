import torch
from torch.autograd.function import once_differentiable

from fastops._bugs import PLANTED


class FusedLayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps=1e-5):
        mean = x.mean(-1, keepdim=True)
        rstd = (x.var(-1, unbiased=False, keepdim=True) + eps).rsqrt()
        xhat = (x - mean) * rstd
        ctx.save_for_backward(xhat, weight, rstd)
        return xhat * weight + bias

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        xhat, weight, rstd = ctx.saved_tensors
        g = grad if PLANTED else grad * weight  # planted: the weight factor forgotten
        n = xhat.shape[-1]
        dx = rstd / n * (n * g - g.sum(-1, keepdim=True) - xhat * (g * xhat).sum(-1, keepdim=True))
        lead = tuple(range(grad.dim() - 1))
        return dx, (grad * xhat).sum(lead), grad.sum(lead), None
