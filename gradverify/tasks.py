"""What a run is made of, shared by the runner and the worker pool: the options of a run, the
task a worker runs (one case of one job), and the results that stand in for a task that could not
finish."""
from __future__ import annotations

import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gradverify.discover import Job
from gradverify.report.results import CaseResult, CheckResult, Finding, Severity, Status
from gradverify.spec import Tolerance


@dataclass(frozen=True)
class RunOptions:
    seed: int = 0
    device: str = "cpu"
    mode: str = "auto"
    only: tuple[str, ...] | None = None
    skip: tuple[str, ...] = ()
    cases: tuple[str, ...] = ()
    """Glob patterns on case names; empty means every case."""
    tolerance: Tolerance = Tolerance()
    """Command-line tolerances: override every spec."""
    base_tolerance: Tolerance = Tolerance()
    """pyproject tolerances: below every spec."""
    config_checks: Mapping[str, bool] = field(default_factory=dict)
    verbose: bool = False
    strict: bool = False
    isolate: bool = False
    """Run cases in worker processes (crashes and hangs become that case's error)."""
    jobs: int = 1
    timeout: float | None = None
    """Seconds per case before its worker is killed (isolated runs only)."""
    shard: tuple[int, int] | None = None
    """(K, N): run the K-th of N stable slices of the cases (1-based)."""
    changed: bool = False
    """TARGETs are changed files (pre-commit); nothing to check is success."""


@dataclass(frozen=True)
class Task:
    """One case of one job, the unit a worker runs."""

    index: int
    job_index: int
    job: Job
    case: str
    first: bool
    """The job's first selected case: static checks (lint) run here."""
    smallest: bool
    """The job's smallest case: gradcheck also runs in slow mode if fast mode was chosen."""


def failed_case(task: Task, check: str | None, code: str, message: str, hint: str) -> CaseResult:
    """A case that could not finish: one error result carrying the finding."""
    finding = Finding(code, Severity.ERROR, message, hint=hint)
    spec = task.job.spec
    return CaseResult(target=task.job.target, spec=spec.path if spec else None, case=task.case,
                      status=Status.ERROR, duration_s=0.0,
                      checks=(CheckResult(check or "run", Status.ERROR, 0.0, message[:80],
                                          (finding,)),),
                      inferred=spec is None)


def mark_interrupted(tasks: list[Task], outcomes: dict[int, Any],
                     exc: KeyboardInterrupt) -> dict[int, Any]:
    """Every task without an outcome becomes a GV014 error naming the signal."""
    signum = getattr(exc, "signum", None)
    why = f"signal {signal.Signals(signum).name}" if signum else "an interrupt (SIGINT)"
    for task in tasks:
        if task.index not in outcomes:
            outcomes[task.index] = failed_case(
                task, None, "GV014", f"the run was stopped by {why} before this case finished",
                "rerun it; nothing is wrong with the case itself"), []
    return outcomes
