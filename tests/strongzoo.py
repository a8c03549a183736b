"""Functions whose bugs hide behind weak inputs, each a correct class and a ``...Bug``
subclass whose backward is wrong: rays that all miss, values that are all clamped, a mask that
selects nothing, a weight (a gain) of one, self-loop edges that make forward 0/0, a loop whose
count defaults to 0, and a forward that is 0/0 whatever its inputs."""
from __future__ import annotations

from typing import Any

import torch
from torch.autograd import Function


class RaySphere(Function):
    """The distance along each ray to a sphere of radius ``radius`` (0 where it misses)."""

    @staticmethod
    def forward(ctx: Any, origins: Any, directions: Any, center: Any, radius: float) -> Any:
        oc = origins - center
        a = (directions * directions).sum(-1)
        b = (oc * directions).sum(-1)
        disc = b * b - a * ((oc * oc).sum(-1) - radius * radius)
        hit = (disc > 0) & (b < 0)
        t = torch.where(hit, (-b - disc.clamp(min=0).sqrt()) / a, torch.zeros_like(b))
        ctx.save_for_backward(origins, directions, center, t, hit)
        return t

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        return RaySphere.gradients(ctx, grad, 1.0)

    @staticmethod
    def gradients(ctx: Any, grad: Any, sign: float) -> Any:
        origins, directions, center, t, hit = ctx.saved_tensors
        n = origins + t[..., None] * directions - center
        g = torch.where(hit, grad, torch.zeros_like(grad))[..., None] / (
            n * directions).sum(-1, keepdim=True)
        return -g * n, -g * n * t[..., None], sign * g * n, None


class RaySphereBug(RaySphere):
    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        return RaySphere.gradients(ctx, grad, -1.0)  # the centre's sign flipped


class Saturate(Function):
    @staticmethod
    def forward(ctx: Any, x: Any, low: float, high: float) -> Any:
        ctx.save_for_backward((x > low) & (x < high))
        return x.clamp(low, high)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        return grad * ctx.saved_tensors[0], None, None


class SaturateBug(Saturate):
    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        return grad * ctx.saved_tensors[0] * 0.5, None, None  # half the gradient inside


class MaskedMean(Function):
    @staticmethod
    def forward(ctx: Any, x: Any, keep: Any) -> Any:
        count = keep.sum(0).clamp(min=1)
        ctx.save_for_backward(keep, count)
        return (x * keep).sum(0) / count

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        keep, count = ctx.saved_tensors
        return grad / count * keep, None


class MaskedMeanBug(MaskedMean):
    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        keep = ctx.saved_tensors[0]
        return grad * keep, None  # the count forgotten


class Blend(Function):
    @staticmethod
    def forward(ctx: Any, a: Any, b: Any, gain: float = 1.0) -> Any:
        ctx.gain = gain
        return (a + b) * gain

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        return grad * ctx.gain, grad * ctx.gain, None


class BlendBug(Blend):
    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        return grad, grad, None  # the gain forgotten


class Scale(Function):
    @staticmethod
    def forward(ctx: Any, x: Any, weight: Any) -> Any:
        ctx.save_for_backward(x, weight)
        return x * weight

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        x, weight = ctx.saved_tensors
        return grad * weight, grad * x


class ScaleBug(Scale):
    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        x = ctx.saved_tensors[0]
        return grad, grad * x  # the weight forgotten


class EdgeDirections(Function):
    @staticmethod
    def forward(ctx: Any, pos: Any, edge_index: Any) -> Any:
        vec = pos[edge_index[1]] - pos[edge_index[0]]
        length = vec.norm(dim=-1, keepdim=True)
        unit = vec / length  # a self-loop: 0/0
        ctx.save_for_backward(unit, length, edge_index)
        ctx.n = pos.shape[0]
        return unit

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        unit, length, _ = ctx.saved_tensors
        return EdgeDirections.spread(ctx, (grad - (grad * unit).sum(-1, keepdim=True) * unit)
                                     / length), None

    @staticmethod
    def spread(ctx: Any, g: Any) -> Any:
        edge_index = ctx.saved_tensors[2]
        d_pos = g.new_zeros(ctx.n, g.shape[-1])
        d_pos.index_add_(0, edge_index[1], g)
        d_pos.index_add_(0, edge_index[0], -g)
        return d_pos


class EdgeDirectionsBug(EdgeDirections):
    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        return EdgeDirections.spread(ctx, grad / ctx.saved_tensors[1]), None  # no projection


class Integrate(Function):
    """``n_steps`` Euler steps of x' = tanh(x) * velocity (none by default)."""

    @staticmethod
    def forward(ctx: Any, x: Any, velocity: Any, n_steps: int = 0) -> Any:
        states = [x]
        for _ in range(n_steps):
            x = x + 0.1 * torch.tanh(x) * velocity
            states.append(x)
        ctx.save_for_backward(velocity, *states)
        return x

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        return Integrate.steps(ctx, grad, every=True)

    @staticmethod
    def steps(ctx: Any, grad: Any, every: bool) -> Any:
        velocity, *states = ctx.saved_tensors
        d_v, g = torch.zeros_like(velocity), grad
        for i, x in enumerate(reversed(states[:-1])):
            d_v = d_v + g * 0.1 * torch.tanh(x)
            if every or i == 0:
                g = g * (1 + 0.1 * velocity * (1 - torch.tanh(x) ** 2))
        return g, d_v, None


class IntegrateBug(Integrate):
    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        return Integrate.steps(ctx, grad, every=False)  # only the last step differentiated


class Ratio(Function):
    """(x - x) / (x - x): 0/0 whatever x is."""

    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        return (x - x) / (x - x)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        return grad * 0


class NoSteps(Function):
    """A loop that this build cannot run: its count must stay 0, and nothing is left to verify
    of it."""

    @staticmethod
    def forward(ctx: Any, x: Any, n_steps: int = 0) -> Any:
        if n_steps:
            raise NotImplementedError("stepping needs the CUDA build")
        return x * 2

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        return grad * 2, None


class Springs(Function):
    """Spring lengths along a graph's edges, named ``edges`` and read a row at a time."""

    @staticmethod
    def forward(ctx: Any, pos: Any, edges: Any) -> Any:
        d = pos[edges[1]] - pos[edges[0]]
        ctx.save_for_backward(d, edges)
        ctx.n = pos.shape[0]
        return d.norm(dim=-1)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        d, edges = ctx.saved_tensors
        g = grad[:, None] * d / d.norm(dim=-1, keepdim=True)
        out = g.new_zeros(ctx.n, d.shape[-1])
        out.index_add_(0, edges[1], g)
        out.index_add_(0, edges[0], -g)
        return out, None


class ClipFar(Function):
    """Values clipped at ``limit``; backward's clipping branch runs only for a value past it
    (a limit of 100 that no drawn value reaches: the branch goes unchecked)."""

    @staticmethod
    def forward(ctx, x, limit: float = 100.0):
        ctx.save_for_backward(x)
        ctx.limit = limit
        return x.clamp(-limit, limit)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        if x.abs().max() > ctx.limit:
            inside = (x.abs() <= ctx.limit).to(g.dtype)
            return g * inside * 2, None  # planted: only on the branch no drawn value takes
        return g, None
