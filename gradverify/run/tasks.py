"""What a run is made of, shared by the runner and the worker pool: the task a worker runs (one
case of one job), and the results that stand in for a task that could not finish. The options
of a run are ``gradverify.options.RunOptions``."""
from __future__ import annotations

import signal
from dataclasses import dataclass

from gradverify.discover import Job
from gradverify.errors import Interrupted
from gradverify.results import CaseResult, CheckResult, ErrorEntry, Finding, Severity, Status
from gradverify.spec.model import Spec


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


Outcomes = dict[int, tuple[CaseResult | None, list[ErrorEntry]]]
"""Each task's outcome by its index: the case's result (or None) and the errors met."""


UNSUPPORTED_ROW = "torch"
"""The one row of a case skipped because its spec needs a newer torch."""


@dataclass(frozen=True)
class Unsupported:
    """A job whose spec needs a newer torch (``requires_torch``): its cases are skipped."""

    target: str
    spec: Spec
    reason: str

    def skipped(self, case: str) -> CaseResult:
        row = CheckResult(UNSUPPORTED_ROW, Status.SKIP, 0.0,
                          f"skipped: the target needs {self.reason}")
        return CaseResult(target=self.target, spec=self.spec.path, case=case,
                          status=Status.SKIP, duration_s=0.0, checks=(row,))



class TasksInterrupted(Interrupted):
    """Raised by ``Pool.run`` on an interrupt, once the workers are stopped: ``outcomes``
    holds every task's, those that did not finish as errors (GV014)."""

    def __init__(self, outcomes: Outcomes, signum: int) -> None:
        super().__init__(signum)
        self.outcomes = outcomes


def mark_interrupted(tasks: list[Task], outcomes: Outcomes, exc: KeyboardInterrupt) -> Outcomes:
    """Every task without an outcome becomes a GV014 error naming the signal."""
    why = f"signal {signal.Signals(exc.signum).name}" if isinstance(exc, Interrupted) \
        else "an interrupt (SIGINT)"
    for task in tasks:
        if task.index not in outcomes:
            outcomes[task.index] = failed_case(
                task, None, "GV014", f"the run was stopped by {why} before this case finished",
                "rerun it; nothing is wrong with the case itself"), []
    return outcomes
