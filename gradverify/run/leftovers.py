"""What a case leaves running: threads of this process and processes descended from it.

Read from ``threading`` and, on Linux, from ``/proc`` (elsewhere only threads are seen). Never
imports torch.
"""
from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Running:
    threads: frozenset[int]
    processes: frozenset[int]


def _descendants(pid: int) -> set[int]:
    """Every process below ``pid``, from the parent ids in /proc (empty where there is none)."""
    parents: dict[int, list[int]] = {}
    proc = Path("/proc")
    if not proc.is_dir():
        return set()
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses
        fields = stat.rpartition(")")[2].split()
        if len(fields) > 1 and fields[0] != "Z":
            parents.setdefault(int(fields[1]), []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def snapshot() -> Running:
    return Running(frozenset(t.ident for t in threading.enumerate() if t.ident is not None),
                   frozenset(_descendants(os.getpid())))


def since(before: Running) -> tuple[list[str], list[int]]:
    """Threads (by name) and processes (by pid) started since ``before`` and still running."""
    now = snapshot()
    threads = [t.name for t in threading.enumerate()
               if t.ident is not None and t.ident not in before.threads and t.is_alive()]
    return threads, sorted(now.processes - before.processes)


def kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    for pid in pids:  # reap our own children, so that none is left a zombie
        try:
            os.waitpid(pid, os.WNOHANG)
        except OSError:
            pass


def describe(threads: list[str], processes: list[int]) -> str:
    parts = []
    if processes:
        parts.append(f"{len(processes)} process(es) (pid {', '.join(map(str, processes[:5]))}"
                     f"{', ...' if len(processes) > 5 else ''})")
    if threads:
        parts.append(f"{len(threads)} thread(s) ({', '.join(threads[:5])}"
                     f"{', ...' if len(threads) > 5 else ''})")
    return " and ".join(parts)
