"""The console report: the same lines in plain text (CI logs, pipes, golden tests) or rich colour.

Like pytest's, by verbosity:
- default: a header; one line per spec file and target with a status character per case
  (``.`` pass, ``W`` warning, ``F`` fail, ``E`` error, ``s`` skip, ``x`` expected failure,
  ``X`` unexpected pass); then, for each case that did not pass, its check table and its
  findings (``file:line: error: message [GVnnn]`` with notes, as mypy writes them); errors,
  notes and a pytest-like closing line.
- ``-v``: the check table and findings of every case.
- ``-q``: the findings of the cases that did not pass, errors, and the closing line.

Lines are wrapped at word boundaries to the width (the terminal's, or ``COLUMNS``, or 100).
"""
from __future__ import annotations

import os
import re
import textwrap
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from gradverify.report import heatmap
from gradverify.report.interface import Verbosity
from gradverify.report.line import Line, plain
from gradverify.report.summary import STYLE, summary_line
from gradverify.report.text import (
    CHAR,
    advice,
    escaped,
    finding_label,
    finding_line,
    jacobian_cell,
    mutation_lines,
    said,
    smallest_lines,
)
from gradverify.results import (
    EVIDENCE_CAP,
    CaseResult,
    CheckResult,
    Evidence,
    Finding,
    InputInfo,
    Severity,
    Status,
    first_clause,
)

if TYPE_CHECKING:

    from gradverify.results import Location, Report

WIDTH = 100

SEVERITY_STYLE = {Severity.ERROR: "red", Severity.WARNING: "yellow", Severity.INFO: "blue"}


def default_width() -> int:
    """``COLUMNS`` when set (CI logs, golden tests), else 100."""
    try:
        return max(60, int(os.environ.get("COLUMNS", WIDTH)))
    except ValueError:
        return WIDTH


