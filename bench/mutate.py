"""`gradverify check --mutate` against `gradverify check` on the bundled specs (the repository's
`[tool.gradverify]` spec folders), whole commands, alternating runs so that both see the same
load. Prints the two medians in seconds: `python bench/mutate.py [REPEAT]`.

The mutation run does everything the plain run does (its report is the same) and then, in each
case's worker, runs every mutant of the target's backward: finite differences taken once per
case, then backward only per mutant; the mutants the Jacobian comparison does not kill run
through the case's checks again."""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def once(*flags: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "gradverify", "check", "--format", "plain", *flags],
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
                   env={**os.environ, "NO_COLOR": "1"})
    return time.perf_counter() - start


def main() -> None:
    repeat = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    plain: list[float] = []
    mutated: list[float] = []
    for _ in range(repeat):
        plain.append(once())
        mutated.append(once("--mutate"))
    print(f"{statistics.median(plain):.3f} {statistics.median(mutated):.3f}")


if __name__ == "__main__":
    main()
