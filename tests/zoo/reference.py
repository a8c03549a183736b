"""reference: the Function against a plain-PyTorch implementation of the same math.

Broken Functions the check must catch, then correct Functions that a naive reference check would
flag.
"""
from __future__ import annotations

import torch
from torch.autograd import Function

from zoo import spec_for

# ============================================================================ broken


def softplus_reference(x):
    return torch.nn.functional.softplus(x)


class WrongKernelGradient(Function):
    EXPECT = ("reference", "GV332", "x")
    SPEC = {"reference": "zoo:softplus_reference",  # noqa: RUF012
            "expect": {"gradcheck": "float32 kernel"},
            "cases": [{"args": {"x": {"shape": [6]}}}]}

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.nn.functional.softplus(x.float()).to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return (grad.float() * torch.sigmoid(2 * x.float())).to(grad.dtype)


class WrongKernelOutput(Function):
    EXPECT = ("reference", "GV331", None)
    SPEC = {"reference": "zoo:softplus_reference",  # noqa: RUF012
            "cases": [{"args": {"x": {"shape": [6]}}}]}

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.nn.functional.softplus(x) * 1.01

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.sigmoid(x) * 1.01


# ============================================================================ correct


def logsumexp_reference(x):
    return torch.logsumexp(x, dim=-1)


class StableLogSumExp(Function):
    """The max-shifted log-sum-exp against its plain-PyTorch reference. naive reference: an exact
    or float64-tolerance comparison of a float32 run would flag round-off."""

    SPEC = {**spec_for(x={"shape": [3, 5], "init": "normal", "std": 30.0}),  # noqa: RUF012
            "reference": "zoo:logsumexp_reference"}

    @staticmethod
    def forward(ctx, x):
        top = x.max(dim=-1, keepdim=True).values
        out = top.squeeze(-1) + (x - top).exp().sum(-1).log()
        ctx.save_for_backward(x, out)
        return out

    @staticmethod
    def backward(ctx, grad):
        x, out = ctx.saved_tensors
        return grad.unsqueeze(-1) * (x - out.unsqueeze(-1)).exp()


# ==================================================== another correct algorithm than the reference
# Each computes the reference's math by another algorithm, correct in float32, that rounds at
# other places than plain PyTorch does (its error past twice torch's on some seeds): naive
# reference, the error-baseline rule alone would warn or fail. The rule's condition allowance
# (docs/checks.md, "The error-baseline rule") passes them; the planted precision bugs below stay
# caught. The figures in the docstrings are bench/baseline_algorithms.py's, on 60 seeds.

def _twiddles(x):
    """The real DFT's cosine and sine tables for ``x``'s last dim, exact in float64 then
    rounded to its dtype, as a kernel's precomputed buffer is."""
    n = x.shape[-1]
    k = torch.arange(n // 2 + 1, dtype=torch.float64, device=x.device)
    t = torch.arange(n, dtype=torch.float64, device=x.device)
    angle = 2 * torch.pi * torch.remainder(t[:, None] * k[None, :], n) / n
    return torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)


def rfft_reference(x):
    return torch.view_as_real(torch.fft.rfft(x))


class MatmulDFT(Function):
    """rfft as two matmuls against twiddle tables. naive reference: up to 6.4 ulp off the
    FFT, past twice plain PyTorch's own error on 3% of the seeds (a flaky warning)."""

    SPEC = {"cases": [{"name": "frames", "args": {"x": {"shape": [6, 256]}}}],  # noqa: RUF012
            "reference": "zoo:rfft_reference"}

    @staticmethod
    def forward(ctx, x):
        cos, sin = _twiddles(x)
        ctx.save_for_backward(cos, sin)
        return torch.stack([x @ cos, -(x @ sin)], dim=-1)

    @staticmethod
    def backward(ctx, grad):
        cos, sin = ctx.saved_tensors
        return grad[..., 0] @ cos.T - grad[..., 1] @ sin.T


def variance_reference(x):
    return torch.var(x, dim=-1, correction=0)


OFFSET = {"cases": [{"name": "offset", "args": {  # data far from zero: where algorithms differ
    "x": {"shape": [4, 48], "init": "normal", "mean": 100.0, "std": 1.0}}}]}


class WelfordVariance(Function):
    """Welford's one-pass variance (a kernel's streaming form) against torch's two-pass one, on
    data with a mean of 100. naive reference: 64 ulp off, past the limit on every seed: a
    FAIL."""

    SPEC = {**OFFSET, "reference": "zoo:variance_reference"}  # noqa: RUF012

    @staticmethod
    def forward(ctx, x):
        mean = torch.zeros_like(x[..., 0])
        m2 = torch.zeros_like(mean)
        for i in range(x.shape[-1]):
            delta = x[..., i] - mean
            mean = mean + delta / (i + 1)
            m2 = m2 + delta * (x[..., i] - mean)
        ctx.save_for_backward(x)
        return m2 / x.shape[-1]

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad.unsqueeze(-1) * 2 * (x - x.mean(-1, keepdim=True)) / x.shape[-1]


