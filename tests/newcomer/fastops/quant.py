import torch

from fastops._bugs import PLANTED


class StraightThroughQuantize(torch.autograd.Function):
    """Rounds to ``bits``-bit levels in [-1, 1]; the gradient passes straight through where the
    input is inside the range (a surrogate gradient by design)."""

    @staticmethod
    def forward(ctx, x, bits=8):
        levels = 2 ** (bits - 1) - 1
        ctx.save_for_backward(x)
        ctx.bits = bits
        return torch.round(x.clamp(-1, 1) * levels) / levels

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        inside = x.abs() <= 1
        if ctx.bits == 8 and PLANTED:  # planted: the 8-bit fast path masks in place
            return grad.mul_(inside), None
        return grad * inside, None
