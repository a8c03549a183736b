"""What a run finds: statuses, findings and the results of checks and cases, as frozen
dataclasses that the formatters render and never change. The whole run is
``gradverify.report.model.Report``.
"""
from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class ExitCode(enum.IntEnum):
    OK = 0
    FAILED = 1  # a check failed, or could not run because the Function raised
    USAGE = 2  # command-line usage error
    INPUT = 3  # invalid spec, or a target that cannot be imported / is not a Function
    INTERNAL = 4  # a bug in gradverify itself
    NOTHING_SELECTED = 5  # no specs, or the filters matched nothing
    HANGUP = 129  # SIGHUP (128 + 1): the report holds what finished
    INTERRUPTED = 130  # SIGINT (128 + 2)
    TERMINATED = 143  # SIGTERM (128 + 15), as CI systems and `timeout` send on cancel


class Status(str, enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    WARN = "warn"
    SKIP = "skip"
    XFAIL = "xfail"
    XPASS = "xpass"
    ERROR = "error"

    @property
    def rank(self) -> int:
        """Badness, for "a case's status is its worst check's"."""
        return _RANK[self]


_RANK = {
    Status.SKIP: 0,
    Status.PASS: 1,
    Status.XFAIL: 2,
    Status.WARN: 3,
    Status.XPASS: 4,
    Status.FAIL: 5,
    Status.ERROR: 6,
}


class Severity(str, enum.Enum):
    ERROR = "error"  # makes its check fail
    WARNING = "warning"  # makes its check warn
    INFO = "info"  # a note; never changes a status


def worst(statuses: list[Status], default: Status = Status.PASS) -> Status:
    return max(statuses, key=lambda s: s.rank) if statuses else default


@dataclass(frozen=True)
class Finding:
    """One problem (or note) found by a check."""

    code: str
    """Stable code, ``GVnnn``; ``gradverify explain CODE`` documents it."""
    severity: Severity
    message: str
    """One line with concrete names and numbers."""
    input: str | None = None
    """Forward's parameter name of the input concerned, if any."""
    output: int | None = None
    """Index of the output concerned, if any."""
    hint: str | None = None
    """How to fix it."""
    location: str | None = None
    """``file:line`` of the Function's code concerned (usually backward)."""
    data: Mapping[str, Any] = field(default_factory=dict)
    """Numbers behind the message (JSON-safe); ``details`` lines are shown with ``-v``."""


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: Status
    duration_s: float
    summary: str
    """One line for the table: what was checked or why it was skipped."""
    findings: tuple[Finding, ...] = ()
    mode: str | None = None
    """gradcheck/gradgradcheck only: ``slow`` or ``fast``."""
    expect: str | None = None
    """The spec's ``expect:`` reason when this check was expected to fail."""
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class InputInfo:
    name: str
    kind: str  # tensor | none | bool | int | float | str | tuple | list | other
    shape: tuple[int, ...] | None = None
    dtype: str | None = None
    requires_grad: bool | None = None


@dataclass(frozen=True)
class CaseResult:
    target: str
    spec: str | None
    case: str
    status: Status
    duration_s: float
    inputs: tuple[InputInfo, ...] = ()
    checks: tuple[CheckResult, ...] = ()
    inferred: bool = False
    """True when no spec was found and the inputs were inferred from forward's signature."""


@dataclass(frozen=True)
class ErrorEntry:
    """A spec or target that could not be run at all."""

    target: str | None
    spec: str | None
    code: str
    message: str
    internal: bool = False
    """True for a bug in gradverify (exit 4); the message then carries the traceback."""


@dataclass(frozen=True)
class Settings:
    device: str = "cpu"
    seed: int = 0
    mode: str = "auto"
    strict: bool = False
    empty_ok: bool = False
    """Nothing selected is success (pre-commit with no relevant changed file)."""
