import torch


class RotaryInplace(torch.autograd.Function):
    """Rotary position embedding applied in place to x [B, L, H, D] (D even)."""

    @staticmethod
    def forward(ctx, x, cos, sin):
        first, second = x[..., 0::2].clone(), x[..., 1::2].clone()
        c, s = cos[:, None, :], sin[:, None, :]
        x[..., 0::2] = first * c - second * s
        x[..., 1::2] = first * s + second * c
        ctx.mark_dirty(x)
        ctx.save_for_backward(cos, sin)
        return x

    @staticmethod
    def backward(ctx, grad):
        cos, sin = ctx.saved_tensors
        c, s = cos[:, None, :], sin[:, None, :]
        g1, g2 = grad[..., 0::2], grad[..., 1::2]
        out = torch.empty_like(grad)
        out[..., 0::2] = g1 * c + g2 * s
        out[..., 1::2] = -g1 * s + g2 * c
        return out, None, None
