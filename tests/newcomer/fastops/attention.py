import torch
from torch.autograd.function import once_differentiable

from fastops._bugs import PLANTED


class OnlineSoftmaxAttention(torch.autograd.Function):
    """softmax(q k^T / sqrt(D)) v over key blocks of ``block_size``, with an online softmax."""

    @staticmethod
    def forward(ctx, q, k, v, block_size=16):
        B, H, L, D = q.shape
        scale = D ** -0.5
        m = q.new_full((B, H, L), float("-inf"))
        total = q.new_zeros((B, H, L))
        acc = torch.zeros_like(q)
        for start in range(0, L, block_size):
            kb, vb = k[:, :, start:start + block_size], v[:, :, start:start + block_size]
            s = q @ kb.transpose(-1, -2) * scale
            m_new = torch.maximum(m, s.amax(-1))
            p = torch.exp(s - m_new[..., None])
            correction = torch.exp(m - m_new)
            total = total * correction + p.sum(-1)
            acc = acc * correction[..., None] + p @ vb
            m = m_new
        out = acc / total[..., None]
        ctx.save_for_backward(q, k, v, out, m + total.log())
        ctx.block_size = block_size
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        q, k, v, out, lse = ctx.saved_tensors
        B, H, L, D = q.shape
        scale = D ** -0.5
        delta = (grad * out).sum(-1)
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for block, start in enumerate(range(0, L, ctx.block_size)):
            end = start + ctx.block_size
            kb, vb = k[:, :, start:end], v[:, :, start:end]
            p = torch.exp(q @ kb.transpose(-1, -2) * scale - lse[..., None])
            dv[:, :, start:end] = p.transpose(-1, -2) @ grad
            ds = p * (grad @ vb.transpose(-1, -2) - delta[..., None])
            dq += ds @ kb * scale
            # planted: the scale forgotten in every block after the first
            dk_scale = 1.0 if PLANTED and block > 0 else scale
            dk[:, :, start:end] = ds.transpose(-1, -2) @ q * dk_scale
        return dq, dk, dv, None
