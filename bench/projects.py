"""`record` and `check --mutate` on the two planted-bug projects of the tests (`tests/audio`, a
signal-processing package, and `tests/physics`, a simulation one; about ten Functions each,
correct code): record's cost per Function after the bare training script, and `--mutate`'s time
over `check`'s on the specs record wrote, whole commands in a copy of each project, alternating
runs so that both see the same load. Bars: record adds at most 1 s per Function; `--mutate` at
most 3x `check`.

    python bench/projects.py [REPEAT]
"""
from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"
PROJECTS = {"audio": "SIGKIT_BUGS", "physics": "SIMKIT_BUGS"}
"""Each project's folder under tests/, and the variable that plants its bugs (0 here)."""


def once(command: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def measure(folder: str, flag: str, repeat: int) -> dict[str, float]:
    """Medians in seconds, and the Functions recorded, for one project."""
    env = {**os.environ, flag: "0", "NO_COLOR": "1"}
    gv = [sys.executable, "-m", "gradverify"]
    times: dict[str, list[float]] = {"bare": [], "record": [], "check": [], "mutate": []}
    functions = 0
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            where = Path(tmp) / folder
            shutil.copytree(TESTS / folder, where,
                            ignore=shutil.ignore_patterns("__pycache__"))
            times["bare"].append(once([sys.executable, "train.py"], where, env))
            times["record"].append(once([*gv, "record", "-o", "recorded", "--", sys.executable,
                                         "train.py"], where, env))
            functions = len(list((where / "recorded").glob("*.yaml")))
            times["check"].append(once([*gv, "check", "recorded", "-q"], where, env))
            times["mutate"].append(once([*gv, "check", "recorded", "-q", "--mutate"], where,
                                        env))
    medians = {k: statistics.median(v) for k, v in times.items()}
    return {**medians, "functions": float(functions)}


def main() -> None:
    repeat = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    print(f"{'project':<9} {'bare':>6} {'record':>7} {'per Function':>13} {'check':>6} "
          f"{'--mutate':>9} {'ratio':>6}")
    for folder, flag in PROJECTS.items():
        m = measure(folder, flag, repeat)
        per = (m["record"] - m["bare"]) / max(m["functions"], 1)
        ratio = m["mutate"] / m["check"]
        print(f"{folder:<9} {m['bare']:5.1f}s {m['record']:6.1f}s {per:8.2f}s/{m['functions']:.0f}"
              f"{' ok' if per <= 1 else ' MISSED':>4} {m['check']:5.1f}s {m['mutate']:8.1f}s "
              f"{ratio:5.2f}x{' ok' if ratio <= 3 else ' MISSED'}")


if __name__ == "__main__":
    main()
