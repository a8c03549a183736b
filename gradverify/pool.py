"""Worker processes: a case that segfaults, aborts or hangs becomes that case's error.

The parent never imports torch. Each worker is a fresh interpreter (``python -m
gradverify.pool``, talking over a socket pair) that imports the targets, runs one case at a
time and sends back its frozen ``CaseResult``. Workers are started before the parent reads any
spec, so their torch import overlaps with the parent's own work. A worker that dies is
replaced; one that exceeds ``--timeout`` on a case is killed and replaced. Worker output (user
prints, native crash messages) goes to a log file, so it never mixes into the report; the tail
of it is quoted when a worker crashes.
"""
from __future__ import annotations

import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from gradverify.discover import Plan
from gradverify.report.results import CaseResult, ErrorEntry
from gradverify.tasks import RunOptions, Task, failed_case, mark_interrupted

DEFAULT_TIMEOUT = 300.0
"""Seconds a case may run in a worker before it is killed (``--timeout`` changes it)."""

Outcomes = dict[int, tuple[CaseResult | None, list[ErrorEntry]]]


# ----------------------------------------------------------------------------- worker side


def worker_main(conn: Connection, log_path: str, threads: int) -> None:
    """The worker loop: receive tasks, send results, until told to stop."""
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    from gradverify.target import ensure_cwd_on_path

    ensure_cwd_on_path()
    import torch

    if threads:
        torch.set_num_threads(threads)
    from gradverify import torchstate

    torchstate.baseline()  # before any user module is imported
    from gradverify.discover import resolve_deferred
    from gradverify.execute import execute

    cache: dict[int, Any] = {}
    conn.send(("ready", str(torch.__version__)))  # plain str: unpickling must not import torch
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        kind = message[0]
        if kind == "stop":
            return
        if kind == "discover":
            conn.send(("plan", resolve_deferred(message[1])))
        elif kind == "task":
            task, options = message[1], message[2]
            outcome = execute(task, options, cache, on_check=lambda name: conn.send(("check", name)))
            conn.send(("result", outcome))


# ----------------------------------------------------------------------------- parent side


@dataclass
class _Worker:
    process: subprocess.Popen[bytes]
    conn: Connection
    log: Path
    task: Task | None = None
    started: float = 0.0
    check: str | None = None
    ready: bool = False
    log_offset: int = 0
    """Size of the log when the current task started: its output is what follows."""


