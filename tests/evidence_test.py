"""A finding's evidence (``results.Evidence``): checks hand over the Jacobian blocks and the
traceback whatever the verbosity; the renderers draw the heatmap and decide what to cut."""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from conftest import run_cli
from gradverify.report import RENDERERS, Verbosity, heatmap
from gradverify.results import (
    EVIDENCE_CAP,
    CaseResult,
    CheckResult,
    Evidence,
    Finding,
    JacobianBlock,
    Location,
    Report,
    ReportSettings,
    Severity,
    Status,
)

PACKAGE = Path(__file__).resolve().parent.parent / "gradverify"


@pytest.fixture
def wrong(project):
    """Two Functions: a sign flip on 4 elements, and one wrong entry (element 37 of 40)."""
    project.write("wrongops.py", """
        import torch
        from torch.autograd import Function

        class Flip(Function):
            @staticmethod
            def forward(ctx, x):
                return x * 3

            @staticmethod
            def backward(ctx, grad):
                return -3 * grad

        class OneOff(Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, grad):
                g = 2 * grad.clone()
                g[37] = 5 * grad[37]
                return g
    """)
    project.write("specs/flip.yaml", "target: wrongops:Flip\n"
                                     "cases:\n  - args: {x: {shape: [4]}}\n")
    project.write("specs/oneoff.yaml", "target: wrongops:OneOff\n"
                                       "cases:\n  - args: {x: {shape: [40]}}\n")
    return project


def _findings(report: dict) -> list[dict]:
    return [f for case in report["results"] for check in case["checks"]
            for f in check["findings"]]


def _json(*args: str) -> dict:
    """The JSON report of ``gradverify check --only gradcheck ARGS``, durations zeroed."""
    result = run_cli("check", "--only", "gradcheck", "--format", "json", *args)
    assert result.code == 1, result.output
    report = json.loads(result.stdout)
    for case in report["results"]:  # durations differ between runs
        case["duration_s"] = 0
        for check in case["checks"]:
            check["duration_s"] = 0
    report["summary"]["duration_s"] = 0
    return report


def test_the_json_holds_the_blocks_and_does_not_change_with_verbose(wrong):
    """Before, ``-v`` added ``analytical_block``/``numerical_block`` to the JSON's data and a
    plain run said only ``blocks_with_verbose``; now both runs give the same evidence."""
    plain, verbose = _json("specs/flip.yaml"), _json("-v", "specs/flip.yaml")
    assert plain == verbose and plain["schema"] == 2
    (finding,) = _findings(plain)
    assert not {"heatmap", "analytical_block", "blocks_with_verbose"} & set(finding["data"])
    (block,) = finding["evidence"]["blocks"]
    assert (block["output"], block["input"], block["truncated"]) == ("output 0", "x", False)
    assert block["rows"] == block["cols"] == [[0], [1], [2], [3]]
    assert block["analytical"] == [[-3.0 if r == c else 0.0 for c in range(4)] for r in range(4)]
    assert [v for row in block["numerical"] for v in row] == pytest.approx(
        [3.0 * (r == c) for r in range(4) for c in range(4)])
    assert finding["evidence"]["traceback"] is None


def test_a_large_block_keeps_its_worst_rows_and_columns_and_says_truncated(wrong):
    (finding,) = _findings(_json("specs/oneoff.yaml"))
    (block,) = finding["evidence"]["blocks"]
    assert block["truncated"] is True
    assert len(block["rows"]) == len(block["cols"]) == EVIDENCE_CAP
    assert [37] in block["rows"] and [37] in block["cols"]  # the wrong entry is kept
    assert block["rows"] == sorted(block["rows"])  # in order
    r, c = block["rows"].index([37]), block["cols"].index([37])
    assert block["analytical"][r][c] == 5.0 and block["numerical"][r][c] == pytest.approx(2.0)


def _plain(*args: str) -> str:
    return run_cli("check", "--only", "gradcheck", "--format", "plain", *args).stdout


