"""The parent's handle on one worker process (``run/worker.py`` is the worker's side): its
process, socket and log, and how the pool waits on, kills and reaps it. No wait is unbounded."""
from __future__ import annotations

import pickle
import subprocess
from dataclasses import dataclass
from multiprocessing.connection import Connection

from gradverify.run import leftovers, messages, processes
from gradverify.run.output import Output
from gradverify.run.processes import Process
from gradverify.run.tasks import Task, TaskOutcome


@dataclass
class Worker:
    """One worker process, and the case it runs now (``task``), as the pool sees it."""

    process: Process
    conn: Connection
    output: Output
    spawned: float
    """When it was started (the pool's ``RunningClock``): its start deadline counts from
    here."""
    task: Task | None = None
    started: float = 0.0
    check: str | None = None
    kept: TaskOutcome | None = None
    """What stands if the worker ends now (``CheckStarted.kept``): a failure being shrunk."""
    ready: bool = False
    closed: float | None = None
    """When its connection closed while it ran a task (it died, or user code closed the
    socket): it gets a short grace to exit before it is stopped."""


def receive(worker: Worker, timeout: float) -> messages.FromWorker | None:
    """The worker's next message within ``timeout`` seconds, or None (it closed its end,
    died, or stayed silent): no wait on a worker is unbounded."""
    try:
        if worker.conn.poll(max(0.0, timeout)):
            return messages.from_worker(worker.conn.recv())
    except (EOFError, OSError, pickle.UnpicklingError):
        pass
    return None


def kill(worker: Worker) -> None:
    """Kill a worker and everything below it: every process in its session (what its
    Functions started) and what it adopted (daemons that left the session: a worker inherits
    its descendants' orphans)."""
    if worker.process.returncode is not None:  # reaped (``processes.exited``): its group
        return                                  # went then, and its pid may be another's
    below = sorted(leftovers.descendants(worker.process.pid))
    processes.kill_group(worker.process)
    leftovers.kill(below)
    worker.process.wait()


def reap(worker: Worker) -> None:
    """Wait for a worker that is dying anyway, so that its exit status can be read."""
    try:
        worker.process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        worker.process.kill()
        worker.process.wait()
