"""Verdicts are a function of the code, the spec and the seed alone: the bundled specs and
``specs/broken``, checked in one process and by two workers (the cases handed out in another
order, each worker a fresh process seeding its own torch), give the same report but for its
timings."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _verdicts(report: dict[str, Any]) -> list[Any]:
    """Everything a report says of each case but how long it took, in a fixed order."""
    return sorted(
        [r["target"], r["spec"], r["case"], r["status"],
         [[c["name"], c["status"], c["summary"], c["mode"],
           [[f["code"], f["severity"], f["input"], f["message"], f["hint"]]
            for f in c["findings"]]] for c in r["checks"]],
         r["mutants"]]
        for r in report["results"])


@pytest.mark.slow
def test_the_same_verdicts_in_one_process_and_by_two_workers():
    runs = {}
    for how in (["--no-isolate"], ["-j", "2"]):
        done = subprocess.run(
            [sys.executable, "-m", "gradverify", "check", "specs", "specs/broken", "--format",
             "json", *how], cwd=ROOT, capture_output=True, text=True, timeout=600,
            stdin=subprocess.DEVNULL)
        assert done.returncode == 1, done.stderr[-2000:]  # specs/broken fails
        runs[" ".join(how)] = json.loads(done.stdout)
    first = runs["--no-isolate"]
    assert len(first["results"]) > 30 and first["summary"]
    for how, report in runs.items():
        assert _verdicts(report) == _verdicts(first), how
        assert _untimed(report["summary"]) == _untimed(first["summary"]), how


def _untimed(summary: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in summary.items() if not key.endswith("_s")}
