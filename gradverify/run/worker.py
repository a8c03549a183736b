"""A worker process (``gradverify.run.worker FD THREADS CACHE``, started with
``run/processes.py``): imports targets and runs one case at a time for the parent's
``gradverify.run.pool.Pool``, sending back frozen results over its socket. Its stdout and stderr
are a pipe the parent drains, keeping the first and last bytes (``run.output``); it runs in a
session of its own, and inherits what its descendants orphan."""
from __future__ import annotations

import importlib
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from gradverify import syspath, torchstate
from gradverify.discover import Plan, resolve_deferred
from gradverify.results import ErrorEntry
from gradverify.run import caches, leftovers, processes
from gradverify.run.execute import execute
from gradverify.run.messages import (
    CheckStarted,
    Discover,
    Discovering,
    Planned,
    Ready,
    RunTask,
    TaskResult,
)
from gradverify.run.output import TASK_MARK, Output
from gradverify.run.processes import Process
from gradverify.run.tasks import Task, TaskOutcome
from gradverify.syspath import add_user_path
from gradverify.targets import load
from gradverify.torchstate import import_torch


def worker_main(conn: Connection, threads: int, compiler_cache: str = "") -> None:
    """The worker loop: answer the parent's messages until it closes its end.
    ``compiler_cache``: the run's folder for torch's compiler cache (``run/caches.py``;
    empty: the user's)."""
    caches.use(compiler_cache)
    leftovers.adopt_orphans()
    torch = import_torch()

    if threads:
        torch.set_num_threads(threads)
    torchstate.warm_up()  # torch's first-backward imports: not in the first case's time
    torchstate.baseline()  # before any user module is imported
    importlib.import_module("gradverify.run.execute")  # what a case runs (imported once here)
    # Only now, with gradverify's own modules imported: the user's folder is for their imports.
    syspath.ensure_cwd_on_path()
    load.USER_INTERRUPTS = True  # this process has its own session: no terminal Ctrl-C
    cache: dict[int, Any] = {}
    mark = _marker()
    conn.send(Ready(str(torch.__version__)))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the parent closed its end, or died: nothing more to do
            return
        if isinstance(message, Discover):
            _discover(conn, message.plan)
        elif isinstance(message, RunTask):
            mark()
            outcome = _run(conn, message, cache)
            mark()
            unusable = device_unusable(torch)
            conn.send(TaskResult(outcome, unusable))
            if unusable:
                return


def _marker() -> Callable[[], None]:
    """Writes ``TASK_MARK`` into this process's output, after what Python and C still buffer:
    the parent then quotes a crashed task's own output (``run.output``)."""
    fflush: Callable[[Any], int] | None = None
    try:
        import ctypes

        fflush = ctypes.CDLL(None).fflush
    except (OSError, AttributeError, TypeError):  # no C library to ask
        pass

    def mark() -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (AttributeError, OSError, ValueError):  # replaced or closed by user code
                pass
        if fflush is not None:
            fflush(None)
        try:
            os.write(1, TASK_MARK)
        except OSError:
            pass

    return mark


def _discover(conn: Connection, plan: Plan) -> None:
    """Discover the plan's deferred targets, saying each target before importing it with what
    the ones before it found: if the import ends or hangs this process, the parent knows
    which target did."""
    sent = [0, 0, 0]  # jobs, errors, notes already sent

    def discovering(target: str, found: Plan) -> None:
        jobs, errors, notes = sent
        sent[:] = [len(found.jobs), len(found.errors), len(found.notes)]
        conn.send(Discovering(target, tuple(found.jobs[jobs:]), tuple(found.errors[errors:]),
                              tuple(found.notes[notes:])))

    discovering("", resolve_deferred(plan, on_target=discovering))  # the last target's findings
    conn.send(Planned())


def _run(conn: Connection, message: RunTask, cache: dict[int, Any]) -> TaskOutcome:
    """One case's outcome, saying each check as it starts."""
    for folder in message.options.user_paths:
        add_user_path(folder)
    try:
        return execute(message.task, message.options, cache,
                       on_check=lambda name: conn.send(CheckStarted(name)),
                       on_kept=lambda phase, kept: conn.send(CheckStarted(phase, kept)))
    except BaseException as exc:  # noqa: BLE001 -- a bug of ours: report, keep serving
        return None, [_internal(message.task, exc)]


def device_unusable(torch: Any) -> str | None:
    """Why this process's CUDA context can serve no more work, or None: after a device-side
    assert every CUDA call raises again, so every later case would fail for it."""
    if not torch.cuda.is_initialized():
        return None
    try:
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 -- the sticky error itself
        lines = str(exc).strip().splitlines()
        return f"{type(exc).__name__}: {lines[0] if lines else ''}"
    return None


def _internal(task: Task, exc: BaseException) -> ErrorEntry:
    import traceback

    return ErrorEntry(task.job.target, task.job.spec.path if task.job.spec else None, "GV011",
                      "".join(traceback.format_exception(exc)), internal=True)


def spawn(threads: int, cache: str | None = None) -> tuple[Process, Connection, Output]:
    """Start a worker: its process, the parent's end of its socket, and its output (a pipe
    drained into a bounded ``Output``). It runs in its own session: the terminal's Ctrl-C
    reaches the parent alone (which stops the workers), and everything a worker starts can be
    killed with its process group."""
    mine, theirs = socket.socketpair()
    output, (read, write) = Output(), os.pipe()
    try:
        process = processes.start("gradverify.run.worker", str(theirs.fileno()), str(threads),
                                  cache or "", stdin=subprocess.DEVNULL, stdout=write,
                                  stderr=subprocess.STDOUT, pass_fds=(theirs.fileno(),))
    finally:
        os.close(write)
        theirs.close()
    output.read_from(read)
    return process, Connection(mine.detach()), output


if __name__ == "__main__":
    worker_main(Connection(int(sys.argv[1])), int(sys.argv[2]), *sys.argv[3:4])
