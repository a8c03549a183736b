"""Framing and short-time spectra: ``x [B, T]`` -> frames ``[B, n_frames, W]`` -> magnitudes
``[B, n_frames, W // 2 + 1]`` -> filterbank energies ``[B, n_frames, n_bands]``."""
import math

import torch
from torch import nn
from torch.autograd.function import once_differentiable

from sigkit._bugs import PLANTED


class Frame(torch.autograd.Function):
    """Windowed frames of ``x [..., T]``: frame ``i`` is ``x[..., i*hop : i*hop + W] * window``.
    Frames overlap where ``hop < W``; backward overlap-adds the gradient into the signal."""

    @staticmethod
    def forward(ctx, x, window, hop: int):
        W = window.shape[0]
        frames = x.unfold(-1, W, hop)  # [..., n_frames, W]
        ctx.save_for_backward(x, window)
        ctx.hop = hop
        return frames * window

    @staticmethod
    def backward(ctx, grad):
        x, window = ctx.saved_tensors
        hop, W, T = ctx.hop, window.shape[0], x.shape[-1]
        lead = x.shape[:-1]
        n_frames = grad.shape[-2]
        g = grad.reshape(-1, n_frames, W)
        raw = x.reshape(-1, T).unfold(-1, W, hop)
        d_window = (g * raw).sum((0, 1))
        gw = g * window
        dx = torch.zeros(g.shape[0], T, dtype=grad.dtype, device=grad.device)
        for i in range(n_frames):
            s = i * hop
            if PLANTED:  # planted: overlap-add overwrites what the previous frame added
                dx[:, s:s + W] = gw[:, i]
            else:
                dx[:, s:s + W] += gw[:, i]
        return dx.reshape(*lead, T), d_window, None


def _dft_basis(W, dtype, device):
    n = torch.arange(W, dtype=dtype, device=device)
    k = torch.arange(W // 2 + 1, dtype=dtype, device=device)
    ang = 2 * math.pi * n[:, None] * k[None, :] / W
    return torch.cos(ang), -torch.sin(ang)  # [W, K] each


class StftMag(torch.autograd.Function):
    """The magnitude of the real DFT of each frame: ``frames [..., W] -> [..., W // 2 + 1]``."""

    @staticmethod
    def forward(ctx, frames, eps: float = 1e-10):
        W = frames.shape[-1]
        cos, sin = _dft_basis(W, frames.dtype, frames.device)
        flat = frames.reshape(-1, W)
        re, im = flat @ cos, flat @ sin
        mag = torch.sqrt(re * re + im * im + eps)
        ctx.save_for_backward(re / mag, im / mag, cos, sin)
        ctx.shape = frames.shape
        return mag.reshape(*frames.shape[:-1], cos.shape[1])

    @staticmethod
    @once_differentiable  # saves the phase (an intermediate): not twice differentiable
    def backward(ctx, grad):
        cos_ph, sin_ph, cos, sin = ctx.saved_tensors
        K = cos.shape[1]
        if PLANTED:  # planted: .view on the incoming gradient (raises on a strided one)
            g = grad.view(-1, K)
        else:
            g = grad.reshape(-1, K)
        d_flat = (g * cos_ph) @ cos.T + (g * sin_ph) @ sin.T
        return d_flat.reshape(ctx.shape), None


class FilterbankMatmul(torch.autograd.Function):
    """Band energies ``spec [B, F, K] @ weight.T`` with ``weight [n_bands, K]``."""

    @staticmethod
    def forward(ctx, spec, weight):
        ctx.save_for_backward(spec, weight)
        return spec @ weight.T

    @staticmethod
    def backward(ctx, grad):
        spec, weight = ctx.saved_tensors
        d_spec = grad @ weight
        if PLANTED:  # planted: the batch summed before the product (right only when B == 1)
            d_weight = grad.sum(0).T @ spec.sum(0)
        else:
            d_weight = torch.einsum("bfn,bfk->nk", grad, spec)
        return d_spec, d_weight


class Filterbank(nn.Module):
    """A learnable filterbank: ``n_bands`` triangular bands over ``n_freq`` bins to start from."""

    def __init__(self, n_freq: int, n_bands: int = 8):
        super().__init__()
        centers = torch.linspace(0, n_freq - 1, n_bands + 2)
        bins = torch.arange(n_freq, dtype=torch.float32)
        width = centers[1] - centers[0]
        tri = (1 - (bins[None, :] - centers[1:-1, None]).abs() / width).clamp(min=0)
        self.weight = nn.Parameter(tri)

    def forward(self, spec):
        return FilterbankMatmul.apply(spec, self.weight)
