"""Batched SPD linear algebra."""
import torch
from torch.autograd.function import once_differentiable

from simkit._bugs import PLANTED


class CholeskyQuadForm(torch.autograd.Function):
    """y_b^T A_b^{-1} y_b for a batch of SPD matrices ``A [B, D, D]`` and vectors ``y [B, D]``
    (a Mahalanobis energy), through one Cholesky factorisation per matrix."""

    @staticmethod
    def forward(ctx, A, y):
        A = 0.5 * (A + A.mT)
        L = torch.linalg.cholesky(A)
        s = torch.cholesky_solve(y.unsqueeze(-1), L).squeeze(-1)
        ctx.save_for_backward(s)
        return (y * s).sum(-1)

    @staticmethod
    @once_differentiable  # saves the solve: not twice differentiable
    def backward(ctx, grad):
        (s,) = ctx.saved_tensors
        gs = grad[:, None] * s
        if PLANTED:  # planted: the outer product summed over the batch (right for B == 1)
            d_A = -(gs.T @ s).expand(s.shape[0], -1, -1)
        else:
            d_A = -gs[:, :, None] * s[:, None, :]
        return d_A, 2 * gs
