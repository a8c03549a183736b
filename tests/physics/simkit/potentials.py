"""Pairwise interatomic potentials."""
import math

import torch
from torch import nn
from torch.autograd.function import once_differentiable


class LennardJones(torch.autograd.Function):
    """Total Lennard-Jones energy 4 eps sum_{i<j} ((sigma/r)^12 - (sigma/r)^6) of ``pos [N, 3]``,
    with ``sigma`` and ``epsilon`` 0-dim tensors so that they can be fitted."""

    @staticmethod
    def forward(ctx, pos, sigma, epsilon):
        n = pos.shape[0]
        diff = pos[:, None, :] - pos[None, :, :]
        offdiag = ~torch.eye(n, dtype=torch.bool, device=pos.device)
        r2 = (diff * diff).sum(-1)
        r2 = torch.where(offdiag, r2, torch.ones_like(r2))
        sr6 = (sigma * sigma / r2) ** 3
        sr6 = torch.where(offdiag, sr6, torch.zeros_like(sr6))
        sr12 = sr6 * sr6
        energy = 2 * epsilon * (sr12 - sr6).sum()  # 0.5 * 4 eps over ordered pairs
        ctx.save_for_backward(diff, r2, sr6, sr12, sigma, epsilon, energy)
        return energy

    @staticmethod
    @once_differentiable  # saves intermediates: not twice differentiable
    def backward(ctx, grad):
        diff, r2, sr6, sr12, sigma, epsilon, energy = ctx.saved_tensors
        # dphi/d(r^2) for phi = 4 eps (sr12 - sr6)
        dphi = 4 * epsilon * (3 * sr6 - 6 * sr12) / r2
        d_pos = grad * 2 * (dphi[..., None] * diff).sum(dim=1)
        d_sigma = grad * 2 * epsilon * (12 * sr12 - 6 * sr6).sum() / sigma
        d_epsilon = grad * energy / epsilon
        return d_pos, d_sigma, d_epsilon


class LJPotential(nn.Module):
    """A Lennard-Jones potential with learnable (log) sigma and epsilon."""

    def __init__(self, sigma: float = 1.0, epsilon: float = 1.0):
        super().__init__()
        self.log_sigma = nn.Parameter(torch.tensor(math.log(sigma)))
        self.log_epsilon = nn.Parameter(torch.tensor(math.log(epsilon)))

    def forward(self, pos):
        return LennardJones.apply(pos, self.log_sigma.exp(), self.log_epsilon.exp())
