"""Pooling with integer side inputs and outputs."""
from __future__ import annotations

import torch
from torch.autograd import Function


class GlobalMaxPool(Function):
    """Max over the last dim of [B, C, L]; also returns the argmax indices (non-differentiable)."""

    @staticmethod
    def forward(ctx, x):
        values, indices = x.max(dim=-1)
        ctx.mark_non_differentiable(indices)
        ctx.save_for_backward(indices)
        ctx.input_shape = x.shape
        return values, indices

    @staticmethod
    def backward(ctx, grad_values, grad_indices):
        (indices,) = ctx.saved_tensors
        grad = grad_values.new_zeros(ctx.input_shape)
        return grad.scatter(-1, indices.unsqueeze(-1), grad_values.unsqueeze(-1))


class SuperpixelAvgPool(Function):
    """Mean of a [C, H, W] image over each superpixel of an integer [H, W] label map -> [C, K]."""

    @staticmethod
    def forward(ctx, image, labels, num_segments: int):
        channels = image.shape[0]
        flat_labels = labels.reshape(-1)
        sums = image.new_zeros(channels, num_segments).index_add(
            1, flat_labels, image.reshape(channels, -1))
        counts = torch.bincount(flat_labels, minlength=num_segments).clamp(min=1).to(image.dtype)
        ctx.save_for_backward(labels, counts)
        return sums / counts

    @staticmethod
    def backward(ctx, grad_means):
        labels, counts = ctx.saved_tensors
        grad_image = None
        if ctx.needs_input_grad[0]:
            per_pixel = (grad_means / counts).index_select(1, labels.reshape(-1))
            grad_image = per_pixel.reshape(grad_means.shape[0], *labels.shape)
        return grad_image, None, None
