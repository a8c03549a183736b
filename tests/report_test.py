"""The report model: exit codes from one place, counts, the closing line, golden output."""
from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from gradverify.report import Verbosity
from gradverify.report.console import render_plain
from gradverify.report.summary import summary_line
from gradverify.results import (
    CaseResult,
    CheckResult,
    ErrorEntry,
    ExitCode,
    Report,
    ReportSettings,
    Status,
)

GOLDEN = Path(__file__).parent / "golden"


def _report(*statuses: Status, errors=(), strict=False) -> Report:
    checks = tuple(CheckResult(f"c{i}", s, 0.0, "") for i, s in enumerate(statuses))
    results = (CaseResult("m:F", None, "case", Status.PASS, 0.0, checks=checks),) if checks else ()
    return Report(ReportSettings(strict=strict), results, tuple(errors), duration_s=1.5)


@pytest.mark.parametrize(("statuses", "errors", "strict", "code"), [
    ((Status.PASS,), (), False, ExitCode.OK),
    ((Status.PASS, Status.WARN, Status.SKIP, Status.XFAIL, Status.XPASS), (), False, ExitCode.OK),
    ((Status.PASS, Status.WARN), (), True, ExitCode.FAILED),
    ((Status.XPASS,), (), True, ExitCode.FAILED),
    ((Status.FAIL,), (), False, ExitCode.FAILED),
    ((Status.ERROR,), (), False, ExitCode.FAILED),
    ((Status.FAIL,), (ErrorEntry(None, "s.yaml", "GV002", "bad"),), False, ExitCode.INPUT),
    ((Status.FAIL,), (ErrorEntry(None, None, "GV002", "bad"),
                      ErrorEntry(None, None, "GV011", "bug", internal=True)), False,
     ExitCode.INTERNAL),
    ((), (), False, ExitCode.NOTHING_SELECTED),
    ((), (ErrorEntry(None, "s.yaml", "GV001", "bad"),), False, ExitCode.INPUT),
])
def test_exit_code(statuses, errors, strict, code):
    assert _report(*statuses, errors=errors, strict=strict).exit_code == code


def test_summary_line_reads_like_pytest():
    report = _report(Status.PASS, Status.PASS, Status.FAIL, Status.WARN, Status.SKIP,
                     Status.XFAIL)
    assert summary_line(report).plain() == \
        "2 passed, 1 failed, 1 warning, 1 skipped, 1 xfailed in 1.50s"
    assert summary_line(_report()).plain() == "no checks ran in 1.50s"


def test_raise_for_failures_is_an_assertion_with_the_report_the_api_gave_its_text():
    from gradverify.report.registry import plain_text

    with pytest.raises(AssertionError, match="1 failed"):
        plain_text(_report(Status.FAIL)).raise_for_failures()
    plain_text(_report(Status.PASS)).raise_for_failures()
    with pytest.raises(AssertionError) as bare:  # the model alone: its failing rows
        _report(Status.FAIL).raise_for_failures()
    assert str(bare.value) == "m:F :: case: c0 fail"


def _mask(text: str) -> str:
    text = re.sub(r"\d+\.\d\ds\b", "X.XXs", text)
    return re.sub(r"torch \S+ \| python \S+", "torch X | python X", text)


def test_golden_console_report(tmp_path):
    """The plain report of specs/broken: fixed width, no colour, seed 0, durations masked.
    Regenerate with GRADVERIFY_UPDATE_GOLDEN=1 after an intended change, and review the diff.
    The same run's verdicts are those the compatibility job expects on every torch."""
    report = tmp_path / "broken.json"
    result = subprocess.run([sys.executable, "-m", "gradverify", "check", "specs/broken",
                             "--format", "plain", "--json", str(report)], capture_output=True,
                            text=True, cwd=ROOT, env={**os.environ, "COLUMNS": "100"})
    assert result.returncode == 1, result.stderr
    actual = _mask(result.stdout)
    golden = GOLDEN / "broken.txt"
    verdicts = subprocess.run([sys.executable, ".ci/verdicts.py", "show", str(report)],
                              capture_output=True, text=True, cwd=ROOT).stdout
    expected = ROOT / ".ci" / "broken-verdicts.txt"
    if os.environ.get("GRADVERIFY_UPDATE_GOLDEN"):
        golden.write_text(actual)
        expected.write_text(verdicts)
    assert actual == golden.read_text()
    assert verdicts == expected.read_text() and len(verdicts.splitlines()) >= 6


def test_render_plain_has_no_escape_codes():
    assert "\x1b[" not in render_plain(_report(Status.FAIL))


# ----------------------------------------------------------------------------- the console


def _case(target: str, case: str, status: Status, summary: str = "ok") -> CaseResult:
    from gradverify.results import Finding, Severity

    findings = (Finding("GV121", Severity.ERROR, "gradient for 'x' is wrong: sign flipped"),) \
        if status == Status.FAIL else ()
    checks = (CheckResult("contract", Status.PASS, 0.0, "fine"),
              CheckResult("gradcheck", status, 0.0, summary, findings),
              CheckResult("vmap", Status.SKIP, 0.0, "vmap unsupported"))
    return CaseResult(target, "specs/f.yaml", case, status, 0.0, checks=checks)


