"""GitHub Actions workflow commands: one ``::error``/``::warning`` annotation per finding,
pointing at the Function's source line (DESIGN §5)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from gradverify.report.console import summary_line
from gradverify.report.text import escaped
from gradverify.results import Severity, Status

if TYPE_CHECKING:
    from gradverify.results import Report


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def _annotation(kind: str, location: str | None, title: str, message: str) -> str:
    props = []
    if location:
        file, _, line = location.rpartition(":")
        if file and line.isdigit():
            props += [f"file={_property(file)}", f"line={line}"]
    props.append(f"title={_property(title)}")
    return f"::{kind} {','.join(props)}::{_data(message)}"


def render(report: Report, verbose: bool = False) -> str:
    lines = []
    for case in report.results:
        for check in case.checks:
            if check.status in (Status.PASS, Status.SKIP, Status.XFAIL):
                continue
            for f in check.findings:
                if f.severity == Severity.INFO:
                    continue
                # what fails the run is an error: an error finding, or any under --strict
                kind = "error" if report.failed(check) and (
                    f.severity == Severity.ERROR or report.settings.strict) else "warning"
                message = f"{escaped(case.target)} [{escaped(case.case)}] {check.name}: " \
                          f"{f.message}"
                if f.hint:
                    message += f"\nfix: {f.hint} (gradverify explain {f.code})"
                lines.append(_annotation(kind, f.location, f"{f.code} {check.name}", message))
    for error in report.errors:
        location = None
        head = error.message.split(": ", 1)[0]
        if head.count(":") == 1 and head.rsplit(":", 1)[1].isdigit():
            location = head
        lines.append(_annotation("error", location, error.code, error.message))
    lines.append(summary_line(report).plain())
    return "\n".join(lines) + "\n"
