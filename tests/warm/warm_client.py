"""The asking side of the test suite's warm interpreter (``warm_server.py``): installed over
``gradverify.run.processes.start`` (``install``), it asks the interpreter named in
``GRADVERIFY_TESTS_WARM`` to fork gradverify's process, and starts a fresh Python as the package
does where none is named or it declines. A ``Forked`` handle stands in for ``subprocess.Popen``.

Test-only: the package always starts fresh Pythons and trusts no process id it did not make.
Here the interpreter is the suite's own (``conftest.py`` starts it, on a socket in a folder
only this user can enter), so its answers are trusted. docs/contributing.md says why it exists
and what a forked process still cannot make the same.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from typing import IO, Any

from gradverify import syspath
from gradverify.run import processes
from gradverify.run.processes import Process, Stdio

VARIABLE = "GRADVERIFY_TESTS_WARM"
"""The environment variable that names the warm interpreter's socket (``conftest.py``)."""
ANSWER_TIMEOUT = 30.0
"""Seconds the warm interpreter may take to answer a request before a fresh Python starts."""

_fresh = processes.start


def install() -> None:
    """Start gradverify's processes through ``start`` in this process from now on."""
    processes.start = start


def start(module: str, *args: str, stdin: Stdio = None, stdout: Stdio = None,
          stderr: Stdio = None, pass_fds: Sequence[int] = ()) -> Process:
    """``processes.start``, forked from the warm interpreter where one is named and takes it."""
    forked = _forked(module, args, (stdin, stdout, stderr), pass_fds)
    if forked is not None:
        return forked
    return _fresh(module, *args, stdin=stdin, stdout=stdout, stderr=stderr, pass_fds=pass_fds)


