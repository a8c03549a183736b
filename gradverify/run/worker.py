"""A worker process (``gradverify.run.worker FD LOG THREADS``, started with
``syspath.own_module_command``): imports targets and runs one case at a time for the parent's
``gradverify.run.pool.Pool``, sending back frozen results over its socket. Its output goes to the
log file; it runs in a session of its own, and inherits what its descendants orphan."""
from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from gradverify.results import ErrorEntry
from gradverify.run import leftovers
from gradverify.run.tasks import Task


def worker_main(conn: Connection, log_path: str, threads: int) -> None:
    """The worker loop: receive tasks, send results, until told to stop."""
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    leftovers.adopt_orphans()
    from gradverify.torchstate import import_torch

    torch = import_torch()

    if threads:
        torch.set_num_threads(threads)
    from gradverify import torchstate

    torchstate.baseline()  # before any user module is imported
    from gradverify import syspath
    from gradverify.discover import resolve_deferred
    from gradverify.run.execute import execute
    from gradverify.targets import load

    # Only now, with gradverify's own modules imported: the user's folder is for their imports.
    syspath.ensure_cwd_on_path()
    load.USER_INTERRUPTS = True  # this process has its own session: no terminal Ctrl-C
    cache: dict[int, Any] = {}
    conn.send(("ready", str(torch.__version__)))  # plain str: unpickling must not import torch
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        kind = message[0]
        if kind == "stop":
            return
        if kind == "discover":
            sent = [0, 0, 0]  # jobs, errors, notes already sent

            def discovering(target: str, found: Any, sent: list[int] = sent) -> None:
                news = (found.jobs[sent[0]:], found.errors[sent[1]:], found.notes[sent[2]:])
                sent[:] = [len(found.jobs), len(found.errors), len(found.notes)]
                conn.send(("discovering", target, *news))

            plan = resolve_deferred(message[1], on_target=discovering)
            discovering("", plan)  # the last target's findings
            conn.send(("plan",))
        elif kind == "task":
            task, options = message[1], message[2]
            try:
                outcome = execute(task, options, cache,
                                  on_check=lambda name: conn.send(("check", name)))
            except BaseException as exc:  # noqa: BLE001 -- a bug of ours: report, keep serving
                outcome = (None, [_internal(task, exc)])
            conn.send(("result", outcome))


def _internal(task: Task, exc: BaseException) -> ErrorEntry:
    import traceback

    return ErrorEntry(task.job.target, task.job.spec.path if task.job.spec else None, "GV011",
                      "".join(traceback.format_exception(exc)), internal=True)


def die_with_parent() -> Callable[[], None] | None:
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


def log_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def log_tail(log: Path, offset: int = 0, lines: int = 5) -> str:
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