class Pool:
    """``jobs`` workers, started on demand, each running one case at a time."""

    def __init__(self, options: RunOptions) -> None:
        self.options = options
        self.jobs = max(1, options.jobs)
        self.timeout = options.timeout if options.timeout is not None else DEFAULT_TIMEOUT
        self.workers: list[_Worker] = []
        self.versions: dict[str, str] = {}
        self._logs = tempfile.TemporaryDirectory(prefix="gradverify-")
        cores = os.cpu_count() or 1
        self._threads = max(1, cores // self.jobs) if self.jobs > 1 else 0

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        for worker in list(self.workers):
            # Idle workers hold nothing worth a graceful shutdown; tearing down an
            # interpreter with torch loaded takes most of a second.
            worker.process.kill()
            worker.process.wait()
            worker.conn.close()
        self._logs.cleanup()

    def prestart(self, count: int) -> None:
        """Start workers now, without waiting for them to import torch."""
        while len(self.workers) < min(count, self.jobs):
            self._start()

    def _start(self) -> _Worker:
        mine, theirs = socket.socketpair()
        log = Path(self._logs.name) / f"worker-{len(self.workers)}-{time.monotonic_ns()}.log"
        process = subprocess.Popen(
            [sys.executable, "-m", "gradverify.pool", str(theirs.fileno()), str(log),
             str(self._threads)],
            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent())
        theirs.close()
        worker = _Worker(process, Connection(mine.detach()), log)
        self.workers.append(worker)
        return worker

    def _alive(self, worker: _Worker) -> bool:
        return worker.process.poll() is None

    def _await_ready(self, worker: _Worker) -> bool:
        if worker.ready:
            return True
        try:
            message = worker.conn.recv()
        except (EOFError, OSError, pickle.UnpicklingError):
            return False
        worker.ready = message[0] == "ready"
        self.versions["torch"] = message[1]
        return worker.ready

    def discover(self, plan: Plan) -> Plan:
        """Targets that need importing are discovered in a worker, not here."""
        if not plan.deferred:
            return plan
        worker = self._start()
        if self._await_ready(worker):
            worker.conn.send(("discover", plan))
            try:
                message = worker.conn.recv()
                if message[0] == "plan":
                    return message[1]
            except (EOFError, OSError, pickle.UnpicklingError):
                pass
        _reap(worker)
        self._retire(worker)
        return Plan(jobs=plan.jobs, errors=plan.errors + [ErrorEntry(
            ", ".join(plan.deferred), None, "GV010",
            f"the process importing {', '.join(plan.deferred)} crashed "
            f"({_death(worker)}){_tail(worker.log)}")], notes=plan.notes)

    def run(self, tasks: list[Task], progress: Callable[[int, int, str], None] | None) -> Outcomes:
        """Every task's outcome. On an interrupt (SIGINT, SIGTERM, SIGHUP) the workers are
        stopped and the interrupt is re-raised with ``outcomes`` attached: what finished, and
        the rest as interrupted errors."""
        outcomes: Outcomes = {}
        try:
            return self._run(tasks, progress, outcomes)
        except KeyboardInterrupt as exc:
            self.stop()
            exc.outcomes = mark_interrupted(tasks, outcomes, exc)  # type: ignore[attr-defined]
            raise

    def stop(self, grace: float = 2.0) -> None:
        """Terminate every worker, then kill those still alive after ``grace`` seconds."""
        for worker in self.workers:
            if self._alive(worker):
                worker.process.terminate()
        deadline = time.monotonic() + grace
        for worker in list(self.workers):
            try:
                worker.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()
            self._retire(worker)

    def _run(self, tasks: list[Task], progress: Callable[[int, int, str], None] | None,
             outcomes: Outcomes) -> Outcomes:
        if not tasks:
            return outcomes
        pending = deque(tasks)
        done = 0
        # Start the workers together: each spends its first second or two importing torch.
        alive = [w for w in self.workers if self._alive(w)]
        fresh = [self._start() for _ in range(min(self.jobs, len(tasks)) - len(alive))]
        for worker in alive + fresh:
            self._await_ready(worker)
        while pending or any(w.task for w in self.workers):
            for worker in [w for w in self.workers if w.task is None]:
                if not pending:
                    break
                task = pending.popleft()
                if not (self._alive(worker) and self._await_ready(worker)):
                    outcomes[task.index] = self._crashed(worker, task)
                    self._retire(worker)
                    done += 1
                    continue
                worker.task, worker.started, worker.check = task, time.monotonic(), None
                worker.log_offset = _size(worker.log)
                worker.conn.send(("task", task, self.options))
                if progress:
                    progress(done, len(tasks), f"{task.job.target} {task.case}")
            if pending and len(self.workers) < self.jobs:
                self._await_ready(self._start())
                continue
            busy = [w for w in self.workers if w.task is not None]
            if not busy:
                continue
            deadline = min(w.started + self.timeout for w in busy)
            # A dead worker's socket reads as end-of-file, so waiting on the sockets alone
            # also notices crashes.
            ready = wait([w.conn for w in busy], timeout=max(0.0, deadline - time.monotonic()))
            for worker in busy:
                finished = self._poll(worker, ready, outcomes)
                if finished:
                    done += 1
            if progress:
                progress(done, len(tasks), "")
        return outcomes

    def _poll(self, worker: _Worker, ready: list[Any], outcomes: Outcomes) -> bool:
        """Handle what one busy worker did; True when its task is finished."""
        task = worker.task
        if task is None:
            return False
        if worker.conn in ready:
            try:
                while worker.conn.poll():
                    message = worker.conn.recv()
                    if message[0] == "check":
                        worker.check = message[1]
                    elif message[0] == "result":
                        outcomes[task.index] = message[1]
                        worker.task = None
                        return True
            except (EOFError, OSError, pickle.UnpicklingError):
                worker.process.wait()
        if not self._alive(worker):
            outcomes[task.index] = self._crashed(worker, task)
            self._retire(worker)
            return True
        if time.monotonic() - worker.started >= self.timeout:
            worker.process.kill()
            worker.process.wait()
            outcomes[task.index] = self._timed_out(worker, task)
            self._retire(worker)
            return True
        return False

    def _retire(self, worker: _Worker) -> None:
        worker.task = None
        worker.conn.close()
        if worker in self.workers:
            self.workers.remove(worker)

    def _crashed(self, worker: _Worker, task: Task) -> tuple[CaseResult | None, list[ErrorEntry]]:
        _reap(worker)
        message = (f"the process running this case died ({_death(worker)})"
                   f"{' during ' + worker.check if worker.check else ''}"
                   f"{_tail(worker.log, worker.log_offset)}")
        return failed_case(task, worker.check, "GV010", message,
                            "a crash in native code (an extension or kernel); rerun this case "
                            "alone with --no-isolate under a debugger"), []

    def _timed_out(self, worker: _Worker, task: Task) -> tuple[CaseResult | None, list[ErrorEntry]]:
        message = (f"timed out after {self.timeout:g} s"
                   f"{' during ' + worker.check if worker.check else ''}")
        return failed_case(task, worker.check, "GV009", message,
                            "use smaller shapes, --fast, or a larger --timeout"), []


def _die_with_parent() -> Callable[[], None] | None:
    """What the forked worker runs before exec so that the kernel kills it when the parent dies
    for any reason, SIGKILL included (Linux ``prctl(PR_SET_PDEATHSIG)``): no path leaves an
    orphan. libc is loaded here, in the parent, because the child between fork and exec must
    not import or take locks (a progress-bar thread may hold them). Elsewhere, None: a worker
    then notices its parent's death at its next read (end of file)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    pr_set_pdeathsig, sigkill = 1, int(signal.SIGKILL)
    return lambda: prctl(pr_set_pdeathsig, sigkill)


def _reap(worker: _Worker) -> None:
    """Wait for a worker that is dying anyway, so that its exit status can be read."""
    try:
        worker.process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        worker.process.kill()
        worker.process.wait()


def _death(worker: _Worker) -> str:
    code = worker.process.poll()
    if code is None:
        return "still running"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}"
    return f"exit code {code}"


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _tail(log: Path, offset: int = 0, lines: int = 5) -> str:
    """The last lines a worker printed since ``offset`` (its current task's output)."""
    try:
        with log.open("rb") as handle:
            handle.seek(offset)
            text = handle.read().decode(errors="replace").strip().splitlines()
    except OSError:
        return ""
    tail = [line for line in text if line.strip()][-lines:]
    return ("; its last output: " + " | ".join(tail)) if tail else ""


if __name__ == "__main__":
    worker_main(Connection(int(sys.argv[1])), sys.argv[2], int(sys.argv[3]))
