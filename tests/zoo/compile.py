"""compile (opt-in): under torch.compile, outputs and gradients match eager.

Correct look-alikes: a naive compile check (``fullgraph=True``) fails them, but users compile
with the default ``fullgraph=False``, where Dynamo runs them in eager around a graph break and
their gradients are right: a graph break is a note (GV351), not a failure.
"""
from __future__ import annotations

import torch
from torch.autograd import Function

_COMPILE = {"checks": {"compile": True}, "cases": [{"args": {"x": {"shape": [3]}}}]}

# ============================================================================ look-alikes


class ToListForward(Function):
    """naive compile: forward leaves torch through ``tolist()``, a graph break under
    fullgraph=True; compiled as users compile, its gradient is right."""

    SPEC = _COMPILE

    @staticmethod
    def forward(ctx, x):
        return torch.tensor([v * 2 for v in x.tolist()], dtype=x.dtype, device=x.device)

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


class DataDependentBranch(Function):
    """naive compile: ``.item()`` in control flow is a graph break under fullgraph=True;
    compiled as users compile, its gradient is right."""

    SPEC = _COMPILE

    @staticmethod
    def forward(ctx, x):
        ctx.factor = 2 if x.sum().item() > 0 else 3
        return x * ctx.factor

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.factor


class SinWithJvp(Function):
    """naive compile: Dynamo does not trace a Function that declares a ``jvp`` ("Unsupported
    custom jvp" under fullgraph=True); with fullgraph=False it runs, and its gradients are
    right."""

    SPEC = _COMPILE

    @staticmethod
    def forward(x):
        return x.sin()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.cos()

    @staticmethod
    def jvp(ctx, tangent):
        (x,) = ctx.saved_tensors
        return tangent * x.cos()