def test_a_location_wider_than_the_report_keeps_its_label_once():
    """``file:line: error:`` longer than the width: on a line of its own, the message after
    it, the label said once."""
    from gradverify.results import Finding, Location, Severity

    where = Location("/tmp/" + "deep/" * 22 + "linear.py", 23)
    finding = Finding("GV101", Severity.ERROR, "backward raised ValueError: not enough values",
                      location=where)
    checks = (CheckResult("contract", Status.FAIL, 0.0, "raised", (finding,)),)
    report = Report(ReportSettings(), (CaseResult("m:F", "f.yaml", "a", Status.FAIL, 0.0,
                                                  checks=checks),))
    lines = render_plain(report, width=100).splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(str(where.file)))
    assert lines[at] == f"{where.file}:23: error:"
    assert lines[at + 1] == "    backward raised ValueError: not enough values  [GV101 contract]"
    assert sum(line.count("error:") for line in lines[at:at + 3]) == 1


def test_concise_by_default_details_for_what_did_not_pass():
    report = Report(ReportSettings(), (_case("m:Good", "a", Status.PASS),
                                 _case("m:Good", "b", Status.PASS),
                                 _case("m:Bad", "a", Status.FAIL, "gradient for 'x' is wrong")))
    text = render_plain(report)
    assert re.search(r"^specs/f.yaml  m:Good +\.\.$", text, re.M)
    assert re.search(r"^specs/f.yaml  m:Bad +F$", text, re.M)
    assert "m:Good :: a" not in text  # passing cases: one character, no table
    assert "m:Bad :: a" in text and "FAIL   gradcheck" in text and "[GV121 gradcheck]" in text
    assert "PASS   contract" not in text and "(1 other check passed, 1 skipped" in text
    verbose = render_plain(report, Verbosity.VERBOSE)
    assert "m:Good :: a" in verbose and "PASS   contract" in verbose
    quiet = render_plain(report, Verbosity.QUIET)
    assert "specs/f.yaml  m:Good" not in quiet and "FAIL   gradcheck" not in quiet
    assert "[GV121 gradcheck]" in quiet


def test_lines_wrap_at_word_boundaries_to_the_width():
    long = "the gradient " * 30 + "ends here"
    report = Report(ReportSettings(), (_case("m:Bad", "a", Status.FAIL, long),))
    for width in (80, 120):
        text = render_plain(report, width=width)
        assert all(len(line) <= width for line in text.splitlines() if not line.startswith("    |"))
        assert "ends here" in text and "..." not in text
        words = " ".join(text.split())
        assert ("the gradient " * 30).strip() in words


def test_strict_summary_says_warnings_fail():
    report = _report(Status.PASS, Status.WARN, strict=True)
    assert "(--strict: warnings and xpasses fail the run)" in summary_line(report).plain()
    assert "--strict" not in summary_line(_report(Status.PASS, Status.WARN)).plain()


def test_a_row_that_repeats_its_finding_is_cut_and_the_finding_says_it_whole():
    """The run keeps a row's summary whole (the finding's first clause, JSON has it all); the
    console cuts it in the row, where the finding below says the rest."""
    from gradverify.results import Finding, Severity, first_clause

    message = "gradient for 'x' is wrong: " + "much too large " * 12 + "at the end; and more"
    finding = Finding("GV121", Severity.ERROR, message)
    row = CheckResult("gradcheck", Status.FAIL, 0.0, first_clause(message) + " (+1 more)",
                      (finding,))
    case = CaseResult("m:Bad", "specs/f.yaml", "a", Status.FAIL, 0.0, checks=(row,))
    text = render_plain(Report(ReportSettings(), (case,)), width=200)
    (row_line,) = [line for line in text.splitlines() if "FAIL   gradcheck" in line]
    assert row_line.endswith("... (+1 more)") and "at the end" not in row_line
    assert "at the end; and more" in text  # the finding, whole
    assert row.summary.endswith("at the end (+1 more)")


def test_a_consequence_keeps_the_guess_that_may_cause_it_before_its_advice():
    """A finding's own words stay its own; every format says what it follows from and, first,
    the guess of the spec's that may cause it (``suspect``), through one pair of helpers."""
    from gradverify.report.text import advice, said
    from gradverify.results import Declaration, Finding, Severity

    plain = Finding("GV201", Severity.ERROR, "backward returned 1 gradient", hint="return 2")
    assert said(plain) == plain.message and advice(plain) == "return 2"
    guessed = dataclasses.replace(plain, suspect="'x' was guessed by gradverify init")
    assert advice(guessed) == "'x' was guessed by gradverify init; if it is right: return 2"
    follows = guessed.following("GV222 (mutation)")
    assert follows.message == plain.message and follows.hint == plain.hint
    assert said(follows) == "backward returned 1 gradient; a consequence of GV222 (mutation)"
    assert advice(follows) == ("'x' was guessed by gradverify init; if it is right: "
                               "fix GV222 (mutation) first: this follows from it")
    declared = plain.following("GV121 (gradcheck)", Declaration("gradcheck", "a surrogate"))
    assert said(declared).endswith("the spec declaring gradcheck an expected failure "
                                   "(a surrogate)")
    assert advice(declared).startswith("the spec says backward is not the gradient")
