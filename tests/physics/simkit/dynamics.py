"""Neural-ODE pieces: a linear-tanh vector field and its explicit Euler integrator, with the
adjoint written out by hand so that the trajectory is not kept in the autograd graph."""
import torch
from torch.autograd.function import once_differentiable

from simkit._bugs import PLANTED


class TanhField(torch.autograd.Function):
    """The vector field f(x) = tanh(x @ W.T + b) of a batch of states ``x [B, D]``."""

    @staticmethod
    def forward(ctx, x, W, b):
        y = torch.tanh(x @ W.T + b)
        ctx.save_for_backward(x, W, y)
        return y

    @staticmethod
    def backward(ctx, grad):
        x, W, y = ctx.saved_tensors
        gz = grad * (1 - y * y)
        if PLANTED:  # planted: the transpose of W (right only for a symmetric W)
            d_x = gz @ W.T
        else:
            d_x = gz @ W
        return d_x, gz.T @ x, gz.sum(dim=0)


class AdjointEuler(torch.autograd.Function):
    """``n_steps`` explicit Euler steps of dx/dt = tanh(x @ W.T + b) from ``x0 [B, D]``.

    The backward pass runs the discrete adjoint: u_k = u_{k+1} + (u_{k+1} * dt * s_k) @ W,
    where s_k = 1 - tanh(z_k)^2 at step k, and accumulates the parameter gradients."""

    @staticmethod
    def forward(ctx, x0, W, b, dt: float, n_steps: int):
        x = x0
        states = []
        for _ in range(n_steps):
            states.append(x)
            x = x + dt * torch.tanh(x @ W.T + b)
        ctx.save_for_backward(W, b, *states)
        ctx.dt = dt
        return x

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        W, b, *states = ctx.saved_tensors
        dt = ctx.dt
        u = grad
        d_W = torch.zeros_like(W)
        d_b = torch.zeros_like(b)
        for x in reversed(states):
            s = 1 - torch.tanh(x @ W.T + b) ** 2
            gz = u * s * dt
            d_W = d_W + gz.T @ x
            d_b = d_b + gz.sum(dim=0)
            u = u + gz @ W
            if PLANTED:  # planted: a one-step (truncated) adjoint, earlier steps dropped
                break
        return u, d_W, d_b, None, None
