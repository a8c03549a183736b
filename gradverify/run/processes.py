"""How gradverify starts its own modules as processes: the case workers (``run/worker.py``),
``init``'s probes (``init/child.py``) and ``record``'s shrinker (``recording/shrink.py``).

``start`` runs one as ``python -m`` would (``syspath.own_module_command``), a fresh Python in a
session of its own, without core dumps, and killed when its parent dies (``child_setup``);
``kill_group`` ends that session. Every process id used here is one that ``start`` made: none
is read from anywhere else. Never imports torch.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import IO, Protocol

from gradverify import syspath

Stdio = int | None
"""What ``start`` takes for a standard stream, as ``subprocess.Popen`` does: None (inherited),
``subprocess.PIPE``, ``subprocess.DEVNULL``, ``subprocess.STDOUT`` (stderr only) or a file
descriptor."""


class Process(Protocol):
    """What gradverify uses of a process it started: ``subprocess.Popen``'s part of it."""

    @property
    def pid(self) -> int: ...
    @property
    def returncode(self) -> int | None: ...
    @property
    def stdin(self) -> IO[bytes] | None: ...
    @property
    def stdout(self) -> IO[bytes] | None: ...
    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def send_signal(self, sig: int) -> None: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...


def start(module: str, *args: str, stdin: Stdio = None, stdout: Stdio = None,
          stderr: Stdio = None, pass_fds: Sequence[int] = ()) -> Process:
    """Start gradverify's ``module`` as ``__main__`` with ``args``, its standard streams and
    the descriptors ``pass_fds`` (under the same numbers) as ``subprocess.Popen`` takes them."""
    return subprocess.Popen(syspath.own_module_command(module, *args), stdin=stdin,
                            stdout=stdout, stderr=stderr, pass_fds=tuple(pass_fds),
                            preexec_fn=child_setup(), start_new_session=True)


def child_setup() -> Callable[[], None] | None:
    """What a child runs between fork and exec, before it becomes the module. Its core-dump
    limit is 0: a Function that segfaults must not write a core file (hundreds of MB, named
    ``core``, over the user's own) into the project. On Linux
    the kernel also kills it when its parent dies for any reason, SIGKILL included
    (``prctl(PR_SET_PDEATHSIG)``): no path leaves an orphan. Everything is loaded here, in the
    parent, because the child between fork and exec must not import or take locks (a
    progress-bar thread may hold them). None where there is nothing to do."""
    try:
        import resource

        no_core = (resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
        setrlimit: Callable[..., None] | None = resource.setrlimit
    except (ImportError, AttributeError, ValueError, OSError):
        setrlimit = None
    prctl = None
    if sys.platform.startswith("linux"):
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    pr_set_pdeathsig, sigkill = 1, int(signal.SIGKILL)

    def setup() -> None:
        if setrlimit is not None:
            setrlimit(*no_core)
        if prctl is not None:
            prctl(pr_set_pdeathsig, sigkill)

    return setup if setrlimit is not None or prctl is not None else None


def kill_group(process: Process) -> None:
    """SIGKILL the session ``start`` made for ``process`` (its process group, whose id is its
    pid: what it started goes with it), or the process alone where that group is gone. A pid
    of 1 or less is never signalled at all (``kill(0)`` is our own group, ``kill(-1)`` every
    process we may signal), nor a process already reaped: its pid, and so a group of that id,
    may be another process's by now (``exited`` kills a group before it reaps)."""
    pid = process.pid
    if pid <= 1 or process.returncode is not None:
        return
    try:
        os.killpg(pid, signal.SIGKILL)
        return
    except OSError:
        pass
    try:
        process.kill()
    except OSError:
        pass


def exited(process: Process) -> bool:
    """Whether ``process`` has ended. One that has is reaped here, its process group SIGKILLed
    first, while its unreaped exit still holds its pid for us, so that no other process can
    have that id yet: what it started dies with it. (Where the exit cannot be looked at
    without reaping it, it is only reaped.)"""
    if process.returncode is not None:
        return True
    waitid = getattr(os, "waitid", None)
    try:
        if waitid is None:
            raise ChildProcessError
        ended = waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # not our child (or no waitid): poll it as it is
        return process.poll() is not None
    if ended is None:
        return False
    if process.pid > 1:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except OSError:
            pass
    process.poll()
    return True
