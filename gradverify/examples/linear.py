"""y = x @ W^T + b with an optional bias, honouring ctx.needs_input_grad."""
from __future__ import annotations

import torch
from torch.autograd import Function


class LinearFunction(Function):
    @staticmethod
    def forward(input: torch.Tensor, weight: torch.Tensor,
                bias: torch.Tensor | None = None) -> torch.Tensor:
        output = input @ weight.t()
        if bias is not None:
            output = output + bias
        return output

    @staticmethod
    def setup_context(ctx, inputs, output):
        input, weight, *rest = inputs  # torch before 2.2 leaves out a default not passed
        ctx.save_for_backward(input, weight, rest[0] if rest else None)

    @staticmethod
    def backward(ctx, grad_output):
        input, weight, bias = ctx.saved_tensors
        grad_input = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_input = grad_output @ weight
        if ctx.needs_input_grad[1]:
            grad_weight = grad_output.t() @ input
        if bias is not None and ctx.needs_input_grad[2]:
            grad_bias = grad_output.sum(0)
        return grad_input, grad_weight, grad_bias
