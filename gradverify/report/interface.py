"""What every report format meets (``--format NAME``), and the verbosity that the command
line's ``-q``/``-v`` pass through it to each format."""
from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from gradverify.results import Report


class Verbosity(enum.IntEnum):
    QUIET = -1
    """``-q``: the findings of what did not pass, errors and the closing line."""
    NORMAL = 0
    VERBOSE = 1
    """``-v``: every case's check table, notes and details such as Jacobian blocks."""

    @classmethod
    def of(cls, *, quiet: bool, verbose: bool) -> Verbosity:
        """From the flags; ``-v`` wins over ``-q`` when both are given."""
        return cls.VERBOSE if verbose else cls.QUIET if quiet else cls.NORMAL


class Renderer(Protocol):
    """One report format. Rendering never changes the report; the text comes back whole, so
    that the caller writes it in one piece (to a console that may fail, or atomically to a
    file)."""

    @property
    def reads_verbosity(self) -> bool:
        """Whether ``-q``/``-v`` change this format's output. A format that ignores them says
        why in its docstring."""

    def render(self, report: Report, verbosity: Verbosity = Verbosity.NORMAL) -> str:
        """The report in this format."""
