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
