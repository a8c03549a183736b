"""The process around a command: signals that stop a run, where user code's output goes,
the progress bar, colour. Used by ``cli``; no logic of gradverify's own."""
from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Iterator
from typing import Any


@contextlib.contextmanager
def terminations_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP (CI cancelling a job, `timeout`, a closed terminal) stop a run as
    Ctrl-C does: the workers are stopped and the report files are written."""
    from gradverify import target
    from gradverify.errors import Interrupted

    def interrupt(signum: int, frame: Any) -> None:
        raise Interrupted(signum)

    # SIGINT too: a real Ctrl-C is then told apart from a KeyboardInterrupt raised by a module
    # being imported (an import failure of that target).
    wanted = [signal.SIGINT, signal.SIGTERM] + \
        ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])
    previous = {signum: signal.signal(signum, interrupt) for signum in wanted}
    target.USER_INTERRUPTS = True
    try:
        yield
    finally:
        target.USER_INTERRUPTS = False
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


def color(no_color: bool) -> bool:
    if no_color or os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return sys.stdout.isatty()



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
