"""GitHub Actions workflow commands: one ``::error``/``::warning`` annotation per finding,
pointing at the Function's source line (docs/ci.md), and one per error, at the spec's line when
the error has one. The file and line come from the model's ``Location``s, never from a
message's text."""
from __future__ import annotations

from typing import TYPE_CHECKING

from gradverify.report.interface import Verbosity
from gradverify.report.summary import summary_line
from gradverify.report.text import advice, escaped, said
from gradverify.results import Severity, Status

if TYPE_CHECKING:
    from gradverify.results import Location, Report


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _text(text: str) -> str:
    """User text in an annotation: each line's control characters escaped (no escape sequence
    reaches the log raw); its line breaks stay, as the annotation's own (``%0A``)."""
    return "\n".join(escaped(line) for line in text.split("\n"))


def _property(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def _annotation(kind: str, location: Location | None, title: str, message: str) -> str:
    props = []
    if location and location.line is not None:  # GitHub places an annotation on a line
        props += [f"file={_property(location.file)}", f"line={location.line}"]
    props.append(f"title={_property(title)}")
    return f"::{kind} {','.join(props)}::{_data(message)}"


class Github:
    """One annotation per finding of what did not pass and per error, whatever ``-q``/``-v``
    say: GitHub shows each on its line of the pull request."""

    reads_verbosity = False

    def render(self, report: Report, verbosity: Verbosity = Verbosity.NORMAL) -> str:
        return _render(report)


def _render(report: Report) -> str:
    lines = []
    for case in report.results:
        for check in case.rows:
            if check.status in (Status.PASS, Status.SKIP, Status.XFAIL):
                continue
            for f in check.findings:
                if f.severity == Severity.INFO:
                    continue
                # what fails the run is an error: an error finding, or any under --strict
                kind = "error" if report.failed(check) and (
                    f.severity == Severity.ERROR or report.settings.strict) else "warning"
                # messages carry user text (a crash's last output, an exception): escaped, so
                # that no escape sequence reaches the log raw
                message = f"{escaped(case.target)} [{escaped(case.case)}] {check.name}: " \
                          f"{_text(said(f))}"
                if hint := advice(f):
                    message += f"\nfix: {_text(hint)} (gradverify explain {f.code})"
                lines.append(_annotation(kind, f.location, f"{f.code} {check.name}", message))
    for score in report.mutants:  # --mutate: a survivor is a weakness of the spec, a notice
        for survivor in score.survived:
            lines.append(_annotation(
                "notice", survivor.location, "mutant survived",
                f"{escaped(score.target)}: {survivor.mutation} survives: {survivor.why}"))
    for error in report.errors:
        lines.append(_annotation("error", error.location, error.code, _text(error.message)))
    lines.append(summary_line(report).plain())
    return "\n".join(lines) + "\n"
