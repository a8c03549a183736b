"""Markdown for ``$GITHUB_STEP_SUMMARY``: a summary table, then the details of what failed."""
from __future__ import annotations

from typing import TYPE_CHECKING

from gradverify.report.interface import Verbosity
from gradverify.report.summary import summary_line
from gradverify.report.text import advice, escaped, said
from gradverify.results import Severity, Status

if TYPE_CHECKING:
    from gradverify.results import Report

_ICON = {Status.PASS: "✅", Status.FAIL: "❌", Status.ERROR: "💥", Status.WARN: "⚠️",
         Status.SKIP: "⏭️", Status.XFAIL: "✔️", Status.XPASS: "❗"}


def _cell(text: str) -> str:
    return escaped(text).replace("|", "\\|")


class Markdown:
    """A summary for ``$GITHUB_STEP_SUMMARY``: one row per case and the details of what did not
    pass, whatever ``-q``/``-v`` say (the page is read after the run, not scrolled past)."""

    reads_verbosity = False

    def render(self, report: Report, verbosity: Verbosity = Verbosity.NORMAL) -> str:
        return _render(report)


def _render(report: Report) -> str:
    lines = ["## gradverify", "", f"**{summary_line(report).plain()}**", ""]
    if report.results:
        lines += ["| target | case | status | checks |", "|---|---|---|---|"]
        for case in report.results:
            bad = [f"{c.name}: {c.status.value}" for c in case.rows
                   if c.status not in (Status.PASS, Status.SKIP)]
            lines.append(f"| `{_cell(case.target)}` | {_cell(case.case)} | "
                         f"{_ICON[case.status]} {case.status.value} | "
                         f"{_cell(', '.join(bad)) or f'{len(case.rows)} ok'} |")
    details = [(case, check, f) for case in report.results for check in case.rows
               if check.status in (Status.FAIL, Status.ERROR, Status.WARN, Status.XPASS)
               for f in check.findings if f.severity != Severity.INFO]
    if details:
        lines += ["", "### Findings", ""]
        for case, check, f in details:
            where = f" — `{f.location}`" if f.location else ""
            lines.append(f"- **{f.code}** `{_cell(case.target)}` {_cell(case.case)} "
                         f"({check.name}){where}: {_cell(said(f))}")
            if hint := advice(f):
                lines.append(f"  - fix: {_cell(hint)} (`gradverify explain {f.code}`)")
    if report.mutants:  # --mutate
        lines += ["", "### Mutation score", "", "| spec | target | killed | not killed |",
                  "|---|---|---|---|"]
        lines += [f"| {_cell(m.spec or '')} | `{_cell(m.target)}` | {m.killed}/{m.total} | "
                  + _cell("; ".join(f"{s.location}: {s.mutation}: {s.why}"
                                    for s in m.survived)) + " |" for m in report.mutants]
    if report.errors:
        lines += ["", "### Errors", ""]
        lines += [f"- **{e.code}** {_cell(e.message)}" for e in report.errors]
    return "\n".join(lines) + "\n"
