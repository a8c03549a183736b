"""The measurements behind the error-baseline rule's condition allowance (docs/checks.md,
"The error-baseline rule"): correct kernels that use another algorithm than their reference,
and planted precision bugs, each judged by the reference check on many seeds.

    python bench/baseline_algorithms.py [SEEDS]      (default 60)

For every Function of the test zoo's "another correct algorithm" and "precision bugs"
sections (tests/zoo/reference.py) and every tensor (an output, a gradient), it prints: the
share of seeds past the rule's first limit (k x plain PyTorch's float32 error + 4 ulp, the
rule before the allowance), the worst error in ulp, the worst element's error in units of its
componentwise condition (what rounding the inputs alone moves it by: `condition`, "-" where
no seed went past the first limit), and the verdict under the whole rule. The allowance is
chosen between the largest condition ratio of a correct algorithm and the smallest of a bug.
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from gradverify import verify  # noqa: E402
from zoo import reference as algorithms  # noqa: E402

CORRECT = ("MatmulDFT", "WelfordVariance", "SequentialSum", "TriangularCumsum",
           "StableLogSumExp")
BUGS = ("Float16Accumulation", "NaiveVariance", "LayerNormWithoutEps")


def measure(name: str, seeds: int) -> list[tuple[str, dict, str]]:
    cls = getattr(algorithms, name)
    spec = {**cls.SPEC, "checks": {"reference": {"seeds": seeds}}}
    report = verify(cls, spec=spec, checks=["reference"])
    (result,) = report.results
    (check,) = result.checks
    return [(subject, figures, check.status.name)
            for subject, figures in check.data["rule"]["tensors"].items()]


def main() -> None:
    seeds = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    print(f"the error-baseline rule on {seeds} seeds (float32; condition allowance "
          "10 x)")
    print(f"{'function':22} {'tensor':16} {'past k':>7} {'worst ulp':>10} "
          f"{'condition':>10} {'verdict':>8}")
    worst_correct, least_bug = 0.0, float("inf")
    for group, names in (("correct", CORRECT), ("bug", BUGS)):
        for name in names:
            bug_ratio = 0.0
            for subject, f, verdict in measure(name, seeds):
                cond = f["condition"]
                print(f"{name:22} {subject:16} {f['past_limit_rate']:7.0%} {f['ulp']:10.3g} "
                      f"{'-' if cond is None else format(cond, '.3g'):>10} {verdict:>8}")
                if cond is not None:
                    if group == "correct":
                        worst_correct = max(worst_correct, cond)
                    else:
                        bug_ratio = max(bug_ratio, cond)
            if group == "bug":
                least_bug = min(least_bug, bug_ratio)
    print(f"largest condition ratio of a correct algorithm: {worst_correct:.3g}; smallest "
          f"worst ratio of a bug: {least_bug:.3g}")


if __name__ == "__main__":
    main()
