"""A fractional delay line (linear interpolation) as a custom op, with a learnable delay per
example."""
import torch


def _taps(x, delay):
    """Indices and weights of the two samples each output interpolates between."""
    T = x.shape[-1]
    pos = torch.arange(T, dtype=x.dtype, device=x.device) - delay[..., None]  # [B, T]
    i0 = torch.floor(pos)
    frac = pos - i0
    i0 = i0.long()
    i1 = i0 + 1
    ok0 = (i0 >= 0) & (i0 < T)
    ok1 = (i1 >= 0) & (i1 < T)
    return i0.clamp(0, T - 1), i1.clamp(0, T - 1), frac, ok0, ok1


@torch.library.custom_op("sigkit::fractional_delay", mutates_args=())
def fractional_delay(x: torch.Tensor, delay: torch.Tensor) -> torch.Tensor:
    """``x [B, T]`` delayed by ``delay [B]`` samples (fractional), zero before the start."""
    i0, i1, frac, ok0, ok1 = _taps(x, delay)
    x0 = torch.gather(x, -1, i0) * ok0
    x1 = torch.gather(x, -1, i1) * ok1
    return (1 - frac) * x0 + frac * x1


@fractional_delay.register_fake
def _(x, delay):
    return torch.empty_like(x)


def _setup_context(ctx, inputs, output):
    x, delay = inputs
    ctx.save_for_backward(x, delay)


def _backward(ctx, grad):
    x, delay = ctx.saved_tensors
    i0, i1, frac, ok0, ok1 = _taps(x, delay)
    x0 = torch.gather(x, -1, i0) * ok0
    x1 = torch.gather(x, -1, i1) * ok1
    dx = torch.zeros_like(x).scatter_add(-1, i0, grad * (1 - frac) * ok0)
    dx = dx.scatter_add(-1, i1, grad * frac * ok1)
    # d pos / d delay = -1, and d y / d pos = x1 - x0
    d_delay = -(grad * (x1 - x0)).sum(-1)
    return dx, d_delay


fractional_delay.register_autograd(_backward, setup_context=_setup_context)
