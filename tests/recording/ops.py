import torch
from torch.autograd import Function


class ScatterAdd(Function):
    """out[index[i]] += src[i]: index values tied to the output size."""
    @staticmethod
    def forward(ctx, src, index, dim_size):
        ctx.save_for_backward(index)
        out = src.new_zeros(dim_size, src.shape[1])
        return out.index_add_(0, index, src)

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        return grad[index], None, None


class SegmentSum(Function):
    """Sum of rows per segment; ranks are sorted segment ids."""
    @staticmethod
    def forward(ctx, x, ranks, num_segments):
        assert bool((ranks[1:] >= ranks[:-1]).all()), "ranks must be sorted"
        ctx.save_for_backward(ranks)
        out = x.new_zeros(num_segments, x.shape[1])
        return out.index_add_(0, ranks, x)

    @staticmethod
    def backward(ctx, grad):
        (ranks,) = ctx.saved_tensors
        return grad[ranks], None, None


class MaskedScale(Function):
    @staticmethod
    def forward(ctx, x, mask, scale):
        ctx.save_for_backward(mask)
        ctx.scale = scale
        return torch.where(mask, x * scale, x)

    @staticmethod
    def backward(ctx, grad):
        (mask,) = ctx.saved_tensors
        return torch.where(mask, grad * ctx.scale, grad), None, None


class SparseMM(Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return torch.sparse.mm(a, b)

    @staticmethod
    def backward(ctx, grad):
        a, _ = ctx.saved_tensors
        return None, torch.sparse.mm(a.t(), grad)


class SortPair(Function):
    """Two outputs: sorted values (differentiable) and the permutation."""
    @staticmethod
    def forward(ctx, x):
        values, idx = x.sort(dim=-1)
        ctx.save_for_backward(idx)
        ctx.mark_non_differentiable(idx)
        return values, idx

    @staticmethod
    def backward(ctx, grad, _):
        (idx,) = ctx.saved_tensors
        return torch.zeros_like(grad).scatter_(-1, idx, grad)


class Unfold8(Function):
    """Needs the last dim divisible by 8: shrinking must back off."""
    @staticmethod
    def forward(ctx, x):
        if x.shape[-1] % 8:
            raise ValueError("last dim must be a multiple of 8")
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2
