"""Load: 200 Functions checked with -j 2, as a spec folder and as 200 ``mod:Class`` arguments.

``python bench/load.py [REPEAT]`` writes the project into a temporary folder and prints four
numbers: the median wall time of each run and the peak memory of each run's process tree (RSS
summed over gradverify and its workers, sampled every 20 ms from /proc). The bar: the
``mod:Class`` run within 1.3x of the spec-folder run.
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COUNT = 200


def write_project(root: Path) -> list[str]:
    (root / "specs").mkdir()
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    for i in range(COUNT):
        (root / "pkg" / f"m{i}.py").write_text(
            "import torch\nfrom torch.autograd import Function\n\n\n"
            f"class F{i}(Function):\n"
            "    @staticmethod\n    def forward(ctx, x):\n        ctx.save_for_backward(x)\n"
            f"        return x * {i + 1}.0 + x.sin()\n\n"
            "    @staticmethod\n    def backward(ctx, g):\n        (x,) = ctx.saved_tensors\n"
            f"        return g * ({i + 1}.0 + x.cos())\n")
        (root / "specs" / f"s{i}.yaml").write_text(
            f"target: pkg.m{i}:F{i}\ncases:\n  - name: v\n    args: {{x: {{shape: [3]}}}}\n")
    return [f"pkg.m{i}:F{i}" for i in range(COUNT)]


def _tree_rss(pid: int) -> int:
    """Resident memory of ``pid`` and every process below it, in bytes."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
            children.setdefault(int(fields[1]), []).append(int(entry.name))
            rss[int(entry.name)] = int(fields[21]) * 4096
        except (OSError, IndexError, ValueError):
            continue
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        total += rss.get(current, 0)
        todo += children.get(current, [])
    return total


def run(command: list[str], cwd: Path) -> tuple[float, int]:
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    peak = 0
    while process.poll() is None:
        peak = max(peak, _tree_rss(process.pid))
        time.sleep(0.02)
    if process.returncode != 0:
        sys.exit(f"{' '.join(command[:4])} ... exited {process.returncode}")
    return time.perf_counter() - start, peak


def main() -> None:
    repeat = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    gradverify = [sys.executable, "-m", "gradverify", "check", "-j", "2"]
    with tempfile.TemporaryDirectory(prefix="gradverify-load-") as folder:
        root = Path(folder)
        targets = write_project(root)
        folder_runs = [run(gradverify, root) for _ in range(repeat)]
        target_runs = [run(gradverify + targets, root) for _ in range(repeat)]
    print(statistics.median(t for t, _ in folder_runs),
          statistics.median(t for t, _ in target_runs),
          max(m for _, m in folder_runs), max(m for _, m in target_runs))


if __name__ == "__main__":
    main()
