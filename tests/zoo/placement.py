"""placement: forward and backward as if the inputs lived on a GPU, on a CPU-only machine.

Broken Functions carry the device bugs published code has (each correct on the CPU, each raising
or returning a CPU tensor on CUDA); the look-alikes use the device-correct idioms or
data-dependent ops legal on any device, which a naive check (the meta device alone) flags.
"""
from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch
from torch.autograd import Function

from zoo import spec_for

_ROWS = spec_for(x={"shape": [4, 3]})
_GATHER = {"cases": [{"name": "c", "args": {
    "x": {"shape": [5, 3]}, "index": {"dtype": "int64", "values": [0, 2, 2, 4]}}}]}


# ============================================================================ broken


class ScatterIntoCpuBuffer(Function):
    """Gathers rows; backward scatters the gradient back into a buffer made by
    ``torch.zeros(n, ...)`` without ``device=``: index_add_ raises on CUDA."""

    EXPECT = ("placement", "GV441", None)
    SPEC = _GATHER

    @staticmethod
    def forward(ctx, x, index):
        ctx.save_for_backward(index)
        ctx.rows = x.shape[0]
        return x[index]

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        out = torch.zeros(ctx.rows, grad.shape[1], dtype=grad.dtype)
        out.index_add_(0, index, grad)
        return out, None


class ArangeMask(Function):
    """A lower-triangular mask from ``torch.arange(n)`` compared against itself: made on the
    CPU, it meets the input in ``where``."""

    EXPECT = ("placement", "GV441", None)
    SPEC = spec_for(x={"shape": [3, 3]})

    @staticmethod
    def forward(ctx, x):
        rows = torch.arange(x.shape[0])
        mask = rows[:, None] >= rows[None, :]
        ctx.save_for_backward(mask)
        return torch.where(mask, x, torch.zeros_like(x))

    @staticmethod
    def backward(ctx, grad):
        (mask,) = ctx.saved_tensors
        return torch.where(mask, grad, torch.zeros_like(grad))


class ConstantCoefficients(Function):
    """Mixing coefficients from ``torch.tensor([...])`` used in a matmul: a CPU matrix."""

    EXPECT = ("placement", "GV441", None)
    SPEC = _ROWS

    @staticmethod
    def forward(ctx, x):
        mix = torch.tensor([[0.5, 0.25, 0.0], [0.0, 1.0, -1.0], [2.0, 0.0, 1.0]],
                           dtype=x.dtype)
        ctx.save_for_backward(mix)
        return x @ mix

    @staticmethod
    def backward(ctx, grad):
        (mix,) = ctx.saved_tensors
        return grad @ mix.t()


class NumpyRoundTrip(Function):
    """backward computes the gradient in numpy (``grad.cpu().numpy()``) and returns
    ``torch.from_numpy`` of it: a CPU gradient for a CUDA input, which autograd refuses."""

    EXPECT = ("placement", "GV442", "x")
    SPEC = spec_for(x={"shape": [5]})

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        g = 2.0 * x.detach().cpu().numpy() * grad.detach().cpu().numpy()
        return torch.from_numpy(np.ascontiguousarray(g))


_IDENTITY: dict[int, torch.Tensor] = {}


class CachedIdentity(Function):
    """An identity matrix cached at first use, made on the CPU (``torch.eye(n)``): every later
    call on CUDA meets it in ``mm``. gradverify's CPU runs fill the cache before placement
    runs, so how it was made is not seen: a warning (a cache made with ``device=`` but not
    keyed by device fails as soon as one process uses two devices)."""

    EXPECT = ("placement", "GV441", None)
    SEVERITY = "warning"
    SPEC = _ROWS

    @staticmethod
    def forward(ctx, x):
        n = x.shape[1]
        if n not in _IDENTITY:
            _IDENTITY[n] = torch.eye(n, dtype=torch.float64)
        return x @ (2.0 * _IDENTITY[n].to(x.dtype))

    @staticmethod
    def backward(ctx, grad):
        n = grad.shape[1]
        return grad @ (2.0 * _IDENTITY[n].to(grad.dtype))


class FullOfOnes(Function):
    """backward's scale from ``torch.full(shape, ...)`` without ``device=``."""

    EXPECT = ("placement", "GV441", None)
    SPEC = _ROWS

    @staticmethod
    def forward(ctx, x):
        return 3.0 * x

    @staticmethod
    def backward(ctx, grad):
        return grad * torch.full(grad.shape, 3.0, dtype=grad.dtype)


