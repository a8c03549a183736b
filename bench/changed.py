"""`check --changed` on a .py file reads every spec (as it did before), then the imports of
every file the specs' targets reach. This times, in-process and without torch, on a synthetic
project (400 modules in 20 packages, each importing the next five and a shared helper; 200
specs): reading the specs alone (what a changed .py file cost before imports were followed)
against the whole choice for a changed shared helper, both from cold caches, as in the new
process that each pre-commit run is, and prints the ratio.

Run: python bench/changed.py [--repeat N]"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from gradverify.config import Config
from gradverify.discover import Discoverer, _read_specs
from gradverify.importgraph import _parsed

PACKAGES, MODULES, SPECS = 20, 20, 200


def make_project(root: Path) -> None:
    (root / "specs").mkdir()
    (root / "shared.py").write_text("def helper(x):\n    return x\n")
    names = [f"p{p}.m{m}" for p in range(PACKAGES) for m in range(MODULES)]
    for p in range(PACKAGES):
        (root / f"p{p}").mkdir()
        (root / f"p{p}" / "__init__.py").write_text("")
    for index, name in enumerate(names):
        following = names[index + 1:index + 6]
        text = "import torch\nfrom shared import helper\n" + \
            "".join(f"import {other}\n" for other in following) + \
            "\nclass Fn(torch.autograd.Function):\n    pass\n" + "\n" * 50
        (root / (name.replace(".", "/") + ".py")).write_text(text)
    for index in range(SPECS):
        (root / "specs" / f"s{index}.yaml").write_text(
            f"target: {names[index * 2]}:Fn\ncases:\n  - args: {{x: {{shape: [3]}}}}\n")


def timed(root: Path, changed: str | None, repeat: int) -> tuple[float, int]:
    """The median time to choose the specs for ``changed`` (None: only read the specs)."""
    times, jobs = [], 0
    for _ in range(repeat):
        _read_specs.cache_clear()
        _parsed.cache_clear()
        start = time.perf_counter()
        discoverer = Discoverer(Config(root=root))
        if changed is None:
            jobs = len(discoverer.folder_specs())
        else:
            jobs = len(discoverer.changed([changed]).jobs)
        times.append(time.perf_counter() - start)
    return statistics.median(times), jobs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    repeat = parser.parse_args().repeat
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder).resolve()
        make_project(root)
        os.chdir(root)
        read_time, specs = timed(root, None, repeat)
        py_time, jobs = timed(root, "shared.py", repeat)
        assert "torch" not in sys.modules, "discovery imported torch"
    print(f"--changed discovery, {PACKAGES * MODULES} modules, {specs} specs, median of {repeat}")
    print(f"read the specs (before)     {read_time:8.3f}s")
    print(f"changed shared helper       {py_time:8.3f}s  ({jobs} specs selected)")
    print(f"ratio                       {py_time / max(read_time, 1e-9):8.2f}x")

if __name__ == "__main__":
    main()
