"""Planted bugs: each class is a copy of a correct Function in ``kernels`` with ONE bug.

- ``RMSNormLastBlockMask``: the backward masks its row loads by the tensor's numel
  (``row * N + cols < rows * N``, copied from an elementwise kernel) instead of by the row
  length (``cols < N``), so on a row's last partial block the next row's values enter the sum
  of squares that recomputes rstd; shows only when N is not a multiple of BLOCK and rows > 1
  (the last row's mask happens to be right).
- ``RMSNormWeightNotReduced``: the dw kernel assigns instead of accumulating over rows
  (``acc = ...`` for ``acc += ...``), so dw is the last row's contribution; shows only when
  rows > 1.
- ``LogSumExpLoopShort``: the forward peels the first block and its loop over the remaining
  blocks stops one block early (``range(1, cdiv(N, BLOCK) - 1)``); shows only when N > BLOCK.
- ``ScaledSiLUMissingFactor``: the backward forgets the ``scale`` factor; shows at every size
  whenever scale != 1.
- ``RotaryAssumesContiguousGrad``: the backward hands the incoming gradient to a kernel that
  indexes rows as contiguous without calling ``.contiguous()`` first; shows only when the
  incoming gradient is not contiguous (e.g. the output is sliced, transposed or expanded
  downstream).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl
from torch.autograd.function import once_differentiable

from .kernels import (
    logsumexp_bwd_kernel,
    rmsnorm_bwd_dw_kernel,
    rmsnorm_bwd_dx_kernel,
    rmsnorm_fwd_kernel,
    rotary_kernel,
    scaled_silu_fwd_kernel,
)

# ---------------------------------------------------------------- RMSNormLastBlockMask


@triton.jit
def rmsnorm_bwd_dx_flatmask_kernel(
    x_ptr, w_ptr, g_ptr, dx_ptr, rstd_ptr, N, numel, eps, BLOCK: tl.constexpr
):
    row = tl.program_id(0)
    sq = tl.zeros([BLOCK], dtype=tl.float32)
    dot = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        mask = row * N + cols < numel  # BUG: should be cols < N
        x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
        sq += x * x
        dot += g * w * x
    rstd = 1.0 / tl.sqrt(tl.sum(sq, axis=0) / N + eps)
    tl.store(rstd_ptr + row, rstd)
    c = tl.sum(dot, axis=0) * rstd * rstd * rstd / N
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
        dx = g * w * rstd - x * c
        tl.store(dx_ptr + row * N + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


class RMSNormLastBlockMask(torch.autograd.Function):
    """RMSNorm whose backward masks the last partial block by numel instead of by N."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        x, weight = x.contiguous(), weight.contiguous()
        rows, n = x.shape
        y = torch.empty_like(x)
        rmsnorm_fwd_kernel[(rows,)](x, weight, y, n, eps, BLOCK=16)
        ctx.save_for_backward(x, weight)
        ctx.eps = eps
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        x, weight = ctx.saved_tensors
        g = g.contiguous()
        rows, n = x.shape
        dx = torch.empty_like(x)
        dw = torch.empty_like(weight)
        rstd = torch.empty(rows, dtype=torch.float32, device=x.device)
        rmsnorm_bwd_dx_flatmask_kernel[(rows,)](
            x, weight, g, dx, rstd, n, x.numel(), ctx.eps, BLOCK=16
        )
        rmsnorm_bwd_dw_kernel[(triton.cdiv(n, 16),)](x, g, rstd, dw, rows, n, BLOCK=16)
        return dx, dw, None


# ---------------------------------------------------------------- RMSNormWeightNotReduced


@triton.jit
def rmsnorm_bwd_dw_lastrow_kernel(x_ptr, g_ptr, rstd_ptr, dw_ptr, rows, N, BLOCK: tl.constexpr):
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for row in range(0, rows):
        x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(rstd_ptr + row)
        acc = g * x * rstd  # BUG: should be acc += ...
    tl.store(dw_ptr + cols, acc.to(dw_ptr.dtype.element_ty), mask=mask)


