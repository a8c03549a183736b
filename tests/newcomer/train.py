"""A small training loop over every Function of fastops, as a user's script is."""
import torch

from fastops import (
    ChunkedCrossEntropy,
    FusedLayerNorm,
    OnlineSoftmaxAttention,
    RecomputeMLP,
    RotaryInplace,
    SegmentSum,
    StraightThroughQuantize,
    TopKRouter,
)

torch.manual_seed(0)
B, H, L, D, E, V = 4, 4, 24, 8, 8, 40
model = H * D
norm_w, norm_b = torch.ones(model, requires_grad=True), torch.zeros(model, requires_grad=True)
w1 = (torch.randn(model, 2 * model) / model ** 0.5).requires_grad_()
w2 = (torch.randn(2 * model, model) / model ** 0.5).requires_grad_()
router_w = torch.randn(model, E, requires_grad=True)
head = (torch.randn(model, V) / model ** 0.5).requires_grad_()
angles = torch.arange(L)[:, None] / 10 ** (torch.arange(D // 2)[None] / (D // 2))
cos, sin = angles.cos().repeat(1, 2), angles.sin().repeat(1, 2)
for step in range(2):
    tokens = torch.randn(B, L, model)
    x = FusedLayerNorm.apply(tokens, norm_w, norm_b, 1e-5)
    q = x.view(B, L, H, D).transpose(1, 2).clone()
    q = RotaryInplace.apply(q, cos, sin)
    q = StraightThroughQuantize.apply(q, 8)
    attn = OnlineSoftmaxAttention.apply(q, q, q, 8).transpose(1, 2).reshape(B, L, model)
    h = attn + RecomputeMLP.apply(attn, w1, w2)
    gates, chosen = TopKRouter.apply(h.reshape(-1, model) @ router_w, 2)
    flat = h.reshape(-1, model) * gates.sum(-1, keepdim=True)
    segments = torch.arange(B * L) // 6
    pooled = SegmentSum.apply(flat, segments, B * L // 6)
    target = torch.randint(0, V, (pooled.shape[0],))
    loss = ChunkedCrossEntropy.apply(pooled @ head, target, 5)
    loss.backward()
print("loss", float(loss.detach()))