class LinspaceWeights(Function):
    """Weights along the last dimension from ``torch.linspace``: a CPU vector."""

    EXPECT = ("placement", "GV441", None)
    SPEC = _ROWS

    @staticmethod
    def forward(ctx, x):
        w = torch.linspace(0.5, 1.5, x.shape[-1], dtype=x.dtype)
        ctx.save_for_backward(w)
        return x * w

    @staticmethod
    def backward(ctx, grad):
        (w,) = ctx.saved_tensors
        return grad * w


# ============================================================================ look-alikes


class ScatterWithNewZeros(Function):
    """naive placement: flags nothing here, but is the right idiom for ScatterIntoCpuBuffer:
    ``grad.new_zeros`` makes the buffer on the gradient's device."""

    SPEC = _GATHER

    @staticmethod
    def forward(ctx, x, index):
        ctx.save_for_backward(index)
        ctx.rows = x.shape[0]
        return x[index]

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        out = grad.new_zeros(ctx.rows, grad.shape[1])
        out.index_add_(0, index, grad)
        return out, None


class ArangeOnDevice(Function):
    """``torch.arange(n, device=x.device)``: the mask lives with the input."""

    SPEC = spec_for(x={"shape": [3, 3]})

    @staticmethod
    def forward(ctx, x):
        rows = torch.arange(x.shape[0], device=x.device)
        mask = rows[:, None] >= rows[None, :]
        ctx.save_for_backward(mask)
        return torch.where(mask, x, torch.zeros_like(x))

    @staticmethod
    def backward(ctx, grad):
        (mask,) = ctx.saved_tensors
        return torch.where(mask, grad, torch.zeros_like(grad))


class ScalarCpuConstant(Function):
    """A 0-dim CPU constant (``torch.tensor(2.0)``) times a device tensor: PyTorch moves it, so
    a check that flags every CPU tensor is wrong here."""

    SPEC = _ROWS

    @staticmethod
    def forward(ctx, x):
        return x * torch.tensor(2.0, dtype=x.dtype)

    @staticmethod
    def backward(ctx, grad):
        return grad * torch.tensor(2.0, dtype=grad.dtype)


class NonzeroRows(Function):
    """naive placement: on the meta device ``nonzero`` cannot know its output's size and
    raises; on a GPU it runs. Scales the rows of x whose sum is positive."""

    SPEC = _ROWS

    @staticmethod
    def forward(ctx, x):
        rows = (x.detach().sum(1) > 0).nonzero().flatten()
        ctx.save_for_backward(rows)
        out = x.clone()
        out[rows] = 2.0 * x[rows]
        return out

    @staticmethod
    def backward(ctx, grad):
        (rows,) = ctx.saved_tensors
        g = grad.clone()
        g[rows] = 2.0 * grad[rows]
        return g


class ItemScale(Function):
    """naive placement: ``.item()`` has no value on the meta device; on a GPU it syncs and
    returns the number. Checks the input's range with it, then scales by a constant."""

    SPEC = spec_for(x={"shape": [5], "init": "uniform", "low": 0.5, "high": 2.0})
    LIMIT = 1e4

    @staticmethod
    def forward(ctx, x):
        if x.detach().abs().max().item() > ItemScale.LIMIT:
            raise ValueError("inputs out of range")
        return x * 0.5

    @staticmethod
    def backward(ctx, grad):
        return grad * 0.5


class LoggedStatistic(Function):
    """naive placement: a ``.cpu()`` statistic kept for logging is a CPU tensor on purpose; it
    never meets the inputs."""

    SPEC = _ROWS
    LOG: ClassVar[list[float]] = []

    @staticmethod
    def forward(ctx, x):
        LoggedStatistic.LOG.append(float(x.detach().norm().cpu()))
        y = torch.tanh(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * (1 - y * y)


class CpuIndexGather(Function):
    """Indexing a device tensor with CPU indices is legal (``x[cpu_index]``); the gradient is
    scattered with ``torch.zeros_like``."""

    SPEC = spec_for(x={"shape": [5, 2]})

    @staticmethod
    def forward(ctx, x):
        index = torch.tensor([4, 0, 3])
        ctx.save_for_backward(index)
        ctx.shape = x.shape
        return x[index]

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        out = grad.new_zeros(ctx.shape)
        out[index] = grad
        return out


class MovedConstant(Function):
    """A constant made on the CPU and moved with ``.to(x.device)`` before use."""

    SPEC = _ROWS

    @staticmethod
    def forward(ctx, x):
        w = torch.tensor([1.0, -2.0, 0.5], dtype=x.dtype).to(x.device)
        ctx.save_for_backward(w)
        return x * w

    @staticmethod
    def backward(ctx, grad):
        (w,) = ctx.saved_tensors
        return grad * w
