"""compile (opt-in): under torch.compile, outputs and gradients match eager, without a graph
break.

Broken Functions the check must catch.
"""
from __future__ import annotations

import torch
from torch.autograd import Function

# ============================================================================ broken


class ToListForward(Function):
    EXPECT = ("compile", "GV351", None)
    SPEC = {"checks": {"compile": True}, "cases": [{"args": {"x": {"shape": [3]}}}]}  # noqa: RUF012

    @staticmethod
    def forward(ctx, x):
        return torch.tensor([v * 2 for v in x.tolist()], dtype=x.dtype)

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


class DataDependentBranch(Function):
    EXPECT = ("compile", "GV351", None)
    SPEC = {"checks": {"compile": True}, "cases": [{"args": {"x": {"shape": [3]}}}]}  # noqa: RUF012

    @staticmethod
    def forward(ctx, x):
        if x.sum().item() > 0:
            return x * 2
        return x * 3

    @staticmethod
    def backward(ctx, grad):
        return grad * 2
