"""What the default composition cells cost (checkpoint and saved_hooks: each one
forward and a backward beside its probe call): `gradverify check` with the default checks,
against the same with the two cells skipped, on a small two-input
spec (``specs/cells.yaml``, where every cell runs) and on 1,000,000 elements
(``specs/million.yaml``, the ``bench.py`` bar: under 30 s). Whole commands, alternating runs
so that all see the same load; one worker (``-j 1``). Prints the medians and the ratios:
`python bench/cells.py [REPEAT]`."""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CELLS = "checkpoint,saved_hooks"


def once(spec: str, *flags: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "gradverify", "check", "--format", "plain", "-j", "1",
                    spec, *flags], cwd=HERE, check=True, stdout=subprocess.DEVNULL,
                   env={**os.environ, "NO_COLOR": "1"})
    return time.perf_counter() - start


def main() -> None:
    repeat = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    for spec in ("specs/cells.yaml", "specs/million.yaml"):
        without: list[float] = []
        with_cells: list[float] = []
        for _ in range(repeat):
            without.append(once(spec, "--skip", CELLS))
            with_cells.append(once(spec))
        base, ours = statistics.median(without), statistics.median(with_cells)
        print(f"{spec:20s} without the cells {base:6.2f}s  with them {ours:6.2f}s  "
              f"{ours / base:5.2f}x  +{ours - base:5.2f}s per target")


if __name__ == "__main__":
    main()
