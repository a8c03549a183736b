"""A small physics training script for ``bench/record_time.py``: ten custom autograd Functions
(points and velocities in 3-D: cross products, norms over the coordinate dim) called in a
300-step loop with an optimizer. ``python bench/record_training.py [STEPS]``; a few seconds."""
from __future__ import annotations

import sys

import torch
from torch.autograd import Function


class Norm3(Function):
    """|v| over the coordinate dim of (N, 3) vectors."""

    @staticmethod
    def forward(ctx, v):
        n = torch.linalg.vector_norm(v, dim=-1)
        ctx.save_for_backward(v, n)
        return n

    @staticmethod
    def backward(ctx, g):
        v, n = ctx.saved_tensors
        return g.unsqueeze(-1) * v / n.unsqueeze(-1)


class Cross(Function):
    """a x b of (N, 3) vectors."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return torch.linalg.cross(a, b, dim=-1)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return torch.linalg.cross(b, g, dim=-1), torch.linalg.cross(g, a, dim=-1)


class Drag(Function):
    """Quadratic drag -c |v| v."""

    @staticmethod
    def forward(ctx, v, c):
        n = torch.linalg.vector_norm(v, dim=-1, keepdim=True)
        ctx.save_for_backward(v, n)
        ctx.c = c
        return -c * n * v

    @staticmethod
    def backward(ctx, g):
        v, n = ctx.saved_tensors
        radial = (g * v).sum(-1, keepdim=True) * v / n
        return -ctx.c * (n * g + radial), None


class Spring(Function):
    """Spring force -k (p - anchor) and its energy per particle."""

    @staticmethod
    def forward(ctx, p, anchor, k):
        ctx.save_for_backward(p, anchor)
        ctx.k = k
        return -k * (p - anchor)

    @staticmethod
    def backward(ctx, g):
        return -ctx.k * g, ctx.k * g, None


class Gravity(Function):
    """A constant downward acceleration, scaled by each particle's inverse mass."""

    @staticmethod
    def forward(ctx, force, mass):
        ctx.save_for_backward(force, mass)
        down = force.new_tensor([0.0, 0.0, -9.81])
        return force / mass.unsqueeze(-1) + down

    @staticmethod
    def backward(ctx, g):
        force, mass = ctx.saved_tensors
        m = mass.unsqueeze(-1)
        return g / m, -(g * force).sum(-1) / mass**2


class Step(Function):
    """Semi-implicit Euler: v' = v + dt a, p' = p + dt v'."""

    @staticmethod
    def forward(ctx, p, v, a, dt):
        ctx.dt = dt
        v2 = v + dt * a
        return p + dt * v2, v2

    @staticmethod
    def backward(ctx, gp, gv):
        dt = ctx.dt
        gv2 = gv + dt * gp
        return gp, gv2, dt * gv2, None


class Floor(Function):
    """A soft floor: softplus(-z) pushes particles up."""

    @staticmethod
    def forward(ctx, z, stiffness):
        ctx.save_for_backward(z)
        ctx.s = stiffness
        return torch.nn.functional.softplus(-stiffness * z) / stiffness

    @staticmethod
    def backward(ctx, g):
        (z,) = ctx.saved_tensors
        return -g * torch.sigmoid(-ctx.s * z), None


class Kinetic(Function):
    """Kinetic energy 0.5 m |v|^2 per particle."""

    @staticmethod
    def forward(ctx, v, mass):
        ctx.save_for_backward(v, mass)
        return 0.5 * mass * (v * v).sum(-1)

    @staticmethod
    def backward(ctx, g):
        v, mass = ctx.saved_tensors
        return (g * mass).unsqueeze(-1) * v, 0.5 * g * (v * v).sum(-1)


class Unit(Function):
    """v / |v| over the coordinate dim."""

    @staticmethod
    def forward(ctx, v):
        n = torch.linalg.vector_norm(v, dim=-1, keepdim=True)
        u = v / n
        ctx.save_for_backward(u, n)
        return u

    @staticmethod
    def backward(ctx, g):
        u, n = ctx.saved_tensors
        return (g - (g * u).sum(-1, keepdim=True) * u) / n


class Huber(Function):
    """A Huber loss on distances to a target, elementwise."""

    @staticmethod
    def forward(ctx, d, delta):
        ctx.save_for_backward(d)
        ctx.delta = delta
        a = d.abs()
        return torch.where(a < delta, 0.5 * d * d, delta * (a - 0.5 * delta))

    @staticmethod
    def backward(ctx, g):
        (d,) = ctx.saved_tensors
        return g * d.clamp(-ctx.delta, ctx.delta), None


def simulate(v0: torch.Tensor, spin: torch.Tensor, p0: torch.Tensor, mass: torch.Tensor,
             substeps: int = 4) -> torch.Tensor:
    p, v = p0, v0
    for _ in range(substeps):
        force = Spring.apply(p, p0, 2.0) + Drag.apply(v, 0.05) + Cross.apply(spin, v)
        a = Gravity.apply(force, mass)
        p, v = Step.apply(p, v, a, 0.01)
        lift = Floor.apply(p[:, 2], 10.0)
        p = p + torch.stack([torch.zeros_like(lift), torch.zeros_like(lift), lift], -1)
    return p, v


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    torch.manual_seed(0)
    n = 256
    p0 = torch.randn(n, 3)
    mass = torch.rand(n) + 0.5
    target = p0 + torch.tensor([1.0, 0.5, 0.0])
    v0 = (0.5 * torch.randn(n, 3)).requires_grad_()
    spin = (0.1 * torch.randn(n, 3)).requires_grad_()
    opt = torch.optim.Adam([v0, spin], lr=0.05)
    for step in range(steps):
        p, v = simulate(v0, spin, p0, mass)
        miss = Norm3.apply(p - target)
        loss = Huber.apply(miss, 0.5).mean() + 1e-3 * Kinetic.apply(v, mass).mean()
        loss = loss + 1e-3 * (Unit.apply(v + 1e-3) * target).sum(-1).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
