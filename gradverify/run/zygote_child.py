"""What a child of the warm interpreter (``run/zygote.py``) does between its fork and its
module: become what ``python -c BOOT MODULE ARGS`` started by the asker would have been.

In order: drop the interpreter's own descriptors (detached from their objects, so that no
finalizer closes a number reused since); put the asker's descriptors under their numbers; take
what a child inherits (limits, umask, nice value, CPUs, ignored and blocked signals), its own
session, no core dumps, death with the interpreter; the asker's working directory, environment,
``sys.path`` and ``sys.argv``; standard streams made as Python makes them at startup; NumPy's
global generator seeded afresh (Python's ``random`` reseeds itself after a fork). Then it tells
the interpreter it is set (a failure so far is a decline: the asker starts a fresh Python), and
waits for the asker's go (an asker that gave up meanwhile never gets a second process). The
module then runs as ``__main__`` and the child ends as Python ends: ``SystemExit`` leaves
through the interpreter's own exit, with its finalization; an uncaught exception goes to
``sys.excepthook`` and exits 1.
"""
from __future__ import annotations

import atexit
import fcntl
import io
import os
import resource
import runpy
import signal
import site
import sys
import tempfile
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
        tempfile.tempdir = None  # read from TMPDIR again, when first asked for
        sys.path[:] = path
        sys.argv = ["-c", *request["args"]]
        sys.modules.pop(request["module"], None)
        _fresh_streams()
        numpy = sys.modules.get("numpy")
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
    """Take what the asker's children inherit (``processes.inherited``)."""
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
    site.USER_BASE = site.USER_SITE = None  # from HOME again (the same, or it was declined)


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
    """Run ``module`` as ``__main__``; end as Python ends."""
    interrupted: list[bool] = []
    # registered first, so run last: after the module's own exit functions
    atexit.register(lambda: _die_by_sigint() if interrupted else None)
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        _report(*sys.exc_info())
        interrupted.append(True)
        raise SystemExit(130) from None
    except BaseException:  # noqa: BLE001  (as the interpreter: the hook, then status 1)
        _report(*sys.exc_info())
        raise SystemExit(1) from None
    raise SystemExit(0)


def _report(kind: Any, value: Any, traceback: Any) -> None:
    """An uncaught exception, through ``sys.excepthook``, as Python reports it (its first
    frame is this module's, where a fresh Python's is ``BOOT``'s)."""
    sys.excepthook(kind, value, traceback)


def _die_by_sigint() -> None:
    """How Python ends after an uncaught Ctrl-C: killed by SIGINT, as a shell expects."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
    os.kill(os.getpid(), signal.SIGINT)