def test_the_console_draws_the_heatmap_and_cuts_the_numbers_without_v(wrong):
    plain = _plain("specs/flip.yaml")
    assert "    |@   |\n    | @  |\n    |  @ |\n    |   @|\n" in plain
    assert "(-v shows the analytical and numerical Jacobian blocks)" in plain
    assert "analytical block" not in plain
    verbose = _plain("-v", "specs/flip.yaml")
    assert "  analytical block:\n      -3.0000" in verbose and "  numerical block:" in verbose
    assert "-v shows the analytical" not in verbose
    oneoff = _plain("specs/oneoff.yaml")
    assert f"(the {EVIDENCE_CAP} rows and columns with the largest differences)" in oneoff


def test_checks_never_see_the_verbosity():
    from gradverify.case.context import CheckContext
    from gradverify.options import RunOptions

    assert "verbose" not in {f.name for f in dataclasses.fields(CheckContext)}
    assert "verbose" not in {f.name for f in dataclasses.fields(RunOptions)}
    said = [path.name for path in (PACKAGE / "checks").glob("*.py")
            if re.search(r"\bverbos", path.read_text())]
    assert said == []


def _block(errors: list[list[float]]) -> JacobianBlock:
    """A block whose numerical side is zero: its differences are ``errors``."""
    return JacobianBlock("output 0", "x", tuple(tuple(r) for r in errors),
                         tuple(tuple(0.0 for _ in r) for r in errors),
                         tuple((i,) for i in range(len(errors))),
                         tuple((j,) for j in range(len(errors[0]))))


@pytest.mark.parametrize(("errors", "expected"), [
    pytest.param([[1.0, 0.0], [0.0, 0.5]], ["@ ", " ="], id="scaled-to-the-largest"),
    pytest.param([[float("nan"), 0.0], [0.0, 2.0]], ["@ ", " @"], id="nan-is-the-worst"),
    pytest.param([[0.0, 0.0]], ["  "], id="no-difference"),
    pytest.param([[1.0] + [0.0] * 63] + [[0.0] * 64] * 9, ["@" + " " * 31] + [" " * 32] * 4,
                 id="pooled-by-cells-of-2x2"),
])
def test_the_text_heatmap_is_drawn_from_the_evidence_numbers(errors, expected):
    assert heatmap.text(_block(errors)) == expected


def _report(evidence: Evidence) -> Report:
    finding = Finding("GV011", Severity.ERROR, "internal error", location=Location("f.py", 3),
                      evidence=evidence)
    check = CheckResult("gradcheck", Status.ERROR, 0.1, "internal error", (finding,))
    case = CaseResult("m:F", "s.yaml", "c", Status.ERROR, 0.1, checks=(check,))
    return Report(ReportSettings(), (case,))


def test_a_traceback_is_evidence_shown_with_v_only():
    report = _report(Evidence(traceback="Traceback (most recent call last):\n  boom\n"))
    assert "boom" not in RENDERERS["plain"].render(report)
    assert "    Traceback (most recent call last):\n      boom" in \
        RENDERERS["plain"].render(report, Verbosity.VERBOSE)
    (finding,) = _findings(json.loads(RENDERERS["json"].render(report)))
    assert finding["evidence"] == {"blocks": [], "traceback": report.results[0].rows[0]
                                   .findings[0].evidence.traceback}


def test_an_internal_error_carries_its_traceback_as_evidence(wrong, monkeypatch):
    """A bug of ours while making a case's inputs (GV011): the traceback is the finding's
    evidence (it was a string in ``data``), and the run's error entry is made from it."""
    from gradverify.case.inputs import InputMaker

    def broken(self, role="double"):
        raise ZeroDivisionError("planted")

    monkeypatch.setattr(InputMaker, "args", broken)
    result = run_cli("check", "--format", "json", "specs/flip.yaml")
    assert result.code == 4, result.output
    report = json.loads(result.stdout)
    (finding,) = _findings(report)
    assert finding["code"] == "GV011" and "traceback" not in finding["data"]
    assert "ZeroDivisionError: planted" in finding["evidence"]["traceback"]
    (error,) = report["errors"]
    assert error["internal"] and error["message"] == finding["evidence"]["traceback"]
