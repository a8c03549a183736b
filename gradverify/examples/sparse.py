"""Sparse (COO) times dense, and segment sums: index-based kernels with integer inputs."""
from __future__ import annotations

import torch
from torch.autograd import Function


class SparseDenseMatmul(Function):
    """out[r] = sum over entries e with row r of values[e] * dense[col[e]].

    The sparse matrix is (indices [2, nnz] int64, values [nnz], n_rows); gradients flow to
    values and dense, never to the integer indices.
    """

    @staticmethod
    def forward(indices, values, n_rows: int, dense):
        rows, cols = indices
        contrib = values.unsqueeze(1) * dense.index_select(0, cols)
        out = dense.new_zeros(n_rows, dense.shape[1])
        return out.index_add(0, rows, contrib)

    @staticmethod
    def setup_context(ctx, inputs, output):
        indices, values, _, dense = inputs
        ctx.save_for_backward(indices, values, dense)

    @staticmethod
    def backward(ctx, grad_out):
        indices, values, dense = ctx.saved_tensors
        rows, cols = indices
        grad_values = grad_dense = None
        g_rows = grad_out.index_select(0, rows)
        if ctx.needs_input_grad[1]:
            grad_values = (g_rows * dense.index_select(0, cols)).sum(1)
        if ctx.needs_input_grad[3]:
            grad_dense = torch.zeros_like(dense).index_add(0, cols, values.unsqueeze(1) * g_rows)
        return None, grad_values, None, grad_dense


def make_sparse_inputs(generator: torch.Generator, dtype: torch.dtype, dims: dict):
    """A factory: a random sparse [R, C] matrix with NNZ distinct entries (no position drawn
    twice) and a dense [C, K] matrix."""
    r, c, k, nnz = dims["R"], dims["C"], dims["K"], dims["NNZ"]
    if nnz > r * c:
        raise ValueError(f"NNZ={nnz} entries do not fit in an [R, C] = [{r}, {c}] matrix")
    positions = torch.randperm(r * c, generator=generator)[:nnz]
    rows, cols = positions // c, positions % c
    values = torch.randn(nnz, generator=generator, dtype=torch.float64).to(dtype)
    dense = torch.randn(c, k, generator=generator, dtype=torch.float64).to(dtype)
    return {"indices": torch.stack([rows, cols]), "values": values.requires_grad_(),
            "n_rows": r, "dense": dense.requires_grad_()}


class SegmentSum(Function):
    """Sums rows of ``values`` per segment (``segment_ids`` sorted, in [0, num_segments)).

    Also returns the row count per segment: a float output marked non-differentiable, passed
    through for callers that want means.
    """

    @staticmethod
    def forward(values, segment_ids, num_segments: int):
        sums = values.new_zeros(num_segments, *values.shape[1:]).index_add(0, segment_ids, values)
        counts = torch.bincount(segment_ids, minlength=num_segments).to(values.dtype)
        return sums, counts

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.mark_non_differentiable(output[1])
        ctx.save_for_backward(inputs[1])

    @staticmethod
    def backward(ctx, grad_sums, grad_counts):
        (segment_ids,) = ctx.saved_tensors
        grad_values = None
        if ctx.needs_input_grad[0]:
            grad_values = grad_sums.index_select(0, segment_ids)
        return grad_values, None, None
