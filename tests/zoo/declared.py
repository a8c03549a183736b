"""Failures the spec declares under ``expect:`` (surrogate gradients, gradient reversal).

A declared gradcheck failure must not hide another check's failure; the correct ones must pass
every check not declared.
"""
from __future__ import annotations

import torch
from torch.autograd import Function
from torch.autograd.function import once_differentiable

from zoo import spec_for

# ============================================================================ broken


class SpikeFloat32Surrogate(Function):
    """snntorch's surrogate spikes: forward returns float32 whatever the input dtype, and the
    spec declares gradcheck's failure. Bare gradgradcheck fails (float32 round-off), so ours must
    run after the expected failure and fail too."""

    EXPECT = ("gradgradcheck", "GV141", None)
    SPEC = {**spec_for(x={"shape": [4]}, alpha=2.0),  # noqa: RUF012
            "expect": {"gradcheck": "surrogate gradient by design"}}

    @staticmethod
    def forward(ctx, x, alpha):
        ctx.save_for_backward(x)
        ctx.alpha = alpha
        return (x > 0).float()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        a = ctx.alpha
        return a / 2 / (1 + (torch.pi / 2 * a * x) ** 2) * grad, None


# ============================================================================ correct


class GradientReversal(Function):
    """pytorch-revgrad / DANN: identity forward, -alpha * grad backward. Wrong by design, so the
    spec declares gradcheck's failure. naive saved_tensors: the output is a view of the input."""

    SPEC = {**spec_for(x={"shape": [2, 5]}, alpha=0.5),  # noqa: RUF012
            "expect": {"gradcheck": "reverses and scales the gradient on purpose"}}

    @staticmethod
    def forward(ctx, x, alpha):
        ctx.alpha = alpha
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return -ctx.alpha * grad, None


class SpikeSurrogate(Function):
    """A spiking neuron's Heaviside step with a fast-sigmoid surrogate gradient (snntorch,
    spikingjelly): the gradient is wrong on purpose, declared under expect. naive gradcheck:
    a FAIL on a Function that does what its author intends."""

    SPEC = {**spec_for(membrane={"shape": [6]}),  # noqa: RUF012
            "expect": {"gradcheck": "surrogate gradient by design"}}

    @staticmethod
    def forward(ctx, membrane):
        ctx.save_for_backward(membrane)
        return (membrane > 0).to(membrane.dtype)

    @staticmethod
    def backward(ctx, grad):
        (membrane,) = ctx.saved_tensors
        return grad / (1 + 10 * membrane.abs()) ** 2


class RelevanceEpsilonRule(Function):
    """A linear layer whose backward propagates LRP-epsilon relevance to ``x`` and None to the
    weight and bias (zennit, Captum's LRP rules): the spec declares gradcheck's failure.
    naive needs_input_grad: "returned None for 'weight', which needs a gradient" (GV202) in
    every subset, an error; it follows from the declaration, so it is an expected failure."""

    SPEC = {"cases": [{"name": "c", "args": {  # noqa: RUF012
        "x": {"shape": [3, 4]}, "weight": {"shape": [5, 4]}, "bias": {"shape": [5]}}}],
        "expect": {"gradcheck": "backward propagates relevance, not the gradient"}}

    @staticmethod
    def forward(ctx, x, weight, bias):
        z = x @ weight.t() + bias
        ctx.save_for_backward(x, weight, z)
        return z

    @staticmethod
    @once_differentiable
    def backward(ctx, relevance):
        x, weight, z = ctx.saved_tensors
        share = relevance / (z + 1e-6 * torch.where(z >= 0, 1.0, -1.0))
        return x * (share @ weight), None, None
