"""Why the test suite runs torch on one thread per process (tests/conftest.py, ``ONE_THREAD``):
``pytest -n auto`` runs a test per core, so two torch processes share two cores, and
each, by default, starts an intra-op thread per core; OpenMP's threads spin while they wait.
This times two ``gradverify check`` runs of the bundled specs side by side (as two xdist
workers' commands are), with torch's default thread count and with ``OMP_NUM_THREADS=1``,
alternating, and prints the medians and their ratio.

Run: python bench/suite_threads.py [--repeat N]"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMAND = [sys.executable, "-m", "gradverify", "check", "-q", "--no-isolate"]


def side_by_side(env: dict[str, str]) -> float:
    """Wall time of two checks of the bundled specs started together."""
    start = time.perf_counter()
    runs = [subprocess.Popen(COMMAND, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL) for _ in range(2)]
    for run in runs:
        run.wait()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    repeat = parser.parse_args().repeat
    default = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    default.update(NO_COLOR="1", PYTHONPATH=str(ROOT))
    single = {**default, "OMP_NUM_THREADS": "1"}
    times: dict[str, list[float]] = {"default": [], "single": []}
    for _ in range(repeat):
        times["default"].append(side_by_side(default))
        times["single"].append(side_by_side(single))
    many, one = (statistics.median(times[k]) for k in ("default", "single"))
    print(f"two checks side by side, {os.cpu_count()} cores, median of {repeat}")
    print(f"  torch's default threads  {many:6.2f}s")
    print(f"  OMP_NUM_THREADS=1        {one:6.2f}s  {many / one:.2f}x faster")


if __name__ == "__main__":
    main()
