"""What a case leaves running: threads of this process and processes descended from it.

Read from ``threading`` and, on Linux, from ``/proc`` (elsewhere only threads are seen). Never
imports torch.

torch's own machinery is torch's, not the case's: the compiler's worker processes (and what
they start) and its reader threads outlive the first ``torch.compile`` on purpose, on every
torch version, so threads whose code and processes whose command line lie in torch's own
folder are never counted.
"""
from __future__ import annotations

import itertools
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gradverify import frames


@dataclass(frozen=True)
class Running:
    threads: frozenset[int]
    processes: frozenset[int]


def adopt_orphans() -> None:
    """Make this process the one that inherits what its descendants orphan (Linux
    ``prctl(PR_SET_CHILD_SUBREAPER)``): a daemon a Function starts (a double fork, ``setsid``)
    stays below this process (a worker, or the command itself), where the end of the case finds
    and stops it, instead of going to init and outliving the run. Elsewhere, nothing."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_child_subreaper = 36
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_child_subreaper, 1)


def stats() -> Iterator[tuple[int, list[str]]]:
    """Each process in /proc (none where there is no /proc) with the fields of its ``stat``
    after its name: state, parent, process group, session, ..."""
    proc = Path("/proc")
    if not proc.is_dir():
        return
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses
        yield int(entry.name), stat.rpartition(")")[2].split()


def descendants(pid: int) -> set[int]:
    """Every process below ``pid``, from the parent ids in /proc (empty where there is none)."""
    parents: dict[int, list[int]] = {}
    for child, fields in stats():
        if len(fields) > 1 and fields[0] != "Z":
            parents.setdefault(int(fields[1]), []).append(child)
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _torch_dir() -> str | None:
    """torch's folder, once torch is imported (before that, torch started nothing)."""
    torch = sys.modules.get("torch")
    file = getattr(torch, "__file__", None)
    return os.path.join(os.path.dirname(os.path.realpath(file)), "") if file else None


def _torch_thread(thread: threading.Thread, torch_dir: str | None) -> bool:
    """A thread running code from torch's folder (its target, or a Thread subclass's run)."""
    if torch_dir is None:
        return False
    target: Any = getattr(thread, "_target", None) or type(thread).run
    code = getattr(getattr(target, "__func__", target), "__code__", None)
    return code is not None and frames.owner(code) is frames.Owner.TORCH


def _torch_processes(pids: set[int], torch_dir: str | None) -> set[int]:
    """The processes among ``pids`` that torch started: a command line naming a file in
    torch's folder or a ``-m torch.`` module, and every process below such a one."""
    if torch_dir is None or not pids:
        return set()
    owned: set[int] = set()
    for pid in pids:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if any(os.path.realpath(a).startswith(torch_dir) for a in argv if os.sep in a) or \
                any(a == "-m" and b.startswith("torch.") for a, b in itertools.pairwise(argv)):
            owned.add(pid)
    return owned | {d for pid in owned for d in descendants(pid)}


def snapshot() -> Running:
    return Running(frozenset(t.ident for t in threading.enumerate() if t.ident is not None),
                   frozenset(descendants(os.getpid())))


GRACE_S = 0.5
"""How long threads a case started may take to finish after it, before they count as left."""


def since(before: Running) -> tuple[list[str], list[int]]:
    """Threads (by name) and processes (by pid) started since ``before`` and still running
    (threads given ``GRACE_S`` to finish: work handed off a moment before the case ended)."""
    torch_dir = _torch_dir()
    new_threads = [t for t in threading.enumerate()
                   if t.ident is not None and t.ident not in before.threads
                   and not _torch_thread(t, torch_dir)]
    deadline = time.monotonic() + GRACE_S
    for thread in new_threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [t.name for t in new_threads if t.is_alive()], _new_processes(before, torch_dir)


def _new_processes(before: Running, torch_dir: str | None) -> list[int]:
    """Processes started since ``before`` that are not torch's. A process forked a moment ago
    may not have run ``exec`` yet (on a loaded machine that takes a while): its command line is
    still this process's, so it cannot be told apart. Such processes get ``GRACE_S`` to become
    what they will be (torch's compile workers, say) or to end."""
    deadline = time.monotonic() + GRACE_S
    while True:
        new = set(snapshot().processes - before.processes)
        left = new - _torch_processes(new, torch_dir)
        if not any(_not_yet_exec(pid) for pid in left) or time.monotonic() > deadline:
            return sorted(left)
        time.sleep(0.02)


def _cmdline(pid: int) -> bytes | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None


def _not_yet_exec(pid: int) -> bool:
    """A child forked from this process that still runs this process's program, or one whose
    command line cannot be read yet (empty while ``exec`` replaces it)."""
    own, theirs = _cmdline(os.getpid()), _cmdline(pid)
    return own is not None and theirs is not None and theirs in (own, b"")


def kill(pids: list[int]) -> None:
    """Kill the processes, and reap those that are this process's children (adopted ones
    included), so that none is left a zombie; waits at most a second."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    pending, deadline = list(pids), time.monotonic() + 1.0
    while pending and time.monotonic() < deadline:
        for pid in list(pending):
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    pending.remove(pid)
            except OSError:  # not a child of this process: its parent reaps it
                pending.remove(pid)
        if pending:
            time.sleep(0.01)


def describe(threads: list[str], processes: list[int]) -> str:
    parts = []
    if processes:
        parts.append(f"{len(processes)} process(es) (pid {', '.join(map(str, processes[:5]))}"
                     f"{', ...' if len(processes) > 5 else ''})")
    if threads:
        parts.append(f"{len(threads)} thread(s) ({', '.join(threads[:5])}"
                     f"{', ...' if len(threads) > 5 else ''})")
    return " and ".join(parts)
