import sys

import torch

from ops import MaskedScale, ScatterAdd, SegmentSum, SortPair, SparseMM, Unfold8

torch.manual_seed(0)
N, C, K = 64, 16, 10
w = torch.randn(C, C, requires_grad=True)
dense = torch.randn(32, C) * (torch.rand(32, C) < 0.1)
a = dense.to_sparse()
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 2):
    x = torch.randn(N, C) @ w
    index = torch.randint(0, K, (N,))
    y = ScatterAdd.apply(x, index, K)
    ranks = torch.sort(torch.randint(0, 12, (N,))).values
    z = SegmentSum.apply(x, ranks, 12)
    mask = torch.rand(N, C) < 0.3
    m = MaskedScale.apply(x, mask, 0.5)
    s = SparseMM.apply(a, x[:C].t() @ x[:C])
    v, idx = SortPair.apply(x)
    u = Unfold8.apply(x.reshape(N // 2, 2 * C))
    loss = y.sum() + z.pow(2).sum() + m.sum() + s.sum() + v[:, 0].sum() + u.sum()
    loss.backward()
print("loss", float(loss.detach()))
