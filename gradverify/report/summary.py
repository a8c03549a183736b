"""The last line of every report format that has one (``12 passed, 1 failed in 3.20s``), with
the colours of the statuses it counts: the console's, and the summary of the Markdown, HTML
and GitHub formats."""
from __future__ import annotations

from typing import TYPE_CHECKING

from gradverify.report.line import Line
from gradverify.results import Status

if TYPE_CHECKING:
    from gradverify.results import Report

STYLE = {
    Status.PASS: "green", Status.FAIL: "bold red", Status.ERROR: "bold red",
    Status.WARN: "yellow", Status.SKIP: "dim", Status.XFAIL: "cyan", Status.XPASS: "magenta",
}


def summary_line(report: Report) -> Line:
    counts = report.counts()
    errors = counts["error"] + len(report.errors)
    words = [
        (counts["pass"], "passed", STYLE[Status.PASS]),
        (counts["fail"], "failed", STYLE[Status.FAIL]),
        (counts["warn"], "warnings" if counts["warn"] != 1 else "warning", STYLE[Status.WARN]),
        (counts["skip"], "skipped", STYLE[Status.SKIP]),
        (counts["xfail"], "xfailed", STYLE[Status.XFAIL]),
        (counts["xpass"], "xpassed", STYLE[Status.XPASS]),
        (errors, "errors" if errors != 1 else "error", STYLE[Status.ERROR]),
    ]
    segments: list[tuple[str, str]] = []
    for n, word, style in words:
        if n:
            if segments:
                segments.append((", ", ""))
            segments.append((f"{n} {word}", style))
    if not segments:
        segments.append(("no checks ran", "yellow"))
    segments.append((f" in {report.duration_s:.2f}s", ""))
    if report.settings.strict and (counts["warn"] or counts["xpass"]):
        segments.append((" (--strict: warnings and xpasses fail the run)", "bold red"))
    return Line(*segments)
