import torch
from torch.autograd.function import once_differentiable

from raykit._bugs import PLANTED


class Integrate(torch.autograd.Function):
    """``n_steps`` explicit Euler steps of x' = tanh(x) * velocity."""

    @staticmethod
    def forward(ctx, x, velocity, dt: float, n_steps: int):
        states = [x]
        for _ in range(n_steps):
            x = x + dt * torch.tanh(x) * velocity
            states.append(x)
        ctx.save_for_backward(velocity, *states)
        ctx.dt = dt
        return x

    @staticmethod
    @once_differentiable  # saves intermediates: not twice differentiable
    def backward(ctx, grad):
        velocity, *states = ctx.saved_tensors
        dt = ctx.dt
        d_v = torch.zeros_like(velocity)
        g = grad
        steps = list(reversed(states[:-1]))
        for i, x in enumerate(steps):
            d_v = d_v + g * dt * torch.tanh(x)
            if PLANTED and i > 0:  # planted: steps before the last treated as the identity
                continue
            g = g * (1 + dt * velocity * (1 - torch.tanh(x) ** 2))
        return g, d_v, None, None
