"""Measure the performance bars (bench/README.md) in one run and print them as ratios.

Run from anywhere: `python bench/bench.py [--repeat N]`. Every figure is the median wall time of
N runs of a whole command (interpreter start included), measured back to back on this machine.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PY = sys.executable


def timed(command: list[str], cwd: Path, repeat: int, expect: int = 0,
          env: dict[str, str] | None = None) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run(command, cwd=cwd, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "NO_COLOR": "1", **(env or {})})
        times.append(time.perf_counter() - start)
        if done.returncode != expect:
            sys.exit(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr}")
    return statistics.median(times)


def gradverify(*args: str) -> list[str]:
    return [PY, "-m", "gradverify", *args]


def second_target_seconds(spec: str) -> float:
    """Sum of the check durations of the second target of ``spec`` (from the JSON report)."""
    import json

    done = subprocess.run(gradverify("check", spec, "--format", "json"), cwd=HERE,
                          capture_output=True, text=True, check=True)
    results = json.loads(done.stdout)["results"]
    second = sorted({r["target"] for r in results})[1]
    return sum(c["duration_s"] for r in results if r["target"] == second for c in r["checks"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    repeat = parser.parse_args().repeat
    rows: list[tuple[str, float, float, str, str]] = []

    torch_import = timed([PY, "-c", "import torch"], HERE, repeat)
    for label, command in (("gradverify --help", gradverify("--help")),
                           ("gradverify explain GV121", gradverify("explain", "GV121")),
                           ("gradverify list (no import)", gradverify("list")),
                           ("spec validation (list specs/)", gradverify("list", "specs"))):
        t = timed(command, ROOT, repeat)
        rows.append((label, t, torch_import, "< 0.3 s, vs import torch",
                     "ok" if t < 0.3 else "MISSED"))

    bare = timed([PY, "bare_overhead.py"], HERE, repeat)
    ours = timed(gradverify("check", "specs/overhead.yaml", "--only", "gradcheck,gradgradcheck"),
                 HERE, repeat)
    rows.append(("check --only gradcheck,gradgradcheck", ours, bare, "<= 1.15x bare script",
                 "ok" if ours / bare <= 1.15 else "MISSED"))

    bare = timed([PY, "bare_million.py"], HERE, repeat)
    ours = timed(gradverify("check", "specs/million.yaml"), HERE, repeat)
    rows.append(("all default checks, 1e6 elements", ours, bare,
                 "seconds (vs bare fast gradcheck+gradgradcheck)",
                 "ok" if ours < 30 else "MISSED"))

    one = timed(gradverify("check", "suite", "-j", "1"), HERE, repeat)
    two = timed(gradverify("check", "suite", "-j", "2"), HERE, repeat)
    rows.append(("8-spec suite, -j 2 vs -j 1", two, one, ">= 1.6x faster",
                 "ok" if one / two >= 1.6 else "MISSED"))
    # -j 1 already keeps both cores busy through torch's intra-op threads, so the bar's premise
    # (single-threaded work per worker) is measured separately: one thread per process.
    single = {"OMP_NUM_THREADS": "1"}
    one = timed(gradverify("check", "suite", "-j", "1"), HERE, repeat, env=single)
    two = timed(gradverify("check", "suite", "-j", "2"), HERE, repeat, env=single)
    rows.append(("  same, one torch thread per worker", two, one, ">= 1.6x faster",
                 "ok" if one / two >= 1.6 else "MISSED"))

    folder_s, targets_s, folder_mem, targets_mem = (float(v) for v in subprocess.run(
        [PY, "load.py", str(repeat)], cwd=HERE, capture_output=True, text=True, check=True
    ).stdout.split())
    rows.append(("200 mod:Class targets vs spec folder", targets_s, folder_s,
                 "<= 1.3x the spec-folder run (-j 2)",
                 "ok" if targets_s / folder_s <= 1.3 else "MISSED"))
    rows.append(("  peak memory of the process tree (MiB)", targets_mem / 2**20,
                 folder_mem / 2**20, "as the spec-folder run",
                 "ok" if targets_mem / folder_mem <= 1.3 else "MISSED"))

    small, large, small_share, large_share = (float(v) for v in subprocess.run(
        [PY, "linearity.py"], cwd=HERE, capture_output=True, text=True, check=True
    ).stdout.split())
    rows.append(("linearity probe, small spec (passes)", small, 1.0,
                 "2 backward passes on gradcheck's forward, plus comparing", "info"))
    rows.append(("linearity probe, 1e6 elements (passes)", large, 1.0,
                 "2 backward passes on gradcheck's forward, plus comparing", "info"))
    rows.append(("gradcheck with probe, small spec", small_share, 1.0,
                 "vs gradcheck without the probe", "info"))
    rows.append(("gradcheck with probe, 1e6 elements", large_share, 1.0,
                 "vs gradcheck without the probe", "info"))

    plain, recorded = (float(v) for v in subprocess.run(
        [PY, "record_loop.py", str(max(repeat, 5))], cwd=HERE, capture_output=True, text=True,
        check=True).stdout.split())
    rows.append(("record: 100 training steps, 5 Functions", recorded, plain,
                 "<= 1.05x without recording", "ok" if recorded / plain <= 1.05 else "MISSED"))

    from record_time import FUNCTIONS, measure

    bare_s, record_s = measure(repeat)
    added = (record_s - bare_s) / FUNCTIONS
    rows.append(("record -- python: 300 steps, 10 Functions", record_s, bare_s,
                 f"{added:.2f}s per Function after the script, <= 1 s",
                 "ok" if added <= 1.0 else "MISSED"))

    check_s, mutate_s = (float(v) for v in subprocess.run(
        [PY, "mutate.py", str(repeat)], cwd=HERE, capture_output=True, text=True, check=True
    ).stdout.split())
    rows.append(("check --mutate vs check, bundled specs", mutate_s, check_s, "<= 3x check",
                 "ok" if mutate_s / check_s <= 3 else "MISSED"))

    # A custom op (opcheck's four tests included) against the same math as a Function class,
    # whole command. The first call of any custom op in a process imports torch._dynamo (torch's
    # custom-op dispatch is wrapped in `torch._compile._disable_dynamo`): a bare script that
    # calls the op once pays it too. The bar counts what checking adds, so the Function
    # class's check is charged that same toll, measured here as the difference of two bare
    # scripts. Then the checks' own time (from the JSON report) for a second target of a run.
    op1, fn1 = (timed(gradverify("check", f"specs/customop_{k}.yaml"), HERE, repeat)
                for k in ("op", "fn"))
    op0, fn0 = (timed([PY, "customop.py", k], HERE, repeat) for k in ("op", "fn"))
    toll = max(0.0, op0 - fn0)
    rows.append(("custom op vs Function class, 3 cases", op1, fn1, "whole command", "info"))
    rows.append(("  bare script: one call of each", op0, fn0,
                 f"torch's first-call toll for a custom op: {toll:.2f}s", "info"))
    rows.append(("  op vs Function class + that toll", op1, fn1 + toll, "<= 1.5x",
                 "ok" if op1 / (fn1 + toll) <= 1.5 else "MISSED"))
    op2, fn2 = (statistics.median(second_target_seconds(f"specs/customop_{k}2.yaml")
                                  for _ in range(repeat)) for k in ("op", "fn"))
    rows.append(("  checks of a 2nd target in the run", op2, fn2,
                 "opcheck's AOT test traces each case", "info"))

    print(f"gradverify benchmarks: python {platform.python_version()}, {os.cpu_count()} cores, "
          f"median of {repeat}")
    print(f"{'measurement':<40}{'ours':>9}{'baseline':>10}{'ratio':>8}  bar")
    for label, ours, base, bar, verdict in rows:
        ratio = ours / base
        if label.startswith(("8-spec", "  same")):
            ratio = base / ours
        if label.startswith("  peak memory"):
            print(f"{label:<40}{ours:>8.0f}M{base:>9.0f}M{ours / base:>7.2f}x  {bar}: {verdict}")
            continue
        if label.startswith(("linearity", "gradcheck with")):
            print(f"{label:<40}{'':>9}{'':>10}{ours:>7.2f}x  {bar}")
            continue
        verdict = "" if verdict == "info" else f": {verdict}"
        print(f"{label:<40}{ours:>8.2f}s{base:>9.2f}s{ratio:>7.2f}x  {bar}{verdict}")


if __name__ == "__main__":
    main()
