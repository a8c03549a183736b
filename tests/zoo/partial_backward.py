"""partial_backward: autograd.grad(outputs, inputs=[one input]) gives the full backward's
slice. No zoo Function here is right in eager and wrong only there (a backward that keeps
state between calls is also caught by gradcheck and determinism): tests/cells_test.py tests
the check on one. Correct look-alikes a naive version would flag.
"""
from __future__ import annotations

from torch.autograd import Function

from zoo import spec_for

_PAIR = spec_for(x={"shape": [3]}, w={"shape": [3]})


# ============================================================================ look-alikes


class ProductAndSign(Function):
    """naive partial_backward: the second output (the sign, an integer tensor) is not
    differentiable: asking for one input's gradient with an incoming gradient for every output
    passes one for it, which autograd refuses; only differentiable outputs take one."""

    SPEC = _PAIR

    @staticmethod
    def forward(x, w):
        product = x * w
        return product, product.sign().long()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.mark_non_differentiable(output[1])
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad, grad_sign):
        x, w = ctx.saved_tensors
        return (grad * w if ctx.needs_input_grad[0] else None,
                grad * x if ctx.needs_input_grad[1] else None)
