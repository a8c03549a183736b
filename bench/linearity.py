"""What the linearity probe costs: ``python bench/linearity.py [ROUNDS]`` prints, for the small
overhead spec and the 1e6-element spec, the probe's time in units of one backward pass
(torch.autograd.grad on the same retained graph) and the whole gradcheck check's time with the
probe over its time without it (medians, in this process). The probe reuses gradcheck's
forward call and makes two backward passes, backward(g) and backward(-2 g)."""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import gradverify  # noqa: E402
import ops  # noqa: E402
from gradverify.checks import _probes  # noqa: E402


def _median(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def in_backward_passes(cls, shapes, rounds: int) -> float:
    generator = torch.Generator().manual_seed(0)
    leaves = [torch.randn(*s, dtype=torch.float64, generator=generator).requires_grad_()
              for s in shapes]
    outs = [cls.apply(*leaves)]
    g = [torch.randn_like(outs[0])]
    backward = _median(lambda: torch.autograd.grad(outs, leaves, g, retain_graph=True), rounds)
    return _median(lambda: _probes.linearity(outs, leaves, generator), rounds) / backward


def gradcheck_share(spec: str, rounds: int) -> float:
    def check() -> None:
        report = gradverify.verify(f"ops:{spec_target[spec]}", spec=str(HERE / "specs" / spec),
                                   checks=["gradcheck"])
        assert report.ok

    with_probe = _median(check, rounds)
    real = _probes.linearity
    _probes.linearity = lambda *args, **kwargs: []
    try:
        without = _median(check, rounds)
    finally:
        _probes.linearity = real
    return with_probe / without


spec_target = {"overhead.yaml": "Bilinear", "million.yaml": "Softplus"}


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 21
    passes = (in_backward_passes(ops.Bilinear, [(4, 3), (3, 5)], rounds),
              in_backward_passes(ops.Softplus, [(1000, 1000)], max(5, rounds // 4)))
    shares = (gradcheck_share("overhead.yaml", rounds), gradcheck_share("million.yaml", 5))
    print(" ".join(f"{v:.3f}" for v in (*passes, *shares)))


if __name__ == "__main__":
    import os

    os.chdir(HERE)
    main()
