"""The process around a command: signals that stop a run, where user code's output goes,
the progress bar, colour, and the console itself. Used by ``cli``; no logic of gradverify's own.

The console is the least reliable sink (docs/runs.md, Reliability): stdout may be closed, full, a
pipe whose reader left, or unable to encode a name. Nothing written to it may cost a report file or
the exit code, so every console write goes through ``out`` and ``err``, which never raise.
"""
from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
from collections.abc import Callable, Iterator
from typing import IO, Any

from gradverify.errors import Interrupted
from gradverify.targets import load

_LOST: list[str] = []
"""Why stdout could not be written (the first failure), said once on stderr at the end."""


@contextlib.contextmanager
def terminations_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP (CI cancelling a job, `timeout`, a closed terminal) stop a run as
    Ctrl-C does: the workers are stopped and the report files are written."""
    def interrupt(signum: int, frame: Any) -> None:
        raise Interrupted(signum)

    # SIGINT too: a real Ctrl-C is then told apart from a KeyboardInterrupt raised by a module
    # being imported (an import failure of that target).
    wanted = [signal.SIGINT, signal.SIGTERM] + \
        ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])
    previous = {signum: signal.signal(signum, interrupt) for signum in wanted}
    load.USER_INTERRUPTS = True
    try:
        yield
    finally:
        load.USER_INTERRUPTS = False
        for signum, handler in previous.items():
            signal.signal(signum, handler)



@contextlib.contextmanager
def progress(enabled: bool) -> Iterator[Callable[[int, int, str], None] | None]:
    """A transient progress bar on a terminal; nothing in CI or when output is piped."""
    if not enabled or os.environ.get("CI"):
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(TextColumn("[bold]checking"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.description}"), transient=True) as bar:
        task = bar.add_task("", total=None)

        def update(done: int, total: int, label: str) -> None:
            bar.update(task, completed=done, total=total,
                       description=label or bar.tasks[0].description)

        yield update


def progress_lines() -> Callable[[str, bool], None]:
    """Progress as lines on stderr: a step's line when it is done; on a terminal, also the step
    under way, replaced by its line once done. The first line is preceded by a blank one (what
    came before was the user's script)."""
    live = sys.stderr is not None and sys.stderr.isatty() and not os.environ.get("CI")
    started: list[bool] = []

    def say(text: str, done: bool) -> None:
        if not started:
            started.append(True)
            err("")
        if not done:
            if live:
                with contextlib.suppress(OSError, ValueError):
                    sys.stderr.write(text)
                    sys.stderr.flush()
            return
        if live:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.write("\r\033[K")
        err(text)

    return say


def color(no_color: bool) -> bool:
    if no_color or os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return sys.stdout is not None and sys.stdout.isatty()
    except (OSError, ValueError):  # closed
        return False


def standard_streams() -> None:
    """Make the standard streams safe before a command runs: descriptors 0-2 that the caller
    closed are opened on the null device (a socket or file opened later would otherwise take
    their number, and a worker process pointing its output at 1 and 2 would write over it),
    and what stdout and stderr cannot encode is escaped (``\\u0394``) instead of raising."""
    _LOST.clear()
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, OSError, ValueError):
            stream.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]


def out(text: str) -> None:
    """Write ``text`` to stdout and flush it. A stdout that is closed, full or gone is
    remembered (``lost_console``) and written no more; never an error."""
    if _LOST:
        return
    if sys.stdout is None:
        _LOST.append("it is closed")
        return
    failure = _write(sys.stdout, text)
    if failure is not None:
        _LOST.append(failure)


def err(text: str) -> None:
    """Write a line to stderr, if there is one that can be written."""
    if sys.stderr is not None:
        _write(sys.stderr, text if text.endswith("\n") else text + "\n")


def _write(stream: IO[str], text: str) -> str | None:
    """Write and flush; None, or why the stream cannot be written (it is then pointed at the
    null device, so that Python's own flush at exit neither fails nor changes the exit code)."""
    try:
        try:
            stream.write(text)
        except UnicodeEncodeError:  # a stream that was not reconfigured (an embedding host)
            encoding = getattr(stream, "encoding", None) or "ascii"
            stream.write(text.encode(encoding, "backslashreplace").decode(encoding))
        stream.flush()
        return None
    except (OSError, ValueError) as exc:
        _silence(stream)
        if isinstance(exc, OSError) and exc.errno == errno.EPIPE:
            return ""  # the reader left on purpose (`| head`): nothing to say
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return reason.lower() or type(exc).__name__


def _silence(stream: IO[str]) -> None:
    with contextlib.suppress(AttributeError, OSError, ValueError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, stream.fileno())
        os.close(null)
        stream.flush()  # what was buffered goes to the null device


def lost_console() -> str | None:
    """The line to say on stderr when the console report could not be written, or None."""
    if not _LOST or not _LOST[0]:
        return None
    return (f"gradverify: cannot write to stdout ({_LOST[0]}): the console report is lost; "
            "report files asked for (--output, --json, --junit-xml) are written and the exit "
            "code is the run's")



def is_stdout(path: Any) -> bool:
    try:
        mine, theirs = os.fstat(sys.stdout.fileno()), os.stat(path)
    except (OSError, ValueError, AttributeError):
        return False
    return (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino)


@contextlib.contextmanager
def user_output_to_stderr(enabled: bool) -> Iterator[None]:
    """While user code runs in this process (``--no-isolate``), what it prints, from Python or
    from native code, goes to stderr: stdout carries only the report."""
    if not enabled:
        yield
        return
    with contextlib.ExitStack() as stack:
        stack.enter_context(contextlib.redirect_stdout(sys.stderr))
        real_out, real_err = sys.__stdout__, sys.__stderr__
        try:
            if real_out is None or real_err is None:
                raise ValueError("no standard streams")
            out, err = real_out.fileno(), real_err.fileno()
            real_out.flush()
            saved = os.dup(out)
        except (AttributeError, OSError, ValueError):
            yield  # no real file descriptors (an embedding host, a test runner)
            return
        os.dup2(err, out)
        try:
            yield
        finally:
            real_out.flush()
            os.dup2(saved, out)
            os.close(saved)
