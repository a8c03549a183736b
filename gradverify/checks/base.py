"""What every check is: data (name, default, codes, options) plus one ``run``.

This module and every check module import torch only inside ``run``, so the registry can be
read (for ``explain``, ``--only`` validation and spec validation) without importing torch.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from gradverify.report.results import Finding, Severity, Status

if TYPE_CHECKING:
    from gradverify.codes import Code
    from gradverify.context import CheckContext


@dataclass(frozen=True)
class Option:
    """A per-check option settable under a spec's ``checks:``."""

    name: str
    kind: type
    help: str
    choices: tuple[Any, ...] | None = None


class Check(Protocol):
    name: str
    default: bool
    """On unless turned off (True), or opt-in (False)."""
    summary: str
    """One line: what the check verifies."""
    codes: tuple[Code, ...]
    """The codes it reports, documented; the registry collects them."""
    options: tuple[Option, ...]
    requires: tuple[str, ...]
    """Checks that must not have failed for this one to run (else: skip, with that reason)."""

    def run(self, ctx: CheckContext) -> Outcome: ...


@dataclass
class Outcome:
    """What a check's ``run`` returns; ``execute.run_case`` turns it into a frozen ``CheckResult``."""

    findings: list[Finding] = field(default_factory=list)
    summary: str = ""
    mode: str | None = None
    skipped: str | None = None
    """Set (to the reason) when the check did not apply."""
    data: dict[str, Any] = field(default_factory=dict)

    def add(self, finding: Finding) -> None:
        self.findings.append(finding)

    @property
    def status(self) -> Status:
        if self.skipped is not None:
            return Status.SKIP
        severities = {f.severity for f in self.findings}
        if Severity.ERROR in severities:
            return Status.FAIL
        if Severity.WARNING in severities:
            return Status.WARN
        return Status.PASS

    @classmethod
    def skip(cls, reason: str, *findings: Finding) -> Outcome:
        return cls(findings=list(findings), summary=reason, skipped=reason)
