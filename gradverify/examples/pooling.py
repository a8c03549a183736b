"""Pooling with integer side inputs and outputs."""
from __future__ import annotations

import torch
from torch.autograd import Function


class GlobalMaxPool(Function):
    """Max over the last dim of [B, C, L]; also returns the argmax indices (non-differentiable)."""

    @staticmethod
    def forward(x):
        values, indices = x.max(dim=-1)
        return values, indices

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, indices = output
        ctx.mark_non_differentiable(indices)
        ctx.save_for_backward(indices)
        ctx.input_shape = inputs[0].shape

    @staticmethod
    def backward(ctx, grad_values, grad_indices):
        (indices,) = ctx.saved_tensors
        grad = grad_values.new_zeros(ctx.input_shape)
        return grad.scatter(-1, indices.unsqueeze(-1), grad_values.unsqueeze(-1))


class SuperpixelAvgPool(Function):
    """Mean of a [C, H, W] image over each superpixel of an integer [H, W] label map -> [C, K]."""

    @staticmethod
    def forward(image, labels, num_segments: int):
        channels = image.shape[0]
        sums = image.new_zeros(channels, num_segments).index_add(
            1, labels.reshape(-1), image.reshape(channels, -1))
        return sums / _counts(labels, num_segments, image.dtype)

    @staticmethod
    def setup_context(ctx, inputs, output):
        image, labels, num_segments = inputs
        ctx.save_for_backward(labels, _counts(labels, num_segments, image.dtype))

    @staticmethod
    def backward(ctx, grad_means):
        labels, counts = ctx.saved_tensors
        grad_image = None
        if ctx.needs_input_grad[0]:
            per_pixel = (grad_means / counts).index_select(1, labels.reshape(-1))
            grad_image = per_pixel.reshape(grad_means.shape[0], *labels.shape)
        return grad_image, None, None


def _counts(labels, num_segments, dtype):
    """Pixels per superpixel (at least 1: an empty one has mean 0)."""
    return torch.bincount(labels.reshape(-1), minlength=num_segments).clamp(min=1).to(dtype)
