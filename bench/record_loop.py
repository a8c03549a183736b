"""Recording overhead on a training loop: 100 steps of a small model with five custom Functions,
with and without ``gradverify.record``, after the first calls (which are the ones recorded).
Prints two medians in seconds: plain, recorded. Run by bench.py."""
from __future__ import annotations

import statistics
import sys
import tempfile
import time

import torch
from torch.autograd import Function

import gradverify


class Scale(Function):
    @staticmethod
    def forward(ctx, x, s):
        ctx.s = s
        return x * s

    @staticmethod
    def backward(ctx, g):
        return g * ctx.s, None


class Relu(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp_min(0)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (x > 0)


class Gather(Function):
    @staticmethod
    def forward(ctx, x, index):
        ctx.save_for_backward(index)
        ctx.n = x.shape[0]
        return x[index]

    @staticmethod
    def backward(ctx, g):
        (index,) = ctx.saved_tensors
        return g.new_zeros(ctx.n, g.shape[1]).index_add_(0, index, g), None


class Masked(Function):
    @staticmethod
    def forward(ctx, x, mask):
        ctx.save_for_backward(mask)
        return x * mask

    @staticmethod
    def backward(ctx, g):
        (mask,) = ctx.saved_tensors
        return g * mask, None


class SortVals(Function):
    @staticmethod
    def forward(ctx, x):
        v, i = x.sort(-1)
        ctx.save_for_backward(i)
        ctx.mark_non_differentiable(i)
        return v, i

    @staticmethod
    def backward(ctx, g, _):
        (i,) = ctx.saved_tensors
        return torch.zeros_like(g).scatter_(-1, i, g)


def steps(n: int, w: torch.Tensor, opt: torch.optim.Optimizer) -> None:
    gen = torch.Generator().manual_seed(0)
    for _ in range(n):
        x = torch.randn(64, 128, generator=gen) @ w
        h = Relu.apply(Scale.apply(x, 0.5))
        h = Gather.apply(h, torch.randint(0, 64, (64,), generator=gen))
        h = Masked.apply(h, (torch.rand(64, 128, generator=gen) < 0.5).to(h.dtype))
        v, _ = SortVals.apply(h)
        loss = v[:, -8:].pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def main() -> None:
    torch.set_num_threads(1)
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    w = torch.randn(128, 128, requires_grad=True)
    opt = torch.optim.SGD([w], lr=1e-3)
    plain, recorded = [], []
    with tempfile.TemporaryDirectory() as out:
        steps(3, w, opt)  # warm up
        for _ in range(rounds):
            t = time.perf_counter()
            steps(100, w, opt)
            plain.append(time.perf_counter() - t)
            with gradverify.record(out, force=True, shrink=False):
                steps(3, w, opt)  # the first calls: these are recorded
                t = time.perf_counter()
                steps(100, w, opt)
                recorded.append(time.perf_counter() - t)
    print(f"{statistics.median(plain):.4f} {statistics.median(recorded):.4f}")


if __name__ == "__main__":
    main()
