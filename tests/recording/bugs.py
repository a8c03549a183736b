"""A planted bug in each Function of ops.py, forward unchanged: the recorded specs must catch
every one. Maps class name -> (the correct line of backward, the buggy one)."""
BUGS = {
    "ScatterAdd": ("return grad[index], None, None", "return 2 * grad[index], None, None"),
    "SegmentSum": ("return grad[ranks], None, None", "return grad[ranks.flip(0)], None, None"),
    "MaskedScale": ("return torch.where(mask, grad * ctx.scale, grad), None, None",
                    "return torch.where(mask, grad, grad * ctx.scale), None, None"),
    "SparseMM": ("return None, torch.sparse.mm(a.t(), grad)",
                 "return None, torch.sparse.mm(a.t(), grad).t()"),
    "SortPair": ("return torch.zeros_like(grad).scatter_(-1, idx, grad)", "return grad"),
    "Unfold8": ("return grad * 2", "return grad * 3"),
}
