"""`gradverify record` on a training script against the bare script: `record_training.py`, 300
steps with ten custom Functions, run bare and under `gradverify record` (specs written to a
temporary folder, shrunk, strengthened and scored as by default), alternating runs so that both
see the same load. `python bench/record_time.py [REPEAT]` prints the medians, record's time over
the bare script's, and what record adds per Function (bar: at most 1 s per Function after the
script). bench.py calls `measure`."""
from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "record_training.py"
FUNCTIONS = 10
"""The custom Functions the script calls (each gets a spec)."""


def once(command: list[str], cwd: str) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def measure(repeat: int) -> tuple[float, float]:
    """Medians in seconds: (the bare script, the same script under `gradverify record`)."""
    bare: list[float] = []
    recorded: list[float] = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as cwd:
            bare.append(once([sys.executable, str(SCRIPT)], cwd))
            recorded.append(once([sys.executable, "-m", "gradverify", "record", "-o", "specs",
                                  "--", "python", str(SCRIPT)], cwd))
            written = len(list(Path(cwd, "specs").glob("*.yaml")))
            if written != FUNCTIONS:
                raise SystemExit(f"record wrote {written} specs, not {FUNCTIONS}")
    return statistics.median(bare), statistics.median(recorded)


def main() -> None:
    repeat = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    bare, recorded = measure(repeat)
    added = (recorded - bare) / FUNCTIONS
    print(f"bare script (300 steps, {FUNCTIONS} Functions)   {bare:6.2f}s  median of {repeat}")
    print(f"gradverify record -- python ...          {recorded:6.2f}s  "
          f"{recorded / bare:.2f}x the bare script")
    print(f"added per Function after the script      {added:6.2f}s  bar <= 1 s: "
          f"{'ok' if added <= 1.0 else 'MISSED'}")


if __name__ == "__main__":
    main()