class _Writer:
    def __init__(self, verbosity: Verbosity, width: int) -> None:
        self.verbosity = verbosity
        self.width = width
        self.noted: set[tuple[str, str, Location | None, str]] = set()
        """The notes (INFO findings) said: one that every case of a target repeats (GV143 on a
        @once_differentiable backward) is said once."""

    def wrap(self, text: str, indent: str, first: str = "") -> list[str]:
        return textwrap.wrap(text, self.width, initial_indent=first, subsequent_indent=indent,
                             break_long_words=False, break_on_hyphens=False) or [first + text]

    # -- the report

    def lines(self, report: Report) -> Iterator[Line]:
        yield plain(_header(report), "bold")
        if self.verbosity == Verbosity.NORMAL and report.results:
            yield plain("")
            yield from self.overview(report)
        shown = [c for c in report.results
                 if self.verbosity == Verbosity.VERBOSE or _needs_detail(c)]
        for case in shown:
            yield plain("")
            yield from self.case(case)
        if self.verbosity != Verbosity.VERBOSE:
            yield from self.strength_notes([c for c in report.results if c not in shown])
        if report.errors:
            yield plain("")
            yield plain("errors", "bold underline")
            for error in report.errors:
                label = "internal error" if error.internal else "error"
                # a traceback keeps its lines; any other message is one paragraph
                message, *details = error.message.rstrip().split("\n") if error.internal \
                    else (error.message,)
                wrapped = self.wrap(f"{label}: {message}  [{error.code}]", "    ")
                yield Line((f"{label}: ", "bold red"), (wrapped[0][len(label) + 2:], ""))
                for rest in wrapped[1:] + details:
                    yield plain(rest)
                if error.internal:
                    yield plain("gradverify hit a bug (exit 4): please report it at the project's "
                             "issue tracker with the traceback above and the spec.", "red")
        verbose = self.verbosity == Verbosity.VERBOSE
        for text, style in mutation_lines(report.mutants, verbose, self.width):  # --mutate
            yield plain(text, style)
        for note in report.notes:
            yield plain("")
            wrapped = self.wrap(f"note: {note}", "      ")
            yield Line(("note: ", "blue"), (wrapped[0][6:], ""))
            for rest in wrapped[1:]:
                yield plain(rest)
        yield plain("")
        yield summary_line(report)

    def strength_notes(self, cases: list[CaseResult]) -> Iterator[Line]:
        """Notes about what a spec cannot show (``STRENGTH_NOTES``), said for cases that pass
        too: a PASS with a weight of ones proves less than it seems."""
        for case in cases:
            for check in case.rows:
                for finding in check.findings:
                    if finding.code not in STRENGTH_NOTES:
                        continue
                    yield plain("")
                    where = f"  ({case.spec})" if case.spec else ""
                    yield Line((case.target, "bold"), (where, "dim"))
                    yield from self.finding(check, finding)

    def overview(self, report: Report) -> Iterator[Line]:
        """One line per spec file and target, a status character per case; the characters
        wrap under the label when they do not fit beside it."""
        groups: dict[tuple[str | None, str], list[CaseResult]] = {}
        for case in report.results:
            groups.setdefault((case.spec, case.target), []).append(case)
        labels = {key: _group_label(*key, cases) for key, cases in groups.items()}
        pad = max(len(label) for label in labels.values())
        if pad + 2 + max(len(cases) for cases in groups.values()) > self.width:
            pad = 0
        for key, cases in groups.items():
            label = labels[key]
            if len(label) + 2 + len(cases) > self.width:
                yield plain(label, "bold")
                label, indent = "", "    "
            else:
                label, indent = f"{label:<{pad}}  ", ""
            room = self.width - len(label or indent)
            for start in range(0, len(cases), room):
                yield Line((label or indent, "bold"),
                            *((CHAR[c.status], STYLE[c.status]) for c in cases[start:start + room]))
                label = ""

    def case(self, case: CaseResult) -> Iterator[Line]:
        """A case's title line, its inputs and check table (unless ``-q``), its findings."""
        where = f"  ({case.spec})" if case.spec else ("  (inferred spec)" if case.inferred else "")
        yield Line((f"{case.target} :: {case.case}", "bold"), (where, "dim"),
                    ("  ", ""), (case.status.value.upper(), STYLE[case.status]),
                    (f"  {case.duration_s:.2f}s", "dim"))
        if self.verbosity > Verbosity.QUIET:
            yield from self.inputs(case)
            yield from self.check_table(case)
        yield from self.case_findings(case)

    def inputs(self, case: CaseResult) -> Iterator[Line]:
        shapes = ", ".join(_input(i) for i in case.inputs)
        if shapes:
            for line in self.wrap(f"inputs: {shapes}", "    ", "  "):
                yield plain(line, "dim")

    def check_table(self, case: CaseResult) -> Iterator[Line]:
        """The rows of the checks shown (all with ``-v``; else what did not pass, skips for one
        reason grouped), then a line counting the others."""
        rows = [c for c in case.rows if self.verbosity == Verbosity.VERBOSE or _row_needed(c)]
        if self.verbosity != Verbosity.VERBOSE:
            rows = _grouped_skips(rows)
        name_width = max((len(c.name) for c in rows if "," not in c.name), default=8)
        for check in rows:
            yield from self.check_row(check, name_width)
        shown = {n for c in rows for n in c.name.split(", ")}
        rest = [c for c in case.rows if c.name not in shown]
        if rest:
            passed = sum(1 for c in rest if c.status == Status.PASS)
            skipped = len(rest) - passed
            yield plain("  (" + ", ".join(part for part in (
                f"{passed} other check{'s' * (passed != 1)} passed" if passed else "",
                f"{skipped} skipped" if skipped else "") if part) + "; -v shows them)", "dim")

    def case_findings(self, case: CaseResult) -> Iterator[Line]:
        """Every finding of the case; a note said already for the target is not repeated, and
        a passing check's notes wait for ``-v``."""
        for check in case.rows:
            for finding in check.findings:
                if finding.severity == Severity.INFO:
                    noted = (case.target, finding.code, finding.location, said(finding))
                    if noted in self.noted or (self.verbosity != Verbosity.VERBOSE
                                               and check.status == Status.PASS):
                        continue
                    self.noted.add(noted)
                yield from self.finding(check, finding)

    def check_row(self, check: CheckResult, name_width: int) -> Iterator[Line]:
        summary = _row_summary(check)
        if check.expect and check.status in (Status.XFAIL, Status.XPASS):
            summary = f"{summary} (expected: {check.expect})"
        if ", " in check.name:  # skipped together: the names, then the reason
            rows = self.wrap(f"{check.name}: {summary}", "         ", "  SKIP   ")
            yield Line(("  ", ""), ("SKIP  ", STYLE[Status.SKIP]), (rows[0][8:], "dim"))
            for rest in rows[1:]:
                yield plain(rest, "dim")
            return
        head = f"  {check.status.value.upper():<6} {check.name:<{name_width}} " \
               f"{check.duration_s:6.2f}s "
        rows = self.wrap(summary, " " * len(head), head)
        yield Line(("  ", ""), (f"{check.status.value.upper():<6}", STYLE[check.status]),
                    (f" {check.name:<{name_width}} ", ""), (f"{check.duration_s:6.2f}s ", "dim"),
                    (rows[0][len(head):], ""))
        for rest in rows[1:]:
            yield plain(rest)

    def finding(self, check: CheckResult, finding: Finding) -> Iterator[Line]:
        expected = check.status == Status.XFAIL
        text = finding_line(finding, check.name, expected=expected)
        where = escaped(f"{finding.location}: ") if finding.location else ""
        said_as = finding_label(finding, expected=expected)
        head = f"{where}{said_as}: "  # as the text says it: control characters escaped
        tag = f"[{finding.code} {check.name}]"
        # neither the tag nor the head (a long path's ``file:line: error:``) is split
        if text.startswith(head):
            text = head.rstrip().replace(" ", "\0") + text[len(head.rstrip()):]
        body = [line.replace("\0", " ") for line in
                self.wrap(text.replace(tag, tag.replace(" ", "\0")), "    ")]
        first = body[0]
        yield Line((where, "bold"), (f"{said_as}: ", SEVERITY_STYLE[finding.severity]),
                    (first[len(head):].removesuffix(tag), ""),
                    (tag if first.endswith(tag) else "", "dim"))
        for rest in body[1:]:
            yield Line((rest.removesuffix(tag), ""), (tag if rest.endswith(tag) else "", "dim"))
        if note := advice(finding):
            hint = self.wrap("  note: " + note, "        ")
            yield Line(("  note: ", "blue"), (hint[0][len("  note: "):], ""))
            for rest in hint[1:]:
                yield plain(rest)
        yield from self.evidence(finding.evidence)
        yield from self.smallest(finding)
        if finding.severity != Severity.INFO:
            yield plain(f"  explain: gradverify explain {finding.code}", "dim")

    def evidence(self, evidence: Evidence) -> Iterator[Line]:
        """Each Jacobian block as a heatmap; its numbers and a traceback with ``-v`` only."""
        for jacobian in evidence.blocks:
            yield plain(f"  |analytical - numerical| (rows: output elements, columns: "
                        f"'{jacobian.input}' elements)", "dim")
            if jacobian.truncated:
                yield plain(f"  (the {EVIDENCE_CAP} rows and columns with the largest "
                            "differences)", "dim")
            for row in heatmap.text(jacobian):
                yield plain(f"    |{row}|", "red")
            if self.verbosity != Verbosity.VERBOSE:
                yield plain("  (-v shows the analytical and numerical Jacobian blocks)", "dim")
                continue
            yield from self.block("analytical block", jacobian.analytical)
            yield from self.block("numerical block", jacobian.numerical)
        if self.verbosity == Verbosity.VERBOSE and evidence.traceback:
            for row in evidence.traceback.rstrip().splitlines():
                for line in self.wrap(row.strip(), "      ",
                                      "    " + " " * (len(row) - len(row.lstrip()))):
                    yield plain(line, "dim")

    def smallest(self, finding: Finding) -> Iterator[Line]:
        """The smallest failing case, as a spec case; why it has no repro, when asked for."""
        for line in smallest_lines(finding):
            yield plain(line, "" if line.startswith("    ") else "dim")

    def block(self, title: str, rows: Sequence[Sequence[float]]) -> Iterator[Line]:
        """A Jacobian block, its columns in groups that fit the width."""
        per = max(1, (self.width - 4) // 10)
        columns = len(rows[0]) if rows else 0
        for start in range(0, max(columns, 1), per):
            part = f" (columns {start}-{min(start + per, columns) - 1})" if columns > per else ""
            yield plain(f"  {title}{part}:", "dim")
            for row in rows:
                cells = " ".join(jacobian_cell(x) for x in row[start:start + per])
                yield plain("    " + cells, "dim")


_MORE = re.compile(r" \(\+\d+ more\)\Z")
ROW_CLAUSE = 120
"""How long a row's summary that repeats a finding shown below it may be (it is cut at a word:
the finding says the rest)."""


def _row_summary(check: CheckResult) -> str:
    """A row's summary: whole, unless it repeats the first clause of one of the row's findings
    (``results.first_clause``), which is cut to ``ROW_CLAUSE`` characters, its ``(+N more)``
    kept."""
    more = _MORE.search(check.summary)
    text, tail = (check.summary[:more.start()], more.group()) if more else (check.summary, "")
    if len(text) <= ROW_CLAUSE or text not in {first_clause(f.message) for f in check.findings}:
        return check.summary
    return text[:ROW_CLAUSE - 3].rsplit(" ", 1)[0] + "..." + tail


def _grouped_skips(rows: list[CheckResult]) -> list[CheckResult]:
    """Checks skipped for one same reason (a failed prerequisite) as one row naming them."""
    grouped: list[CheckResult] = []
    for row in rows:
        last = grouped[-1] if grouped else None
        if last is not None and row.status == last.status == Status.SKIP \
                and row.summary == last.summary:
            grouped[-1] = CheckResult(f"{last.name}, {row.name}", Status.SKIP, 0.0, row.summary)
        else:
            grouped.append(row)
    return grouped


STRENGTH_NOTES = ("GV130",)
"""Notes shown even for a passing case: what its spec's inputs cannot show."""


def _row_needed(check: CheckResult) -> bool:
    """A check row shown for a case that did not pass: what did not pass, and what was
    skipped because of it."""
    if check.status == Status.PASS:
        return False
    return check.status != Status.SKIP or check.summary.startswith("skipped:")


def _needs_detail(case: CaseResult) -> bool:
    return case.status not in (Status.PASS, Status.SKIP, Status.XFAIL)


def _group_label(spec: str | None, target: str, cases: list[CaseResult]) -> str:
    if spec:
        return f"{spec}  {target}"
    return f"{target}  (inferred spec)" if cases and cases[0].inferred else target


def _header(report: Report) -> str:
    v = report.versions
    parts = [f"gradverify {v.get('gradverify', '?')}"]
    if "torch" in v:
        parts.append(f"torch {v['torch']}")
    if "triton" in v:
        parts.append(f"triton {v['triton']}")
    parts += [f"python {v.get('python', '?')}", f"device {report.settings.device}",
              f"seed {report.settings.seed}"]
    return " | ".join(parts)


def _input(info: InputInfo) -> str:
    if info.kind == "tensor":
        shape = "x".join(map(str, info.shape or ())) or "scalar"
        grad = "" if info.requires_grad else ", no grad"
        return f"{info.name} [{shape}] {info.dtype}{grad}"
    return f"{info.name}: {info.kind}"


def lines(report: Report, verbosity: Verbosity = Verbosity.NORMAL,
          width: int | None = None) -> Iterator[Line]:
    return _Writer(verbosity, width or default_width()).lines(report)


def render_plain(report: Report, verbosity: Verbosity = Verbosity.NORMAL, *,
                 width: int | None = None) -> str:
    return "\n".join(line.plain() for line in lines(report, verbosity, width)) + "\n"


class Console:
    """The console report: ``plain`` (CI logs, pipes, files, golden tests, at ``COLUMNS`` or
    100 wide) or ``rich`` (the same lines in colour, at the terminal's width)."""

    reads_verbosity = True

    def __init__(self, *, color: bool) -> None:
        self.color = color

    def render(self, report: Report, verbosity: Verbosity = Verbosity.NORMAL) -> str:
        if not self.color:
            return render_plain(report, verbosity)
        import io
        import shutil

        from rich.console import Console as RichConsole

        width = shutil.get_terminal_size((WIDTH, 24)).columns
        buffer = io.StringIO()
        console = RichConsole(file=buffer, force_terminal=True, highlight=False,
                              soft_wrap=True, width=width)
        for line in lines(report, verbosity, width):
            console.print(line.rich())
        return buffer.getvalue()
