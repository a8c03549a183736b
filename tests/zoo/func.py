"""func: under torch.func.vjp and torch.func.grad, the Function's gradients are autograd's.

Broken Functions the check must catch, and correct look-alikes a naive version would flag.
"""
from __future__ import annotations

import torch
from torch.autograd import Function
from torch.autograd.function import once_differentiable

from zoo import spec_for

_PAIR = spec_for(x={"shape": [3]}, w={"shape": [3]})

# ============================================================================ broken


class GradModeBackward(Function):
    """backward scales x's gradient by grad mode: autograd runs it with grad off, torch.func
    with it on."""

    EXPECT = ("func", "GV361", "x")
    SPEC = _PAIR

    @staticmethod
    def forward(x, w):
        return x * w

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        scale = 2.0 if torch.is_grad_enabled() else 1.0
        return grad * w * scale, grad * x


class NumpyBackwardUndeclared(Function):
    """backward goes through numpy without @once_differentiable: torch.func.vjp raises."""

    EXPECT = ("func", "GV362", None)
    SEVERITY = "warning"
    SPEC = {**spec_for(x={"shape": [3]}),  # noqa: RUF012
            "expect": {"gradgradcheck": "a numpy backward", "lint": "a numpy backward"}}

    @staticmethod
    def forward(x):
        return x.exp()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return torch.from_numpy(grad.detach().numpy() * y.detach().numpy())


class RecomputingSiLU(Function):
    """SiLU whose @once_differentiable backward recomputes forward under enable_grad and takes
    torch.autograd.grad of it: torch.func refuses requires_grad_() inside a transform, which
    @once_differentiable does not declare (it says no double backward)."""

    EXPECT = ("func", "GV363", None)
    SEVERITY = "warning"
    SPEC = spec_for(x={"shape": [5]})

    @staticmethod
    def forward(x):
        return x * torch.sigmoid(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            x = x.detach().requires_grad_()
            y = x * torch.sigmoid(x)
            (dx,) = torch.autograd.grad(y, x, grad)
        return dx


class OldStyleSinh(Function):
    """sinh with forward(ctx, x): right wherever autograd runs it, but every torch.func
    transform refuses it (torch.func needs setup_context style): a warning by default."""

    EXPECT = ("func", "GV363", None)
    SEVERITY = "warning"
    SPEC = spec_for(x={"shape": [4]})

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sinh(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.cosh(x)


# ============================================================================ look-alikes


class SetupContextSinh(Function):
    """naive func: OldStyleSinh, its backward unchanged, saving in setup_context instead:
    torch.func runs it, and its gradients are autograd's."""

    SPEC = spec_for(x={"shape": [4]})
    backward = staticmethod(OldStyleSinh.backward)

    @staticmethod
    def forward(x):
        return torch.sinh(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])


class NumpyBackwardDeclared(Function):
    """naive func: torch.func.grad cannot run a numpy backward (it wraps tensors); this one
    declares it with @once_differentiable, so that is a note, and torch.func.vjp matches."""

    SPEC = spec_for(x={"shape": [3]})

    @staticmethod
    def forward(x):
        return x.exp()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return torch.from_numpy(grad.numpy() * y.numpy())


class GatedOnNeedsInputGrad(Function):
    """naive func: backward returns None for inputs that need no gradient; torch.func asks
    for all of them and gets them. (Under torch.compile(torch.func.grad(f)), torch 2.13 says an
    input passed in beside an intermediate needs none, and it gets zero: the compile check's
    GV354, judged against bare torch in tests/trust_test.py.)"""

    SPEC = _PAIR

    @staticmethod
    def forward(x, w):
        return x * w

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        return (grad * w if ctx.needs_input_grad[0] else None,
                grad * x if ctx.needs_input_grad[1] else None)



class MaxWithIndex(Function):
    """naive func: the index output is an integer tensor, which torch.func.vjp refuses as an
    output; only the differentiable outputs are torch.func's."""

    SPEC = spec_for(x={"shape": [4, 3]})

    @staticmethod
    def forward(x):
        return x.max(dim=0)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.mark_non_differentiable(output[1])
        ctx.save_for_backward(output[1])
        ctx.rows = inputs[0].shape[0]

    @staticmethod
    def backward(ctx, grad, grad_index):
        (index,) = ctx.saved_tensors
        full = torch.zeros((ctx.rows, *grad.shape), dtype=grad.dtype, device=grad.device)
        return full.scatter(0, index.unsqueeze(0), grad.unsqueeze(0))


class ClosedFormSiLU(Function):
    """naive func: an @once_differentiable SiLU backward, like one that recomputes forward
    with torch.autograd.grad; this one computes the derivative in closed form with torch
    ops, which torch.func runs."""

    SPEC = spec_for(x={"shape": [5]})
    forward = RecomputingSiLU.forward
    setup_context = RecomputingSiLU.setup_context

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return grad * s * (1 + x * (1 - s))
