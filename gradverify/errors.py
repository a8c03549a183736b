"""Typed errors. Each maps to one exit code at exactly one boundary (``cli.main``)."""
from __future__ import annotations

import difflib
import os
import signal
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from gradverify.results import Location

if TYPE_CHECKING:
    from gradverify.results import Report


class Interrupted(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP while the command line's handler is installed (elsewhere,
    SIGINT arrives as a plain KeyboardInterrupt): stop the workers, report what finished, exit
    128 + the signal number."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signum)
        self.signum = int(signum)


class RunInterrupted(Interrupted):
    """A run stopped by an interrupt: ``report`` holds the cases that finished, the others as
    errors (GV014)."""

    def __init__(self, report: Report, signum: int) -> None:
        super().__init__(signum)
        self.report = report


def interrupt_signal(exc: BaseException | None) -> int:
    """The signal behind an interrupt: ``Interrupted.signum``, else SIGINT (a plain
    KeyboardInterrupt is Ctrl-C)."""
    return exc.signum if isinstance(exc, Interrupted) else int(signal.SIGINT)


def interrupt_exit_code(exc: BaseException | None) -> int:
    """128 + the signal number, as a shell reports a process the signal stopped."""
    return 128 + interrupt_signal(exc)


class GradverifyError(Exception):
    """Base for errors gradverify reports to the user (never a bug of ours)."""


class InputError(GradverifyError):
    """Bad user input: a spec, a target, a factory. Exit code 3.

    ``code`` is the stable finding code (``GV0nn``); ``where`` is a place in a file (a
    ``Location``, kept as ``location`` for the report) or a target name.
    """

    def __init__(self, message: str, *, code: str, where: str | Location | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.where = where
        self.location = where if isinstance(where, Location) else None

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message


class SpecError(InputError):
    """A spec file is malformed or invalid (GV001 syntax, GV002 schema)."""

    def __init__(self, message: str, *, file: str | None, line: int | None, key: str | None = None,
                 code: str = "GV002") -> None:
        where: str | Location = Location(file, line or None) if file else \
            (f"<spec>:{line}" if line else "<spec>")
        text = f"{key}: {message}" if key else message
        super().__init__(text, code=code, where=where)
        self.file = file
        self.line = line
        self.key = key
        self.others: list[SpecError] = []
        """More errors found in the same file (validation reports them all at once)."""


class TargetError(InputError):
    """A target cannot be imported, found, or is not an autograd Function."""


class UsageError(GradverifyError):
    """Bad command-line usage that click could not catch itself. Exit code 2."""


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """Return `` (did you mean 'x'?)`` for the closest choice, or an empty string."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def one_of(choices: Iterable[str]) -> str:
    """Render allowed values for a message: ``one of: a, b, c``."""
    return "one of: " + ", ".join(sorted(str(c) for c in choices))


def os_path(text: str) -> str:
    """A path written in a UTF-8 file (``pyproject.toml``, a spec) as the file system names it
    to Python: in an ASCII locale (``LC_ALL=POSIX``) a name's non-ASCII bytes are surrogates,
    and ``spécs`` must be looked for as ``sp\\udcc3\\udca9cs``."""
    try:
        return os.fsdecode(text.encode("utf-8", "surrogateescape"))
    except UnicodeEncodeError:
        return text


def shown_path(path: str | os.PathLike[str]) -> str:
    """A path as messages show it: relative to the current directory when under it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
