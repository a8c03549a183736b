"""Finite differences on a regular grid."""
import torch
import torch.nn.functional as F

from simkit._bugs import PLANTED


def _laplacian(u, dx, dy):
    p = F.pad(u[None, None], (1, 1, 1, 1))[0, 0]  # zero (Dirichlet) boundary
    d2y = (p[2:, 1:-1] - 2 * u + p[:-2, 1:-1]) / (dy * dy)
    d2x = (p[1:-1, 2:] - 2 * u + p[1:-1, :-2]) / (dx * dx)
    return d2x + d2y


class GridLaplacian(torch.autograd.Function):
    """The 5-point Laplacian of a field ``u [H, W]`` (rows along y, columns along x) with zero
    boundary values and grid spacings ``dx``, ``dy``."""

    @staticmethod
    def forward(ctx, u, dx: float = 1.0, dy: float = 1.0):
        ctx.dx, ctx.dy = dx, dy
        return _laplacian(u, dx, dy)

    @staticmethod
    def backward(ctx, grad):
        dx, dy = ctx.dx, ctx.dy
        if PLANTED:  # planted: the x spacing used for the y axis too
            dy = dx
        # the zero-boundary 5-point stencil is symmetric: its adjoint is itself
        return _laplacian(grad, dx, dy), None, None