class RMSNormWeightNotReduced(torch.autograd.Function):
    """RMSNorm whose dw keeps only the last row's contribution."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        x, weight = x.contiguous(), weight.contiguous()
        rows, n = x.shape
        y = torch.empty_like(x)
        rmsnorm_fwd_kernel[(rows,)](x, weight, y, n, eps, BLOCK=16)
        ctx.save_for_backward(x, weight)
        ctx.eps = eps
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        x, weight = ctx.saved_tensors
        g = g.contiguous()
        rows, n = x.shape
        dx = torch.empty_like(x)
        dw = torch.empty_like(weight)
        rstd = torch.empty(rows, dtype=torch.float32, device=x.device)
        rmsnorm_bwd_dx_kernel[(rows,)](x, weight, g, dx, rstd, n, ctx.eps, BLOCK=16)
        rmsnorm_bwd_dw_lastrow_kernel[(triton.cdiv(n, 16),)](x, g, rstd, dw, rows, n, BLOCK=16)
        return dx, dw, None


# ---------------------------------------------------------------- LogSumExpLoopShort


@triton.jit
def logsumexp_fwd_short_kernel(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    s = tl.sum(tl.exp(x - m), axis=0)
    for b in range(1, tl.cdiv(N, BLOCK) - 1):  # BUG: should be range(1, tl.cdiv(N, BLOCK))
        cols = b * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    out = m + tl.log(s)
    tl.store(out_ptr + row, out.to(out_ptr.dtype.element_ty))


class LogSumExpLoopShort(torch.autograd.Function):
    """LogSumExp whose forward loop over column blocks stops one block early."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, n = x.shape
        out = torch.empty(rows, dtype=x.dtype, device=x.device)
        logsumexp_fwd_short_kernel[(rows,)](x, out, n, BLOCK=16)
        ctx.save_for_backward(x, out)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        x, out = ctx.saved_tensors
        g = g.contiguous()
        rows, n = x.shape
        dx = torch.empty_like(x)
        logsumexp_bwd_kernel[(rows,)](x, out, g, dx, n, BLOCK=16)
        return dx


# ---------------------------------------------------------------- ScaledSiLUMissingFactor


@triton.jit
def scaled_silu_bwd_noscale_kernel(x_ptr, g_ptr, dx_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    sig = tl.sigmoid(x)
    dx = g * sig * (1.0 + x * (1.0 - sig))  # BUG: the factor scale is missing
    tl.store(dx_ptr + offs, dx.to(dx_ptr.dtype.element_ty), mask=mask)


class ScaledSiLUMissingFactor(torch.autograd.Function):
    """ScaledSiLU whose backward forgets the scale factor."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, scale: float) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        scaled_silu_fwd_kernel[(triton.cdiv(n, 32),)](x, y, n, scale, BLOCK=32)
        ctx.save_for_backward(x)
        ctx.scale = scale
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
        (x,) = ctx.saved_tensors
        g = g.contiguous()
        dx = torch.empty_like(x)
        n = x.numel()
        scaled_silu_bwd_noscale_kernel[(triton.cdiv(n, 32),)](x, g, dx, n, ctx.scale, BLOCK=32)
        return dx, None


# ---------------------------------------------------------------- RotaryAssumesContiguousGrad


class RotaryAssumesContiguousGrad(torch.autograd.Function):
    """Rotary whose backward indexes the incoming gradient as if it were contiguous."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        rows, h = cos.shape
        cos, sin = cos.contiguous(), sin.contiguous()
        xc = x.contiguous()
        rotary_kernel[(rows,)](xc, xc, cos, sin, h, 1.0, BLOCK=16)
        if xc is not x:
            x.copy_(xc)
        ctx.mark_dirty(x)
        ctx.save_for_backward(cos, sin)
        return x

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        cos, sin = ctx.saved_tensors
        rows, h = cos.shape
        # BUG: g.contiguous() is missing; the kernel reads row r at g_ptr + r * 2H
        dx = torch.empty_like(g, memory_format=torch.contiguous_format)
        rotary_kernel[(rows,)](g, dx, cos, sin, h, -1.0, BLOCK=16)
        return dx, None, None
