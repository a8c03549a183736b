"""What a child of the test suite's warm interpreter (``warm_server.py``) does between its fork
and its module: become what ``python -c BOOT MODULE ARGS`` started by the asker would have been.

In order: drop the interpreter's own descriptors (detached from their objects, so that no
finalizer closes a number reused since); put the asker's descriptors under their numbers; take
what a child inherits (limits, umask, nice value, CPUs, ignored and blocked signals), its own
session, no core dumps, death with the interpreter; the asker's working directory, environment,
``sys.path`` and ``sys.argv``; the C library's time zone; standard streams made as Python
makes them at startup; torch's and NumPy's default generators seeded afresh (Python's
``random`` reseeds itself after a fork); every other descriptor closed. Then it tells
the interpreter it is set (a failure so far is a decline: the asker starts a fresh Python), and
waits for the asker's go (an asker that gave up meanwhile never gets a second process). The
module then runs as ``__main__`` and the child ends as Python ends: ``SystemExit`` and
``KeyboardInterrupt`` leave through the interpreter's own exit, with its finalization; another
uncaught exception goes to ``sys.excepthook`` and exits 1.
"""
from __future__ import annotations

import contextlib
import fcntl
import io
import os
import resource
import runpy
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from gradverify.run.processes import child_setup


def become(request: dict[str, Any], fds: list[int], own: Callable[[], None], ready: int,
           env: dict[str, str], path: list[str]) -> None:
    """Set up as the request says, say so on ``ready``, wait for the go (the last of ``fds``),
    run the module; never returns (``SystemExit``, or ``os._exit`` before the go)."""
    try:
        zygote = os.getppid()
        own()
        go, ready = _place(fds[:-1], request["fds"], [fds[-1], ready])
        fds.clear()  # moved: the interpreter's frames this child leaves through must not close them
        _close_others([*request["fds"], go, ready])
        _inherit(request["inherited"])
        os.setsid()
        setup = child_setup()
        if setup is not None:
            setup()
        if os.getppid() != zygote:  # the interpreter died before PR_SET_PDEATHSIG was set
            os._exit(70)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(env)
        time.tzset()  # the C library's time zone, from TZ
        tempfile.tempdir = None  # read from TMPDIR again, when first asked for
        sys.path[:] = path
        sys.argv = ["-c", *request["args"]]
        sys.modules.pop(request["module"], None)
        _fresh_streams()
        torch, numpy = sys.modules.get("torch"), sys.modules.get("numpy")
        if torch is not None:  # each fresh Python's generators start from a random seed
            torch.seed()
        if numpy is not None:
            numpy.random.seed()
        os.write(ready, b"set")
        os.close(ready)
        if os.read(go, 1) != b"g":  # the asker gave up: it starts a fresh Python instead
            os._exit(0)
        os.close(go)
    except BaseException:  # noqa: BLE001  (before the go: a decline, never the module's end)
        os._exit(70)
    _run(request["module"])


def _place(fds: list[int], numbers: list[int], keep: list[int]) -> list[int]:
    """Put each received descriptor under its number in the asker (0, 1, 2, then
    ``pass_fds``), inheritable, and close the received copies; the descriptors to ``keep``
    moved above them all (close-on-exec, as Python's own are), under their new numbers."""
    above = max([*fds, *numbers, *keep]) + 1
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, above) for fd in [*fds, *keep]]
    for fd in [*fds, *keep]:
        os.close(fd)
    for fd, number in zip(moved, numbers):
        os.dup2(fd, number, inheritable=True)
    for fd in moved[:len(fds)]:
        os.close(fd)
    return moved[len(fds):]


def _inherit(inherited: dict[str, Any]) -> None:
    """Take what the asker's children inherit (``warm_client.inherited``)."""
    for name, limit in inherited["limits"].items():
        resource.setrlimit(getattr(resource, name), tuple(limit))
    os.umask(inherited["umask"])
    os.setpriority(os.PRIO_PROCESS, 0, inherited["nice"])
    os.sched_setaffinity(0, inherited["cpus"])
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGPIPE, signal.SIGXFSZ):
            continue
        default = signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
        try:
            signal.signal(sig, signal.SIG_IGN if int(sig) in inherited["ignored"] else default)
        except (OSError, ValueError):
            pass
    signal.pthread_sigmask(signal.SIG_SETMASK, inherited["blocked"])


def _fresh_streams() -> None:
    """``sys.stdin``, ``sys.stdout`` and ``sys.stderr`` made anew on descriptors 0, 1 and 2,
    as Python makes them at startup (the interpreter's were made on its own, /dev/null)."""
    for number, name in enumerate(("stdin", "stdout", "stderr")):
        old = getattr(sys, name)
        if old is None:
            continue
        write = number > 0
        unbuffered = write and bool(getattr(old, "write_through", False))  # PYTHONUNBUFFERED
        buffer = open(number, "wb" if write else "rb",  # noqa: SIM115  (for the process's life)
                      buffering=0 if unbuffered else -1, closefd=False)
        raw = buffer if unbuffered else buffer.raw  # type: ignore[attr-defined]
        stream = io.TextIOWrapper(buffer, encoding=old.encoding, errors=old.errors,
                                  newline="\n", write_through=unbuffered,
                                  line_buffering=not unbuffered and (raw.isatty() or number == 2))
        stream.mode = "w" if write else "r"  # type: ignore[misc]
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _run(module: str) -> None:
    """Run ``module`` as ``__main__``; end as Python ends: ``SystemExit`` and
    ``KeyboardInterrupt`` leave to the interpreter's own exit (an uncaught Ctrl-C ends it by
    SIGINT, after its finalization), anything else goes to ``sys.excepthook``, status 1."""
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException:  # noqa: BLE001  (as the interpreter: the hook, then status 1)
        try:
            sys.excepthook(*sys.exc_info())  # its first frame is this one, not BOOT's
        except BaseException:  # noqa: BLE001  (a hook that raises: nothing more to say)
            pass
        raise SystemExit(1) from None
    raise SystemExit(0)


def _close_others(kept: list[int]) -> None:
    """Close every descriptor but ``kept``: none of the interpreter's may reach the module."""
    for name in os.listdir("/proc/self/fd"):
        if int(name) not in kept:
            with contextlib.suppress(OSError):
                os.close(int(name))
