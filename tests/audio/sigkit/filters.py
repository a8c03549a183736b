"""Recursive and FIR filters over the last (time) axis of a signal ``[..., T]``."""
import torch
from torch.autograd.function import once_differentiable

from sigkit._bugs import PLANTED


class OnePole(torch.autograd.Function):
    """A one-pole low-pass: ``y[t] = (1 - a) * x[t] + a * y[t - 1]``, with ``a`` a learnable
    0-dim tensor in (0, 1) (the smoothing coefficient)."""

    @staticmethod
    def forward(ctx, x, a):
        T = x.shape[-1]
        y = torch.empty_like(x)
        prev = torch.zeros_like(x[..., 0])
        for t in range(T):
            prev = (1 - a) * x[..., t] + a * prev
            y[..., t] = prev
        ctx.save_for_backward(x, a, y)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        x, a, y = ctx.saved_tensors
        T = x.shape[-1]
        dx = torch.empty_like(grad)
        da = torch.zeros((), dtype=grad.dtype)
        acc = torch.zeros_like(grad[..., 0])
        for t in reversed(range(T)):
            acc = grad[..., t] + a * acc
            dx[..., t] = (1 - a) * acc
            y_prev = y[..., t - 1] if t > 0 else torch.zeros_like(acc)
            da = da + (acc * (y_prev - x[..., t])).sum()
        return dx, da.reshape(a.shape)


class PreEmphasis(torch.autograd.Function):
    """The pre-emphasis FIR ``y[t] = x[t] - coef * x[t - 1]`` (``y[0] = x[0]``)."""

    @staticmethod
    def forward(ctx, x, coef: float = 0.97):
        y = x.clone()
        y[..., 1:] -= coef * x[..., :-1]
        ctx.coef = coef
        return y

    @staticmethod
    def backward(ctx, grad):
        dx = grad.clone()
        dx[..., :-1] -= ctx.coef * grad[..., 1:]
        return dx, None


class CombReverb(torch.autograd.Function):
    """A feedback comb filter: ``y[t] = x[t] + feedback * y[t - delay]``. ``delay`` is in
    samples; ``feedback`` a learnable 0-dim tensor (|feedback| < 1 for a stable tail)."""

    @staticmethod
    def forward(ctx, x, feedback, delay: int):
        T = x.shape[-1]
        y = x.clone()
        for start in range(delay, T, delay):
            stop = min(start + delay, T)
            y[..., start:stop] += feedback * y[..., start - delay:stop - delay]
        ctx.save_for_backward(feedback, y)
        ctx.delay = delay
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        feedback, y = ctx.saved_tensors
        delay = ctx.delay
        T = grad.shape[-1]
        acc = grad.clone()  # dL/dy[t], including what flows back through the feedback
        if not PLANTED:  # planted (when set): the feedback path dropped from dx
            starts = list(range(delay, T, delay))
            for start in reversed(starts):
                stop = min(start + delay, T)
                acc[..., start - delay:stop - delay] += feedback * acc[..., start:stop]
        d_feedback = (acc[..., delay:] * y[..., :-delay]).sum() if delay < T else acc.sum() * 0
        return acc, d_feedback.reshape(feedback.shape), None