def sum_reference(x):
    return x.sum(-1)


class SequentialSum(Function):
    """A row sum accumulated left to right, one value at a time (a simple kernel's loop),
    against torch's vectorised sum, over 512 values. naive reference: up to 14 ulp off, past
    the limit on 18% of the seeds."""

    SPEC = {"cases": [{"name": "long", "args": {"x": {"shape": [1, 512]}}}],  # noqa: RUF012
            "reference": "zoo:sum_reference"}

    @staticmethod
    def forward(ctx, x):
        ctx.shape = x.shape
        total = torch.zeros_like(x[..., 0])
        for i in range(x.shape[-1]):
            total = total + x[..., i]
        return total

    @staticmethod
    def backward(ctx, grad):
        return grad.unsqueeze(-1).expand(ctx.shape).clone()


def cumsum_reference(x):
    return torch.cumsum(x, dim=-1)


class TriangularCumsum(Function):
    """A prefix sum as a matmul with an upper-triangular matrix of ones (how a tensor-core scan
    is written) against torch.cumsum. naive reference: its gradient up to 7 ulp off, past the
    limit on 13% of the seeds."""

    SPEC = {"cases": [{"name": "scan", "args": {"x": {"shape": [3, 256]}}}],  # noqa: RUF012
            "reference": "zoo:cumsum_reference"}

    @staticmethod
    def forward(ctx, x):
        n = x.shape[-1]
        return x @ torch.ones(n, n, dtype=x.dtype, device=x.device).triu()

    @staticmethod
    def backward(ctx, grad):
        n = grad.shape[-1]
        return grad @ torch.ones(n, n, dtype=grad.dtype, device=grad.device).tril()


# ====================================== precision bugs the condition allowance must not pass


class Float16Accumulation(Function):
    """A row sum whose partial sums are kept in float16 (an accumulator declared too narrow)
    in a kernel that says it computes in float32."""

    EXPECT = ("reference", "GV331", None)
    SPEC = {"cases": [{"name": "long", "args": {"x": {"shape": [2, 512]}}}],  # noqa: RUF012
            "computes_in": "float32", "reference": "zoo:sum_reference",
            "expect": {"gradcheck": "a float16 accumulator"}}

    @staticmethod
    def forward(ctx, x):
        ctx.shape = x.shape
        chunks = x.reshape(*x.shape[:-1], -1, 64).sum(-1)  # exact enough: 64-wide blocks
        total = torch.zeros_like(chunks[..., 0]).half()
        for i in range(chunks.shape[-1]):
            total = (total + chunks[..., i].half()).half()
        return total.to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        return grad.unsqueeze(-1).expand(ctx.shape).clone()


class NaiveVariance(Function):
    """E[x^2] - E[x]^2 on data with a mean of 100: cancellation loses most digits, orders past
    what any correct float32 algorithm loses."""

    EXPECT = ("reference", "GV331", None)
    SPEC = {**OFFSET, "reference": "zoo:variance_reference",  # noqa: RUF012
            "computes_in": "float32", "expect": {"gradcheck": "float32 cancellation"}}

    @staticmethod
    def forward(ctx, x):
        x32 = x.float()
        mean = x32.mean(-1)
        ctx.save_for_backward(x, mean.to(x.dtype))
        return ((x32 * x32).mean(-1) - mean * mean).to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        x, mean = ctx.saved_tensors
        return grad.unsqueeze(-1) * 2 * (x - mean.unsqueeze(-1)) / x.shape[-1]


def layer_norm_reference(x):
    return torch.nn.functional.layer_norm(x, x.shape[-1:])


def _normalised(x):
    centred = x - x.mean(-1, keepdim=True)
    rstd = centred.pow(2).mean(-1, keepdim=True).rsqrt()
    return centred * rstd, rstd


class LayerNormWithoutEps(Function):
    """Layer norm that leaves out the reference's eps (1e-5) in its denominator: another
    function, 40 ulp away, on every seed."""

    EXPECT = ("reference", "GV331", None)
    SPEC = {"cases": [{"name": "rows", "args": {"x": {"shape": [4, 64]}}}],  # noqa: RUF012
            "reference": "zoo:layer_norm_reference"}

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return _normalised(x)[0]

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        out, rstd = _normalised(x)
        n = out.shape[-1]
        g = grad - grad.mean(-1, keepdim=True)
        return rstd * (g - out * (grad * out).sum(-1, keepdim=True) / n)
