"""The console report: the same lines in plain text (CI logs, pipes, golden tests) or rich colour.

Layout: a header; per case a line and a table of checks (status, name, time, summary); then the
findings (``file:line: error: message [GVnnn]`` with notes, as mypy writes them); then notes and
a pytest-like closing line.
"""
from __future__ import annotations

import textwrap
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING

from gradverify.report.results import CaseResult, CheckResult, Finding, InputInfo, Severity, Status

if TYPE_CHECKING:
    from gradverify.report.model import Report
    from rich.text import Text

WIDTH = 100

STYLE = {
    Status.PASS: "green", Status.FAIL: "bold red", Status.ERROR: "bold red",
    Status.WARN: "yellow", Status.SKIP: "dim", Status.XFAIL: "cyan", Status.XPASS: "magenta",
}
SEVERITY_STYLE = {Severity.ERROR: "red", Severity.WARNING: "yellow", Severity.INFO: "blue"}


class _Line:
    """A line as (text, style) segments; plain rendering ignores styles."""

    def __init__(self, *segments: tuple[str, str]) -> None:
        self.segments = [s for s in segments if s[0]]

    def plain(self) -> str:
        return "".join(text for text, _ in self.segments).rstrip()

    def rich(self) -> Text:
        from rich.text import Text

        text = Text()
        for part, style in self.segments:
            text.append(part, style=style or None)
        return text


def _p(text: str, style: str = "") -> _Line:
    return _Line((text, style))


def lines(report: Report, verbose: bool = False) -> Iterator[_Line]:
    v = report.versions
    parts = [f"gradverify {v.get('gradverify', '?')}"]
    if "torch" in v:
        parts.append(f"torch {v['torch']}")
    parts += [f"python {v.get('python', '?')}", f"device {report.settings.device}",
              f"seed {report.settings.seed}"]
    yield _p(" | ".join(parts), "bold")
    for case in report.results:
        yield _p("")
        yield from _case(case)
    findings = [(case, check, f) for case in report.results for check in case.checks
                for f in check.findings]
    shown = [(c, k, f) for c, k, f in findings
             if f.severity != Severity.INFO or verbose or k.status != Status.PASS]
    if shown:
        yield _p("")
        yield _p("findings", "bold underline")
    last = None
    for case, check, finding in shown:
        key = (case.target, case.case)
        if key != last:
            yield _p("")
            yield _p(f"{case.target} :: {case.case}", "bold")
            last = key
        yield from _finding(check, finding, verbose)
    if report.errors:
        yield _p("")
        yield _p("errors", "bold underline")
        for error in report.errors:
            label = "internal error" if error.internal else "error"
            message, *details = error.message.rstrip().split("\n")
            wrapped = _wrap(f"{label}: {message}  [{error.code}]", "    ")
            yield _Line((f"{label}: ", "bold red"), (wrapped[0][len(label) + 2:], ""))
            for rest in wrapped[1:] + details:
                yield _p(rest)
            if error.internal:
                yield _p("gradverify hit a bug (exit 4): please report it at the project's issue "
                         "tracker with the traceback above and the spec.", "red")
    for note in report.notes:
        yield _p("")
        yield _Line(("note: ", "blue"), (note, ""))
    yield _p("")
    yield summary_line(report)


def _case(case: CaseResult) -> Iterator[_Line]:
    where = f"  ({case.spec})" if case.spec else ("  (inferred spec)" if case.inferred else "")
    yield _Line((f"{case.target} :: {case.case}", "bold"), (where, "dim"),
                ("  ", ""), (case.status.value.upper(), STYLE[case.status]),
                (f"  {case.duration_s:.2f}s", "dim"))
    shapes = ", ".join(_input(i) for i in case.inputs)
    if shapes:
        yield _p(f"  inputs: {shapes}", "dim")
    width = max((len(c.name) for c in case.checks), default=8)
    for check in case.checks:
        summary = check.summary
        if check.expect and check.status in (Status.XFAIL, Status.XPASS):
            summary = f"{summary} (expected: {check.expect})"
        yield _Line(("  ", ""), (f"{check.status.value.upper():<6}", STYLE[check.status]),
                    (f" {check.name:<{width}} ", ""), (f"{check.duration_s:6.2f}s ", "dim"),
                    (_clip(summary, WIDTH - width - 20), ""))


def _input(info: InputInfo) -> str:
    if info.kind == "tensor":
        shape = "x".join(map(str, info.shape or ())) or "scalar"
        grad = "" if info.requires_grad else ", no grad"
        return f"{info.name} [{shape}] {info.dtype}{grad}"
    return f"{info.name}: {info.kind}"


def _finding(check: CheckResult, finding: Finding, verbose: bool) -> Iterator[_Line]:
    where = f"{finding.location}: " if finding.location else ""
    label = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}[
        finding.severity]
    if check.status == Status.XFAIL and finding.severity == Severity.ERROR:
        label = "expected failure"
    # Wrapped at WIDTH so that CI logs stay readable; continuation lines are indented.
    head = f"{where}{label}: "
    tag = f"  [{finding.code} {check.name}]"
    body = _wrap(head + finding.message + tag, "    ")
    first = body[0]
    yield _Line((where, "bold"), (f"{label}: ", SEVERITY_STYLE[finding.severity]),
                (first[len(head):], "") if len(body) > 1 else
                (finding.message, ""), ("" if len(body) > 1 else tag, "dim"))
    for index, rest in enumerate(body[1:], start=1):
        if index == len(body) - 1 and rest.endswith(tag.strip()):
            yield _Line((rest[: -len(tag.strip())], ""), (tag.strip(), "dim"))
        else:
            yield _p(rest)
    if finding.hint:
        hint = _wrap("  note: " + finding.hint, "        ")
        yield _Line(("  note: ", "blue"), (hint[0][len("  note: "):], ""))
        for rest in hint[1:]:
            yield _p(rest)
    heat = finding.data.get("heatmap") if finding.data else None
    if heat:
        cols = f"'{finding.input}'" if finding.input else "input"
        yield _p(f"  |analytical - numerical| (rows: output elements, columns: {cols} elements)",
                 "dim")
        for row in heat:
            yield _p(f"    |{row}|", "red")
    if verbose and finding.data:
        for key in ("analytical_block", "numerical_block"):
            if key in finding.data:
                yield _p(f"  {key.replace('_', ' ')}:", "dim")
                for row in finding.data[key]:
                    yield _p("    " + " ".join(f"{x:9.4f}" for x in row), "dim")
        if "traceback" in finding.data:
            for row in str(finding.data["traceback"]).rstrip().splitlines():
                yield _p(f"    {row}", "dim")
    if finding.severity != Severity.INFO:
        yield _p(f"  explain: gradverify explain {finding.code}", "dim")


def summary_line(report: Report) -> _Line:
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
    return _Line(*segments)


def _wrap(text: str, indent: str) -> list[str]:
    return textwrap.wrap(text, WIDTH, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False) or [text]


def _clip(text: str, width: int) -> str:
    width = max(width, 20)
    return text if len(text) <= width else text[: width - 3] + "..."


def render_plain(report: Report, verbose: bool = False) -> str:
    return "\n".join(line.plain() for line in lines(report, verbose)) + "\n"


def write_console(report: Report, stream: IO[str], *, color: bool, verbose: bool = False) -> None:
    if not color:
        stream.write(render_plain(report, verbose))
        return
    from rich.console import Console

    console = Console(file=stream, force_terminal=True, highlight=False, soft_wrap=True)
    for line in lines(report, verbose):
        console.print(line.rich())
