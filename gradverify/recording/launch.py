"""``gradverify record -- python train.py ARGS``: the script runs in a child process with
recording on (``python -m gradverify.recording.launch``), its output and exit code passing through;
then the parent writes the specs from the spool."""
from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from gradverify import frames, torchcompat
from gradverify.errors import UsageError
from gradverify.files import check_folder
from gradverify.recording.capture import DEFAULT_LIMIT, Recorder, install
from gradverify.recording.prober import Prober
from gradverify.recording.spool import read_spool
from gradverify.syspath import own_module_command

_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?(\.exe)?$")


def command_target(command: Sequence[str]) -> list[str]:
    """What to run from ``python train.py ARGS`` or ``python -m pkg.mod ARGS`` (the interpreter
    named is replaced by this one, which has gradverify); ``train.py ARGS`` works too."""
    rest = list(command)
    if rest and (_PYTHON.match(Path(rest[0]).name) or rest[0] == sys.executable):
        rest = rest[1:]
    if rest[:1] == ["-m"] and len(rest) >= 2:
        return rest
    if rest and rest[0].endswith(".py"):
        if not Path(rest[0]).is_file():
            raise UsageError(f"no such script: {rest[0]}")
        return rest
    shown = " ".join(command) or "nothing"
    raise UsageError(f"cannot record {shown!r}: give the Python command after --, as in "
                     "`gradverify record -- python train.py ARGS` or `gradverify record -- "
                     "python -m pkg.train ARGS` (other launchers such as torchrun are not "
                     "supported; call the training function from a script)")


def run_recorded(command: Sequence[str], out: Path, *, include: Sequence[str] = (),
                 exclude: Sequence[str] = (), limit: int = DEFAULT_LIMIT, force: bool = False,
                 shrink: bool = True, progress: Callable[[str, bool], None] | None = None
                 ) -> tuple[int, Any]:
    """Run the command with recording on, in a child process whose output and exit code pass
    through; then write the specs. Returns (the command's exit code, ``write.Written``)."""
    from gradverify.recording.write import write_specs  # not in the script's process

    target = command_target(command)
    check_folder(out, option="-o/--output")  # before the script runs, not after
    with tempfile.TemporaryDirectory(prefix="gradverify-record-") as spool, \
            contextlib.ExitStack() as stack:
        config = Path(spool) / "config.json"
        config.write_text(json.dumps({"spool": spool, "include": list(include),
                                      "exclude": list(exclude), "limit": limit}))
        # the probe process imports torch while the script runs, not after it
        prober = Prober().start() if shrink else None
        if prober is not None:
            stack.callback(prober.close, kill=True)  # closed by write_specs, or on a failure
        code, received = _run_script(config, target)
        written = write_specs(read_spool(Path(spool)), out, limit=limit, force=force,
                              shrink=shrink, origin=f"`{' '.join(command)}`",
                              progress=progress, prober=prober)
    if received:  # stopped as the script would be without gradverify: 128 + the signal
        return 128 + received[0], written
    return code, written


def _run_script(config: Path, target: list[str]) -> tuple[int, list[int]]:
    """Run the script with recording on: its exit code, and the signals this process got."""
    received: list[int] = []
    children: list[subprocess.Popen[bytes]] = []
    # handlers first: the script starts with each signal's default disposition, even where
    # this process was started ignoring it (a background job of a shell ignores SIGINT)
    with _passing_signals(children, received):
        child = subprocess.Popen(own_module_command("gradverify.recording.launch",
                                                    str(config), *target))
        children.append(child)
        if received:  # a signal that came while it started
            with contextlib.suppress(OSError):
                child.send_signal(received[0])
        return child.wait(), received


