"""forward_ad: forward-mode derivatives from the Function's jvp against finite differences.

Broken Functions the check must catch, then correct Functions that a naive forward_ad check would
flag.
"""
from __future__ import annotations

from torch.autograd import Function

from zoo import VEC, spec_for

# ============================================================================ broken


class WrongJvp(Function):
    EXPECT = ("forward_ad", "GV301", "x")
    PATTERN = "sign flipped"
    SPEC = VEC

    @staticmethod
    def forward(x):
        return x.sin()

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.cos()

    @staticmethod
    def jvp(ctx, x_t):
        (x,) = ctx.saved_tensors
        return -x.cos() * x_t


class JvpWithoutSavedInput(Function):
    EXPECT = ("forward_ad", "GV301", "x")
    SPEC = VEC

    @staticmethod
    def forward(x):
        return x.exp()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * y

    @staticmethod
    def jvp(ctx, x_t):
        return x_t   # forgot to multiply by exp(x)


# ============================================================================ correct


class SetupContextTanh(Function):
    """setup_context style with jvp and generate_vmap_rule. naive forward_ad/vmap: ctx comes from
    setup_context, not forward."""

    generate_vmap_rule = True
    SPEC = spec_for(x={"shape": [2, 3]})

    @staticmethod
    def forward(x):
        return x.tanh()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)
        ctx.save_for_forward(output)

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * (1 - out * out)

    @staticmethod
    def jvp(ctx, tangent):
        (out,) = ctx.saved_tensors
        return tangent * (1 - out * out)
