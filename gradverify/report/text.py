"""The one-line forms every text format shares: a finding as mypy writes a diagnostic
(``file:line: error: message  [GV121 gradcheck]``) and its note, and a case's status character.
"""
from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence

from gradverify.results import Finding, Severity, Status
from gradverify.scores import MutantLine, MutationScore

_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")
"""Control characters and line breaks (the tab excepted)."""
_NAMED = {"\n": "\\n", "\r": "\\r"}


def escaped(text: str) -> str:
    """``text`` with control characters and line breaks written as escapes (``\\n``,
    ``\\x1b``): a user-given name (a case, a target, a spec path) never starts a new line of a
    CI log, where a line beginning ``::error`` is a workflow command, nor moves the cursor."""
    return _CONTROL.sub(lambda m: _NAMED.get(m.group()) or (
        f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}"),
        text)


def said(finding: Finding) -> str:
    """A finding's message as every format says it: a consequence says what it follows from
    (``Finding.consequence_of``)."""
    if finding.consequence_of is None:
        return finding.message
    if finding.declared is not None:
        return (f"{finding.message}; a consequence of the spec declaring "
                f"{finding.declared.check} an expected failure ({finding.declared.reason})")
    return f"{finding.message}; a consequence of {finding.consequence_of}"


def advice(finding: Finding) -> str | None:
    """A finding's hint as every format says it: a consequence points at what it follows
    from instead of advice of its own; a guess that may cause it comes first."""
    hint = finding.hint
    if finding.declared is not None:
        hint = (f"the spec says backward is not the gradient (expect: "
                f"{finding.declared.check}); if it should return one for {finding.input!r}, "
                "remove that declaration")
    elif finding.consequence_of is not None:
        hint = f"fix {finding.consequence_of} first: this follows from it"
    if finding.suspect is None:
        return hint
    return f"{finding.suspect}; if it is right: {hint}" if hint else finding.suspect


LABEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}

CHAR = {Status.PASS: ".", Status.WARN: "W", Status.FAIL: "F", Status.ERROR: "E",
        Status.SKIP: "s", Status.XFAIL: "x", Status.XPASS: "X"}
"""A case's status in the one-line-per-target overview, as pytest marks tests."""


def finding_label(finding: Finding, *, expected: bool = False) -> str:
    """``error``, ``warning``, ``note``; ``expected``: an error the spec declared (``expect:``)
    is an "expected failure"."""
    if expected and finding.severity == Severity.ERROR:
        return "expected failure"
    return LABEL[finding.severity]


def finding_line(finding: Finding, check: str | None = None, *, expected: bool = False) -> str:
    """``file:line: error: message  [GVnnn check]``; ``expected``: an error the spec declared
    (``expect:``), labelled "expected failure"."""
    where = f"{finding.location}: " if finding.location else ""
    tag = f"{finding.code} {check}" if check else finding.code
    return escaped(f"{where}{finding_label(finding, expected=expected)}: {said(finding)}  [{tag}]")


def hint_line(finding: Finding) -> str | None:
    hint = advice(finding)
    return escaped(f"note: {hint}") if hint else None


def finding_text(finding: Finding, check: str | None = None, *, expected: bool = False,
                 explain: bool = False) -> str:
    """The finding line and, indented below it, its note (and, with ``explain``, the command
    that explains its code): what the JUnit XML and the pytest plugin show of a finding."""
    lines = [finding_line(finding, check, expected=expected)]
    if (note := hint_line(finding)) is not None:
        lines.append(f"  {note}")
        if explain:
            lines.append(f"  explain: gradverify explain {finding.code}")
    lines += smallest_lines(finding)
    return "\n".join(lines)


def jacobian_cell(x: float) -> str:
    """A Jacobian entry in 9 characters: fixed point where that shows it, else scientific
    (an entry of 1e154, a blown-up finite difference, stays one column wide)."""
    return f"{x:9.4f}" if abs(x) < 1e4 or x != x else f"{x:9.2e}"


def smallest_lines(finding: Finding) -> list[str]:
    """The finding's smallest failing case as a spec case, indented under it (none when it
    has none); and, where ``--repro`` wrote no script for it, why."""
    if finding.smallest is None:
        return []
    lines = ["  smallest failing case:"]
    lines += [f"    {escaped(line)}" for line in finding.smallest.case.splitlines()]
    if finding.smallest.no_repro:
        lines.append(f"  {escaped(finding.smallest.no_repro)}")
    return lines


def score_line(score: MutationScore) -> str:
    """``specs/linear.yaml mod:Linear: 11/12 mutants killed (1 equivalent)``."""
    where = f"{score.spec} " if score.spec else ""
    apart = [f"{len(score.equivalent)} equivalent" if score.equivalent else "",
             f"{len(score.unexecuted)} on lines no case runs" if score.unexecuted else "",
             score.note or ""]
    extra = "; ".join(a for a in apart if a)
    return f"{where}{score.target}: {score.killed}/{score.total} mutants killed" + (
        f" ({extra})" if extra else "")


def mutant_line(kind: str, mutant: MutantLine) -> str:
    """``file:line: survived: `grad * w` -> `grad`: every case has w = 1; ...``."""
    where = f"{mutant.location}: " if mutant.location else ""
    return f"{where}{kind}: {mutant.mutation}: {mutant.why}"


def score_lines(score: MutationScore, verbose: bool = False, width: int | None = None
                ) -> list[str]:
    """A score, then its survivors and unexecuted mutants (equivalent ones with ``verbose``),
    indented; names escaped, then wrapped to ``width`` (None: not wrapped)."""
    shown = [("survived", score.survived), ("unexecuted", score.unexecuted)]
    if verbose:
        shown.append(("equivalent", score.equivalent))
    items = [(escaped(score_line(score)), "", "    ")] + [
        (escaped(mutant_line(kind, m)), "  ", "      ") for kind, found in shown for m in found]
    if width is None:
        return [first + text for text, first, _ in items]
    return [line for text, first, rest in items
            for line in textwrap.wrap(text, width, initial_indent=first, subsequent_indent=rest,
                                      break_long_words=False, break_on_hyphens=False)]


def mutation_lines(scores: Sequence[MutationScore], verbose: bool, width: int
                   ) -> list[tuple[str, str]]:
    """The console's ``mutation score`` section, as (text, style): a heading, then each
    score's lines (``score_lines``), the score itself highlighted when a mutant survived."""
    lines = [("", ""), ("mutation score", "bold underline")] if scores else []
    for score in scores:
        for k, text in enumerate(score_lines(score, verbose, width)):
            lines.append((text, "yellow" if k == 0 and score.survived else ""))
    return lines
