import torch


class SegmentSum(torch.autograd.Function):
    """Sums the rows of ``values`` [N, D] that share a segment id, into [num_segments, D]."""

    @staticmethod
    def forward(ctx, values, segment_ids, num_segments):
        out = values.new_zeros((num_segments, values.shape[1]))
        out.index_add_(0, segment_ids, values)
        ctx.save_for_backward(segment_ids)
        return out

    @staticmethod
    def backward(ctx, grad):
        (segment_ids,) = ctx.saved_tensors
        return grad.index_select(0, segment_ids), None, None