@contextlib.contextmanager
def _passing_signals(children: list[subprocess.Popen[bytes]],
                     received: list[int]) -> Iterator[None]:
    """While the script runs: Ctrl-C, SIGTERM and SIGHUP stop it as they would without
    gradverify, and this process then writes what was recorded (the spool is removed on the
    way out). A Ctrl-C typed in the terminal reaches the script directly (one process group):
    it is passed on only when it was sent to this process alone."""
    import signal

    def forward(signum: int, frame: Any) -> None:
        if not received:
            received.append(signum)
        if signum == signal.SIGINT and _terminal_reached_child():
            return
        for child in children:  # none yet: passed on once it starts
            with contextlib.suppress(OSError):
                child.send_signal(signum)

    wanted = [signal.SIGINT, signal.SIGTERM]
    if hasattr(signal, "SIGHUP") and signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:
        wanted.append(signal.SIGHUP)  # under nohup, the script stays immune to a hang-up
    # A Python handler (not SIG_IGN) in this process when the script starts: the script gets
    # each signal's default disposition (exec resets handled ones), so Ctrl-C stops it.
    previous = {signum: signal.signal(signum, forward) for signum in wanted}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _terminal_reached_child() -> bool:
    """Whether a SIGINT came from this terminal's Ctrl-C, which the terminal sends to the whole
    foreground process group, the script included."""
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except (OSError, ValueError, AttributeError):
        return False


def boot(argv: list[str]) -> None:
    """``python -m gradverify.recording.launch CONFIG [-m] TARGET ARGS...``: run a script or
    module as ``__main__`` with recording on; started by ``gradverify record``."""
    import runpy

    config = json.loads(Path(argv[0]).read_text())
    rest = argv[1:]
    module = rest[0] == "-m"
    if module:
        rest = rest[1:]
    script = None if module else str(Path(rest[0]).resolve())
    import atexit

    recorder = Recorder(Path(config["spool"]), config["include"], config["exclude"],
                        config["limit"], script=script)
    install(recorder)
    main_pid = os.getpid()

    def note_compiled() -> None:  # at the script's exit, not in its forked workers
        if torchcompat.compiled_graph_count() and os.getpid() == main_pid:
            recorder.append({"compiled": "*"})

    atexit.register(note_compiled)
    sys.argv = list(rest)
    sys.excepthook = _script_traceback
    _one_interrupt_per_signal()
    if module:
        sys.path.insert(0, os.getcwd())
        runpy.run_module(rest[0], run_name="__main__", alter_sys=True)
    else:
        sys.path.insert(0, str(Path(rest[0]).resolve().parent))
        runpy.run_path(script or rest[0], run_name="__main__")  # __file__ absolute, as python


SAME_SIGNAL_S = 0.25
"""Two SIGINTs this close together are one signal that reached the script twice: sent to the
whole process group (the terminal's Ctrl-C, ``kill -INT -PGID``) and passed on by ``record``,
which cannot always tell that the group got it."""


def _one_interrupt_per_signal() -> None:
    """The script's Ctrl-C raises one KeyboardInterrupt, as without gradverify, even when the
    signal reaches it twice at once (``SAME_SIGNAL_S``). Only where the script would get
    Python's own handler; a handler the script installs replaces this one."""
    import signal
    import time

    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return
    last = [-SAME_SIGNAL_S]

    def interrupt(signum: int, frame: Any) -> None:
        now = time.monotonic()
        if now - last[0] < SAME_SIGNAL_S:
            return
        last[0] = now
        raise KeyboardInterrupt

    _HANDLERS.append(interrupt.__code__)  # its frame is left out of the script's traceback
    signal.signal(signal.SIGINT, interrupt)


_HANDLERS: list[Any] = []


def _script_traceback(kind: type[BaseException], value: BaseException, tb: Any) -> None:
    """An uncaught exception of the script (Ctrl-C's KeyboardInterrupt too) printed as
    ``python script.py`` prints it: without the frames above the script's own (gradverify's
    launcher, its ``python -c`` boot code and runpy). Python then exits as it would (by SIGINT
    for Ctrl-C). A second Ctrl-C while it prints is ignored: it cannot interrupt the hook into
    a traceback of gradverify's own."""
    import signal

    with contextlib.suppress(ValueError):  # not the main thread: no signal handling to change
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    launcher = (frames.Owner.GRADVERIFY, frames.Owner.PYTHON, frames.Owner.NO_FILE)
    for handler in _HANDLERS:
        tb = frames.without_inner(tb, handler)
    inner = frames.without_outer(tb, launcher)
    shown = inner if inner is not None else tb  # a failure of the launcher itself: all of it
    sys.__excepthook__(kind, value.with_traceback(shown), shown)


if __name__ == "__main__":
    boot(sys.argv[1:])