class Forked:
    """A process that the warm interpreter forked for this one. Its exit status comes over the
    connection that asked for it. Closing that connection (this process dying, or this handle
    dropped unwaited) kills it, as ``PR_SET_PDEATHSIG`` kills a child of ours when we die."""

    def __init__(self, conn: socket.socket, pid: int, module: str,
                 pipes: tuple[IO[bytes] | None, IO[bytes] | None]) -> None:
        self._conn, self._read, self.pid, self.args = conn, b"", pid, [module]
        self.stdin, self.stdout = pipes
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.returncode if self.returncode is not None else self._ended(0.0)

    def wait(self, timeout: float | None = None) -> int:
        code = self.returncode if self.returncode is not None else self._ended(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _ended(self, timeout: float | None) -> int | None:
        """The exit status, once the warm interpreter has sent all of ``exit N``, waiting up
        to ``timeout`` seconds for more of it (None: until then)."""
        self._conn.settimeout(None if timeout is None else max(0.0, timeout))
        while not self._read.endswith(b"\n"):
            try:
                more = self._conn.recv(64)
            except (TimeoutError, BlockingIOError):
                return None
            except OSError:
                more = b""
            if not more:
                break
            self._read += more
        words = self._read.split()
        # no status: the warm interpreter died, and its children with it (PR_SET_PDEATHSIG)
        ok = len(words) == 2 and words[0] == b"exit"
        self.returncode = int(words[1]) if ok else -int(signal.SIGKILL)
        self._conn.close()
        return self.returncode


def _answer(conn: socket.socket) -> list[bytes]:
    """The warm interpreter's answer to a request (``forked PID`` or ``declined WHY``), as
    words; none if it did not answer in time or closed the connection."""
    conn.settimeout(ANSWER_TIMEOUT)
    line = b""
    while not line.endswith(b"\n"):
        more = conn.recv(1)  # one byte at a time: what follows the line is the exit status
        if not more:
            return []
        line += more
    return line.split()


def _forked(module: str, args: Sequence[str], stdio: tuple[Stdio, Stdio, Stdio],
            pass_fds: Sequence[int]) -> Forked | None:
    """The process forked by the warm interpreter that the environment names, or None (none
    named, unreachable, or it declined: a fresh Python starts instead). It runs its module
    only once this side has its answer and says go: a request it gave up on never runs."""
    address = os.environ.get(VARIABLE)
    if not address or not sys.platform.startswith("linux"):
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    child, opened, pipes = _child_ends(stdio)
    go_read, go = os.pipe()
    opened.append(go_read)
    try:
        conn.settimeout(ANSWER_TIMEOUT)
        conn.connect(address)
        request = json.dumps({"module": module, "args": list(args), "cwd": os.getcwd(),
                              "env": _environment(), "executable": sys.executable,
                              "prefix": sys.prefix, "origin": os.path.dirname(syspath.__file__),
                              "inherited": inherited(),
                              "fds": [0, 1, 2, *pass_fds]}).encode()
        socket.send_fds(conn, [len(request).to_bytes(4, "big") + request],
                        [*child, *pass_fds, go_read])
        words = _answer(conn)
    except OSError:
        words = []
    finally:
        for fd in opened:
            os.close(fd)
    if len(words) == 2 and words[0] == b"forked":
        with contextlib.suppress(OSError):  # it died since: its handle reads how
            os.write(go, b"g")
        os.close(go)
        return Forked(conn, int(words[1]), module, (pipes[0], pipes[1]))
    os.close(go)  # a child set up meanwhile reads the end of the pipe: it never runs
    conn.close()
    for pipe in pipes:
        if pipe is not None:
            pipe.close()
    return None


def _environment() -> dict[str, str]:
    """The environment a child of this process gets: the C library's, which is
    ``os.environ`` plus what C code set (readline sets ``COLUMNS`` and ``LINES``)."""
    try:
        import ctypes

        entries = ctypes.POINTER(ctypes.c_char_p).in_dll(ctypes.CDLL(None), "environ")
    except (OSError, ValueError, AttributeError):
        return dict(os.environ)
    found: dict[str, str] = {}
    index = 0
    while entries[index] is not None:
        key, _, value = os.fsdecode(entries[index]).partition("=")
        found.setdefault(key, value)
        index += 1
    return found


def inherited() -> dict[str, Any]:
    """What a child inherits from this process besides its descriptors, environment and
    working directory (``fork`` and ``exec`` keep them): resource limits, the file-mode mask,
    the nice value, the CPUs it may run on, the signals ignored (but SIGPIPE and SIGXFSZ,
    which ``subprocess`` resets and Python ignores) and those blocked."""
    import resource

    limits = {name: resource.getrlimit(getattr(resource, name))
              for name in dir(resource) if name.startswith("RLIMIT_")}
    umask = None
    with contextlib.suppress(OSError), open("/proc/self/status") as status:
        umask = next((int(line.split()[1], 8) for line in status
                      if line.startswith("Umask:")), None)
    reset = {signal.SIGPIPE, signal.SIGXFSZ, signal.SIGKILL, signal.SIGSTOP}
    ignored = [int(sig) for sig in signal.valid_signals()
               if sig not in reset and signal.getsignal(sig) is signal.SIG_IGN]
    return {"limits": limits, "umask": umask, "nice": os.getpriority(os.PRIO_PROCESS, 0),
            "cpus": sorted(os.sched_getaffinity(0)), "ignored": ignored,
            "blocked": sorted(int(sig) for sig in signal.pthread_sigmask(signal.SIG_BLOCK, []))}


def _child_ends(stdio: tuple[Stdio, Stdio, Stdio]
                ) -> tuple[list[int], list[int], list[IO[bytes] | None]]:
    """For standard streams given as ``subprocess.Popen`` takes them: the child's descriptors
    (0, 1, 2), those opened for it here (closed once sent), and this side's pipe ends."""
    child: list[int] = []
    opened: list[int] = []
    pipes: list[IO[bytes] | None] = [None, None, None]
    for number, how in enumerate(stdio):
        if how is None:
            child.append(number)
        elif how == subprocess.STDOUT and number == 2:
            child.append(child[1])
        elif how == subprocess.DEVNULL:
            opened.append(os.open(os.devnull, os.O_RDWR))
            child.append(opened[-1])
        elif how == subprocess.PIPE and number < 2:
            read, write = os.pipe()
            theirs, mine = (read, write) if number == 0 else (write, read)
            opened.append(theirs)
            child.append(theirs)
            pipes[number] = open(mine, "wb" if number == 0 else "rb")  # noqa: SIM115
        elif how >= 0:
            child.append(how)
        else:
            raise ValueError(f"standard stream {number}: {how!r} is not supported")
    return child, opened, pipes
