import torch

from raykit._bugs import PLANTED


class Saturate(torch.autograd.Function):
    """Values clamped to [low, high]."""

    @staticmethod
    def forward(ctx, x, low: float, high: float):
        inside = (x > low) & (x < high)
        ctx.save_for_backward(inside)
        return x.clamp(low, high)

    @staticmethod
    def backward(ctx, grad):
        (inside,) = ctx.saved_tensors
        scale = 0.5 if PLANTED else 1.0  # planted: half the gradient inside the range
        return grad * inside * scale, None, None


class MaskedMean(torch.autograd.Function):
    """The mean over rows of the rows a mask keeps (0 where it keeps none)."""

    @staticmethod
    def forward(ctx, x, keep):
        count = keep.sum(0).clamp(min=1)
        ctx.save_for_backward(keep, count)
        return (x * keep).sum(0) / count

    @staticmethod
    def backward(ctx, grad):
        keep, count = ctx.saved_tensors
        if PLANTED:  # planted: the rows the mask keeps given the gradient of the others
            return grad / count * ~keep, None
        return grad / count * keep, None


class WeightedBlend(torch.autograd.Function):
    """a * weight + b * (1 - weight), scaled by ``gain``."""

    @staticmethod
    def forward(ctx, a, b, weight, gain: float = 1.0):
        ctx.save_for_backward(weight, a, b)
        ctx.gain = gain
        return (a * weight + b * (1 - weight)) * gain

    @staticmethod
    def backward(ctx, grad):
        weight, a, b = ctx.saved_tensors
        g = grad if PLANTED else grad * ctx.gain  # planted: the gain forgotten
        return g * weight, g * (1 - weight), g * (a - b), None
