"""The worker protocol: every message between the pool (``run/pool.py``) and a worker
(``run/worker.py``), one frozen dataclass per kind, dispatched on by class.

A worker answers ``Discover`` with ``Discovering`` messages then ``Planned``, and ``RunTask``
with ``CheckStarted`` messages then ``TaskResult``; it sends ``Ready`` once, unasked, when it
has started. Messages cross a socket pickled: their fields are gradverify's own data and plain
values, so that the parent, which never imports torch, can unpickle every one of them.
"""
from __future__ import annotations

from dataclasses import dataclass

from gradverify.discover import Job, Plan
from gradverify.options import RunOptions
from gradverify.results import ErrorEntry
from gradverify.run.tasks import Task, TaskOutcome

# ------------------------------------------------------------------ parent to worker


@dataclass(frozen=True)
class Discover:
    """Import the plan's deferred targets and find their jobs."""

    plan: Plan


@dataclass(frozen=True)
class RunTask:
    """Run one case with the run's options."""

    task: Task
    options: RunOptions


# ------------------------------------------------------------------ worker to parent


@dataclass(frozen=True)
class Ready:
    """The worker has imported torch and gradverify and waits for work."""

    torch_version: str
    """A plain ``str`` (not torch's version object): unpickling it must not import torch."""


@dataclass(frozen=True)
class Discovering:
    """What the targets before ``target`` found, sent before ``target`` is imported (``target``
    is empty after the last one)."""

    target: str
    jobs: tuple[Job, ...]
    errors: tuple[ErrorEntry, ...]
    notes: tuple[str, ...]


@dataclass(frozen=True)
class Planned:
    """Discovery is over: everything it found was sent in ``Discovering`` messages."""


@dataclass(frozen=True)
class CheckStarted:
    """The current task has started the check ``name``: what ends it now ends it there."""

    name: str
    kept: TaskOutcome | None = None
    """The task's outcome so far, which stands if the worker ends now: a failed case's, sent
    before it is shrunk (``name`` is ``shrinking``)."""


@dataclass(frozen=True)
class TaskResult:
    """The current task's outcome: the case's result (or None) and the errors met."""

    outcome: TaskOutcome
    unusable: str | None = None
    """Why the worker cannot serve another task, when it cannot: the task left its CUDA
    context broken (a device-side assert is sticky). It exits; the pool starts another, so
    the next case is not blamed for it."""


ToWorker = Discover | RunTask
"""What the pool sends a worker."""
FromWorker = Ready | Discovering | Planned | CheckStarted | TaskResult
"""What a worker sends the pool."""


def from_worker(message: object) -> FromWorker | None:
    """A message a worker sent, or None for anything else read from its socket (what user code
    wrote there): never taken for a result."""
    return message if isinstance(message, FromWorker) else None
