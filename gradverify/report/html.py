"""One self-contained HTML page (``--format html``) that opens on what failed: the summary
(counts, the exit status, each failing target linked to its findings), then the findings with
their ``file:line`` and each disagreeing Jacobian block's |analytical - numerical| heatmap as a
PNG in a ``data:`` URI, each with an anchor, then the case table, whose rows that did not pass
link to their findings and whose passing rows are folded (``<details>``). Inline style, no
script, nothing fetched: the file opens anywhere, offline, as a CI artifact. Every user-given
text is escaped."""
from __future__ import annotations

import base64
import html
import re
from typing import TYPE_CHECKING

from gradverify.report import heatmap
from gradverify.report.interface import Verbosity
from gradverify.report.summary import summary_line
from gradverify.report.text import advice, escaped, finding_label, said, score_line
from gradverify.results import Severity, Status

if TYPE_CHECKING:
    from gradverify.results import CaseResult, CheckResult, Finding, JacobianBlock, Report

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: left; }
td.duration { text-align: right; font-variant-numeric: tabular-nums; }
td.pass { color: #1a7f37; } td.fail, td.error { color: #cf222e; font-weight: bold; }
td.warn { color: #9a6700; } td.skip { color: #888; } td.xfail { color: #0969da; }
td.xpass { color: #8250df; }
.finding { margin: 1em 0; padding: 0.5em 1em; border-left: 4px solid #cf222e; }
.finding.warning { border-color: #d4a72c; } .finding.info { border-color: #0969da; }
.where { font-family: monospace; } .hint { color: #555; }
figure { margin: 0.5em 0; } img.heatmap { image-rendering: pixelated; border: 1px solid #ccc; }
pre { background: #f6f8fa; padding: 0.5em; overflow-x: auto; }
p.exit { font-weight: bold; } ul.failing { margin-top: 0; }
details { margin: 0.5em 0; } summary { cursor: pointer; color: #555; }
"""

_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
"""Characters HTML does not allow in text (line breaks and tabs stay)."""


def _h(text: object) -> str:
    """One line of user-given text, safe in HTML: control characters as escapes, then <>&"'."""
    return html.escape(escaped(str(text)))


def _pre(text: str) -> str:
    """Lines of user-given text (a spec case, a traceback) for a ``<pre>``."""
    return html.escape(_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text))


class Html:
    """The whole report, whatever ``-q``/``-v`` say: the page is read after the run, and it
    shows the numbers as pictures, not as text to scroll past."""

    reads_verbosity = False

    def render(self, report: Report, verbosity: Verbosity = Verbosity.NORMAL) -> str:
        return render(report)


def render(report: Report) -> str:
    anchors = _anchors(report.results)
    parts = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
             "<title>gradverify report</title>", f"<style>{_STYLE}</style>", "</head>",
             "<body>", "<h1>gradverify</h1>",
             f'<p class="summary">{_h(summary_line(report).plain())}</p>',
             f'<p class="exit">exit status {int(report.exit_code)}</p>']
    parts += _failing(report.results, anchors)
    parts += _findings(report.results, anchors)
    parts += _case_table(report.results, anchors)
    if report.errors:
        parts += ["<h2>Errors</h2>", "<ul>"]
        parts += [f'<li class="error-entry">{_where(e.location)}<b>{_h(e.code)}</b> '
                  f"{_h(e.message)}</li>" for e in report.errors]
        parts.append("</ul>")
    if report.mutants:  # --mutate
        parts += ["<h2>Mutation score</h2>", "<ul>"]
        for score in report.mutants:
            survivors = "".join(f"<li>{_where(m.location)}{_h(m.mutation)}: {_h(m.why)}</li>"
                                for m in score.survived)
            parts.append(f"<li>{_h(score_line(score))}<ul>{survivors}</ul></li>")
        parts.append("</ul>")
    if report.notes:
        parts += ["<h2>Notes</h2>", "<ul>"] + [f"<li>{_h(n)}</li>" for n in report.notes]
        parts.append("</ul>")
    parts += ["</body>", "</html>"]
    return "\n".join(parts) + "\n"


def _where(location: object) -> str:
    return f'<span class="where">{_h(location)}</span>: ' if location else ""


def _shown(check: CheckResult) -> list[Finding]:
    """The findings the page shows of a check: those of a check that did not pass, and the
    warnings of one that did."""
    return [f for f in check.findings
            if f.severity != Severity.INFO or check.status not in (Status.PASS, Status.SKIP)]


def _anchors(cases: tuple[CaseResult, ...]) -> dict[tuple[int, str], str]:
    """The anchor of each (case, check) whose findings the page shows: ``f1``, ``f2``..."""
    found: dict[tuple[int, str], str] = {}
    for i, case in enumerate(cases):
        for check in case.rows:
            if _shown(check):
                found[(i, check.name)] = f"f{len(found) + 1}"
    return found


def _failing(cases: tuple[CaseResult, ...], anchors: dict[tuple[int, str], str]) -> list[str]:
    """Each case that failed or erred, with links to its findings."""
    items = []
    for i, case in enumerate(cases):
        bad = [c for c in case.rows if c.status in (Status.FAIL, Status.ERROR)]
        if not bad:
            continue
        links = ", ".join(f'<a href="#{anchors[(i, c.name)]}">{_h(c.name)}</a>'
                          if (i, c.name) in anchors else _h(c.name) for c in bad)
        items.append(f"<li><b>{_h(case.target)}</b> :: {_h(case.case)}: {links}</li>")
    return ["<h2>Failing</h2>", '<ul class="failing">', *items, "</ul>"] if items else []


def _case_table(cases: tuple[CaseResult, ...],
                anchors: dict[tuple[int, str], str]) -> list[str]:
    """One row per check of each case: target, spec, case, check, status, duration; the rows
    that did not pass first, linked to their findings, the passing ones folded."""
    if not cases:
        return []
    head = ('<table class="cases">', "<thead><tr><th>target</th><th>spec</th><th>case</th>"
            "<th>check</th><th>status</th><th>duration</th></tr></thead>", "<tbody>")
    other: list[str] = []
    passed: list[str] = []
    for i, case in enumerate(cases):
        for check in case.rows:
            status = check.status.value
            anchor = anchors.get((i, check.name))
            name = f'<a href="#{anchor}">{_h(check.name)}</a>' if anchor else _h(check.name)
            row = (f'<tr class="{status}"><td>{_h(case.target)}</td>'
                   f"<td>{_h(case.spec or '')}</td><td>{_h(case.case)}</td>"
                   f"<td>{name}</td>"
                   f'<td class="{status}">{status}</td>'
                   f'<td class="duration">{check.duration_s:.2f}s</td></tr>')
            (passed if check.status == Status.PASS else other).append(row)
    rows = ["<h2>Cases</h2>"]
    if other:
        rows += [*head, *other, "</tbody>", "</table>"]
    if passed:
        rows += [f"<details><summary>{len(passed)} passing "
                 f"check{'s' if len(passed) != 1 else ''}</summary>", *head, *passed,
                 "</tbody>", "</table>", "</details>"]
    return rows


def _findings(cases: tuple[CaseResult, ...],
              anchors: dict[tuple[int, str], str]) -> list[str]:
    """The findings of every check that did not pass (and the warnings of those that did),
    each check's under its anchor."""
    parts: list[str] = []
    for i, case in enumerate(cases):
        for check in case.rows:
            for k, finding in enumerate(_shown(check)):
                parts += _finding(case, check, finding,
                                  anchors[(i, check.name)] if k == 0 else None)
    return ["<h2>Findings</h2>", *parts] if parts else []


def _finding(case: CaseResult, check: CheckResult, finding: Finding,
             anchor: str | None) -> list[str]:
    said_as = finding_label(finding, expected=check.status == Status.XFAIL)
    at = f' id="{anchor}"' if anchor else ""
    parts = [f'<div class="finding {finding.severity.value}"{at}>',
             f"<p><b>{_h(case.target)}</b> :: {_h(case.case)} ({_h(check.name)})</p>",
             f"<p>{_where(finding.location)}{_h(said_as)}: {_h(said(finding))} "
             f"[{_h(finding.code)} {_h(check.name)}]</p>"]
    if hint := advice(finding):
        parts.append(f'<p class="hint">note: {_h(hint)} '
                     f"(<code>gradverify explain {_h(finding.code)}</code>)</p>")
    parts += [_figure(block) for block in finding.evidence.blocks if block.analytical]
    if finding.smallest is not None:
        parts.append(f"<p>smallest failing case:</p><pre>{_pre(finding.smallest.case)}</pre>")
    if finding.evidence.traceback:
        parts.append(f'<pre class="traceback">{_pre(finding.evidence.traceback)}</pre>')
    parts.append("</div>")
    return parts


def _figure(block: JacobianBlock) -> str:
    """The block's heatmap as an ``<img>`` whose source is the PNG itself."""
    data = base64.b64encode(heatmap.png(block)).decode("ascii")
    rows, cols = len(block.analytical), len(block.analytical[0])
    side = heatmap.side(block)
    rows_are = "a random projection of the output" if block.projected else \
        f"elements of {block.output}"
    cut = f"; the {rows} rows and {cols} columns with the largest differences" \
        if block.truncated else ""
    caption = (f"|analytical - numerical| of {block.output} with respect to '{block.input}' "
               f"(rows: {rows_are}; columns: elements of '{block.input}'{cut}); "
               f"largest {max(max(r) for r in heatmap.differences(block)):.3g}")
    return (f'<figure><img class="heatmap" width="{cols * side}" height="{rows * side}" '
            f'alt="{_h(caption)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{_h(caption)}</figcaption></figure>")
