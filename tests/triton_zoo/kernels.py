"""Correct Triton kernels wrapped in autograd Functions (and one ``triton_op``).

Every kernel loads its inputs, converts them to float32, computes, and stores in the output
pointer's dtype, so a float64 call is only float32-accurate. Tiles are small (``BLOCK=16`` or
``32``, a literal at each launch) so interpreter runs stay fast; every load and store is masked
for the last partial block. Run with ``TRITON_INTERPRET=1`` for CPU tensors.

- ``RMSNorm.apply(x, weight, eps)``: x [rows, N], weight [N] -> y [rows, N]; differentiable in
  x and weight. One program per row, a loop over column blocks; the backward recomputes the
  row's rstd, and dw is reduced over rows by a second kernel (one program per column block, a
  loop over rows).
- ``LogSumExp.apply(x)``: x [rows, N] -> [rows]; online max/sum over column blocks.
- ``Rotary.apply(x, cos, sin)``: x [rows, 2H] rotated in place (``mark_dirty``) by cos/sin
  [rows, H]; differentiable in x only.
- ``ScaledSiLU.apply(x, scale)``: y = x * sigmoid(x) * scale, elementwise over numel.
- ``mul_add(x, y)``: the triton_op ``gvzoo::mul_add``, out = x * y + x.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl
from torch.autograd.function import once_differentiable
from torch.library import triton_op, wrap_triton

# ---------------------------------------------------------------- RMSNorm


@triton.jit
def rmsnorm_fwd_kernel(x_ptr, w_ptr, y_ptr, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=0.0).to(tl.float32)
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        y = x * rstd * w
        tl.store(y_ptr + row * N + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def rmsnorm_bwd_dx_kernel(x_ptr, w_ptr, g_ptr, dx_ptr, rstd_ptr, N, eps, BLOCK: tl.constexpr):
    """dx for one row; recomputes rstd (the forward saves none) and stores it for the dw kernel."""
    row = tl.program_id(0)
    sq = tl.zeros([BLOCK], dtype=tl.float32)
    dot = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
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


@triton.jit
def rmsnorm_bwd_dw_kernel(x_ptr, g_ptr, rstd_ptr, dw_ptr, rows, N, BLOCK: tl.constexpr):
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for row in range(0, rows):
        x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(rstd_ptr + row)
        acc += g * x * rstd
    tl.store(dw_ptr + cols, acc.to(dw_ptr.dtype.element_ty), mask=mask)


class RMSNorm(torch.autograd.Function):
    """y = x / sqrt(mean(x^2, row) + eps) * weight; x [rows, N], weight [N], eps a float."""

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
        rmsnorm_bwd_dw_kernel[(triton.cdiv(n, 16),)](x, g, rstd, dw, rows, n, BLOCK=16)
        return dx, dw, None


# ---------------------------------------------------------------- LogSumExp


@triton.jit
def logsumexp_fwd_kernel(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    s = tl.sum(tl.exp(x - m), axis=0)
    for b in range(1, tl.cdiv(N, BLOCK)):
        cols = b * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    out = m + tl.log(s)
    tl.store(out_ptr + row, out.to(out_ptr.dtype.element_ty))


@triton.jit
def logsumexp_bwd_kernel(x_ptr, lse_ptr, g_ptr, dx_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    lse = tl.load(lse_ptr + row).to(tl.float32)
    g = tl.load(g_ptr + row).to(tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
        dx = g * tl.exp(x - lse)
        tl.store(dx_ptr + row * N + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


class LogSumExp(torch.autograd.Function):
    """log(sum(exp(x), row)) for x [rows, N] -> [rows]; backward g[:, None] * softmax(x)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, n = x.shape
        out = torch.empty(rows, dtype=x.dtype, device=x.device)
        logsumexp_fwd_kernel[(rows,)](x, out, n, BLOCK=16)
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


# ---------------------------------------------------------------- Rotary (in place)


@triton.jit
def rotary_kernel(in_ptr, out_ptr, cos_ptr, sin_ptr, H, sign, BLOCK: tl.constexpr):
    """Rotate the halves of one contiguous row [2H] by (cos, sign * sin); in_ptr may be out_ptr."""
    row = tl.program_id(0)
    for off in range(0, H, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        mask = cols < H
        x1 = tl.load(in_ptr + row * 2 * H + cols, mask=mask, other=0.0).to(tl.float32)
        x2 = tl.load(in_ptr + row * 2 * H + H + cols, mask=mask, other=0.0).to(tl.float32)
        c = tl.load(cos_ptr + row * H + cols, mask=mask, other=0.0).to(tl.float32)
        s = tl.load(sin_ptr + row * H + cols, mask=mask, other=0.0).to(tl.float32) * sign
        y1 = x1 * c - x2 * s
        y2 = x1 * s + x2 * c
        tl.store(out_ptr + row * 2 * H + cols, y1.to(out_ptr.dtype.element_ty), mask=mask)
        tl.store(out_ptr + row * 2 * H + H + cols, y2.to(out_ptr.dtype.element_ty), mask=mask)


class Rotary(torch.autograd.Function):
    """Rotary embedding of x [rows, 2H] in place by cos, sin [rows, H] (not differentiable)."""

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
        g = g.contiguous()
        dx = torch.empty_like(g)
        rotary_kernel[(rows,)](g, dx, cos, sin, h, -1.0, BLOCK=16)
        return dx, None, None


# ---------------------------------------------------------------- ScaledSiLU


@triton.jit
def scaled_silu_fwd_kernel(x_ptr, y_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = x * tl.sigmoid(x) * scale
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def scaled_silu_bwd_kernel(x_ptr, g_ptr, dx_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    sig = tl.sigmoid(x)
    dx = g * scale * sig * (1.0 + x * (1.0 - sig))
    tl.store(dx_ptr + offs, dx.to(dx_ptr.dtype.element_ty), mask=mask)


class ScaledSiLU(torch.autograd.Function):
    """y = x * sigmoid(x) * scale, elementwise over any shape; scale a Python float."""

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
        scaled_silu_bwd_kernel[(triton.cdiv(n, 32),)](x, g, dx, n, ctx.scale, BLOCK=32)
        return dx, None


# ---------------------------------------------------------------- gvzoo::mul_add (triton_op)


@triton.jit
def mul_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, (x * y + x).to(out_ptr.dtype.element_ty), mask=mask)


@triton_op("gvzoo::mul_add", mutates_args=())
def mul_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """out = x * y + x for x, y of one shape."""
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    wrap_triton(mul_add_kernel)[(triton.cdiv(n, 32),)](x, y, out, n, BLOCK=32)
    return out


def _mul_add_setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    x, y = inputs
    ctx.save_for_backward(x, y)


def _mul_add_backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = ctx.saved_tensors
    g = g.contiguous()
    return g * (y + 1), g * x


mul_add.register_autograd(_mul_add_backward, setup_context=_mul_add_setup_context)
