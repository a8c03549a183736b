"""What a run is made of, shared by the runner and the worker pool: the task a worker runs (one
case of one job), and the results that stand in for a task that could not finish. The options
of a run are ``gradverify.options.RunOptions``."""
from __future__ import annotations

import dataclasses
import signal
from dataclasses import dataclass

from gradverify.discover import Job
from gradverify.errors import Interrupted
from gradverify.registry import REGISTRY
from gradverify.results import (
    CaseResult,
    CheckResult,
    ErrorEntry,
    Finding,
    Severity,
    Status,
    first_clause,
)
from gradverify.specmodel import Spec


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
    """A case that could not finish: one error row carrying the finding, the row of the check
    that was running, or one about the case (its import, inputs or forward, or before)."""
    finding = Finding(code, Severity.ERROR, message, hint=hint)
    spec = task.job.spec
    row = (CheckResult(check or "run", Status.ERROR, 0.0, first_clause(message), (finding,)),)
    ran = check in REGISTRY
    return CaseResult(target=task.job.target, spec=spec.path if spec else None, case=task.case,
                      status=Status.ERROR, duration_s=0.0, checks=row if ran else (),
                      about_case=() if ran else row, inferred=spec is None)


TaskOutcome = tuple[CaseResult | None, list[ErrorEntry]]
"""A task's outcome: the case's result (or None) and the errors met."""
TaskOutcomes = dict[int, TaskOutcome]
"""Each task's outcome by its index."""


def during(check: str | None) -> str:
    return f" during {check}" if check else ""


def lost(task: Task, check: str | None, tail: str) -> TaskOutcome:
    """The worker running ``task`` closed its connection (``tail``: its last output)."""
    message = (f"the process running this case closed its connection to gradverify and was "
               f"stopped{during(check)}{tail}")
    return failed_case(task, check, "GV010", message,
                       "the Function (or a module it imports) closed file descriptors it does "
                       "not own (os.closerange, closing sockets); rerun this case alone with "
                       "--no-isolate"), []


def crashed(task: Task, check: str | None, code: int | None, tail: str) -> TaskOutcome:
    """The worker running ``task`` died with exit status ``code``: while importing the
    target, that target's import error; else the case's crash."""
    if check == "import":
        job = task.job
        return None, [ErrorEntry(job.target, job.spec.path if job.spec else None, "GV003",
                                 f"importing {job.target.rpartition(':')[0]} {ended(code)}: "
                                 f"the module ends the process when imported{tail}")]
    message = f"the process running this case died ({died(code)}){during(check)}{tail}"
    return failed_case(task, check, "GV010", message,
                       "a crash in native code (an extension or kernel); rerun this case alone "
                       "with --no-isolate under a debugger"), []


SHRINKING = "shrinking"
"""The phase of a task that searches a failed check's smallest failing case, after the case's
checks (and mutants): a worker that ends in it leaves the case's outcome as it was."""
MUTANTS = "mutants"
"""The phase of a task that runs the mutants of ``--mutate``, after the case's own checks: a
worker that ends in it leaves the case's outcome as it was (``mutants_apart``)."""


def mutants_apart(kept: TaskOutcome, why: str) -> TaskOutcome:
    """The outcome a case had before its mutants ran (``kept``), saying ``why`` they were not
    judged: our own mutants never cost the user's verdict."""
    result, errors = kept
    if result is None:
        return kept
    return dataclasses.replace(result, mutants_not_judged=why), errors


def timed_out(task: Task, check: str | None, timeout: float) -> TaskOutcome:
    return failed_case(task, check, "GV009", f"timed out after {timeout:g} s{during(check)}",
                       "use smaller shapes, --fast, or a larger --timeout"), []


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
                          status=Status.SKIP, duration_s=0.0, about_case=(row,))



class TasksInterrupted(Interrupted):
    """Raised by ``Pool.run`` on an interrupt, once the workers are stopped: ``outcomes``
    holds every task's, those that did not finish as errors (GV014)."""

    def __init__(self, outcomes: TaskOutcomes, signum: int) -> None:
        super().__init__(signum)
        self.outcomes = outcomes


def mark_interrupted(tasks: list[Task], outcomes: TaskOutcomes,
                     exc: KeyboardInterrupt) -> TaskOutcomes:
    """Every task without an outcome becomes a GV014 error naming the signal."""
    why = f"signal {signal.Signals(exc.signum).name}" if isinstance(exc, Interrupted) \
        else "an interrupt (SIGINT)"
    for task in tasks:
        if task.index not in outcomes:
            outcomes[task.index] = failed_case(
                task, None, "GV014", f"the run was stopped by {why} before this case finished",
                "rerun it; nothing is wrong with the case itself"), []
    return outcomes


def ended(code: int | None) -> str:
    """How a finished worker ended, for an import: ``exited with status 7``, ``was killed by
    SIGSEGV``."""
    return f"exited with status {code}" if code is not None and code >= 0 else f"was {died(code)}"


def died(code: int | None) -> str:
    """A worker's exit status in words: ``killed by SIGSEGV``, ``exit code 3``."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}"
    return f"exit code {code}"
