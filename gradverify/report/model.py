"""The report of a run: every case result and error, the settings, and the one place that turns
them into an exit code (``Report.exit_code``).

The report does not render itself: ``raise_for_failures`` takes its message from the console
formatter, which depends on ``results`` only (it names ``Report`` just as a type).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gradverify.report.console import render_plain
from gradverify.report.results import CaseResult, ErrorEntry, ExitCode, Settings, Status


@dataclass(frozen=True)
class Report:
    settings: Settings
    results: tuple[CaseResult, ...] = ()
    errors: tuple[ErrorEntry, ...] = ()
    duration_s: float = 0.0
    versions: Mapping[str, str] = field(default_factory=dict)
    """gradverify, torch and python versions."""
    notes: tuple[str, ...] = ()
    """Messages about what was (not) selected; they never change the exit code."""

    def counts(self) -> dict[str, int]:
        counts = {s.value: 0 for s in Status}
        for case in self.results:
            for check in case.checks:
                counts[check.status.value] += 1
        return counts

    @property
    def exit_code(self) -> ExitCode:
        """The one place that turns a report into an exit code."""
        if any(e.internal for e in self.errors):
            return ExitCode.INTERNAL
        if self.errors:
            return ExitCode.INPUT
        if not self.results:
            return ExitCode.OK if self.settings.empty_ok else ExitCode.NOTHING_SELECTED
        bad = {Status.FAIL, Status.ERROR}
        if self.settings.strict:
            bad |= {Status.WARN, Status.XPASS}
        if any(c.status in bad for case in self.results for c in case.checks):
            return ExitCode.FAILED
        return ExitCode.OK

    @property
    def ok(self) -> bool:
        return self.exit_code == ExitCode.OK

    def raise_for_failures(self) -> None:
        """Raise ``VerificationFailed`` (an AssertionError) with the plain report if not ok."""
        if not self.ok:
            raise VerificationFailed(render_plain(self))


class VerificationFailed(AssertionError):
    """Raised by ``Report.raise_for_failures``; its message is the plain-text report."""
