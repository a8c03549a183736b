import torch


def rotate_half(x):
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


class RotaryInplace(torch.autograd.Function):
    """Rotary position embedding applied in place to x [B, H, L, D], with cos and sin [L, D]
    (each frequency repeated for both halves)."""

    @staticmethod
    def forward(ctx, x, cos, sin):
        B, H, L, D = x.shape
        rotated = rotate_half(x)
        x.mul_(cos).add_(rotated * sin)
        ctx.mark_dirty(x)
        ctx.save_for_backward(cos, sin)
        return x

    @staticmethod
    def backward(ctx, grad):
        cos, sin = ctx.saved_tensors
        # y = x * cos + rotate_half(x) * sin; rotate_half's transpose is -rotate_half
        return grad * cos - rotate_half(grad * sin), None, None
