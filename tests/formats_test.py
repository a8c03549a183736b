"""CI report formats: JUnit XML read by a parser, markdown and GitHub annotations by eye."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from conftest import run_cli
from gradverify.report import RENDERERS, Verbosity
from gradverify.report.text import finding_text
from gradverify.results import (
    CaseResult,
    CheckResult,
    ErrorEntry,
    Finding,
    Location,
    Report,
    ReportSettings,
    Severity,
    Smallest,
    Status,
)


def _report() -> Report:
    bad = Finding("GV121", Severity.ERROR, "gradient for 'x' is wrong: 50%, a, b",
                  input="x", hint="fix it\nnow", location=Location("pkg/ops.py", 42),
                  smallest=Smallest("- name: basic-smallest\n  dims: {N: 1}", "basic-smallest",
                                    (("x", (1,)),), 4, no_repro="no bare-torch repro: why"))
    warn = Finding("GV204", Severity.WARNING, "wasted work", location=Location("pkg/ops.py", 40))
    checks = (CheckResult("contract", Status.PASS, 0.1, "ok"),
              CheckResult("gradcheck", Status.FAIL, 0.2, "mismatch", (bad,)),
              CheckResult("gradgradcheck", Status.SKIP, 0.0, "skipped: gradcheck failed"),
              CheckResult("needs_input_grad", Status.WARN, 0.1, "warned", (warn,)),
              CheckResult("layout", Status.ERROR, 0.0, "crashed",
                          (Finding("GV010", Severity.ERROR, "died"),)),
              CheckResult("lint", Status.XFAIL, 0.0, "x", (bad,), expect="known"))
    case = CaseResult("pkg.ops:F", "specs/f.yaml", "basic[N=1]", Status.FAIL, 0.4, checks=checks)
    error = ErrorEntry(None, "specs/bad.yaml", "GV002", "specs/bad.yaml:3: cases[0]: bad",
                       location=Location("specs/bad.yaml", 3))
    return Report(ReportSettings(), (case,), (error,), duration_s=1.0)


def test_junit_is_valid_and_counts():
    root = ET.fromstring(RENDERERS["junit"].render(_report()))
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors"), root.get("skipped")) \
        == ("7", "1", "2", "2")
    suite = root.find("testsuite[@name='pkg.ops:F']")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert set(cases) == {"basic[N=1]::" + n for n in ("contract", "gradcheck", "gradgradcheck",
                                                        "needs_input_grad", "layout", "lint")}
    failure = cases["basic[N=1]::gradcheck"].find("failure")
    assert failure.get("type") == "GV121" and "pkg/ops.py:42" in failure.text
    assert "  smallest failing case:\n    - name: basic-smallest\n      dims: {N: 1}\n" \
        "  no bare-torch repro: why" in failure.text
    smallest = Smallest('- name: "a\x1b[2J"', "a", (), 1, no_repro="why\x07")
    text = finding_text(Finding("GV121", Severity.ERROR, "m", smallest=smallest), "gradcheck")
    assert "\x1b" not in text and "\x07" not in text and "\\x1b[2J" in text
    assert cases["basic[N=1]::layout"].find("error") is not None
    assert cases["basic[N=1]::lint"].find("skipped").get("message") == "expected failure: known"
    assert "wasted work" in cases["basic[N=1]::needs_input_grad"].find("system-out").text
    assert root.find("testsuite[@name='gradverify']/testcase/error").get("type") == "GV002"


def test_github_annotations_escape_and_point_at_source():
    lines = RENDERERS["github"].render(_report()).splitlines()
    assert lines[0] == ("::error file=pkg/ops.py,line=42,title=GV121 gradcheck::pkg.ops:F "
                        "[basic[N=1]] gradcheck: gradient for 'x' is wrong: 50%25, a, b%0Afix: "
                        "fix it%0Anow (gradverify explain GV121)")
    assert lines[1].startswith("::warning file=pkg/ops.py,line=40,title=GV204 needs_input_grad::")
    assert any(line.startswith("::error file=specs/bad.yaml,line=3,title=GV002::")
               for line in lines)
    assert lines[-1].startswith("1 passed, 1 failed, 1 warning, 1 skipped, 1 xfailed, 2 errors")


def test_markdown_summary():
    text = RENDERERS["markdown"].render(_report())
    assert text.startswith("## gradverify\n")
    assert "| `pkg.ops:F` | basic[N=1] | ❌ fail |" in text
    assert "**GV121**" in text and "`gradverify explain GV121`" in text
    assert "### Errors" in text


@pytest.fixture
def broken(project):
    project.write("ops.py", """
        import torch
        from torch.autograd import Function

        class Neg(Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, grad):
                return -grad * 2
    """)
    project.write("specs/neg.yaml", "target: ops:Neg\ncases:\n  - args: {x: {shape: [3]}}\n")
    return project


@pytest.mark.parametrize("fmt", ["junit", "markdown", "github", "json", "plain", "html"])
def test_every_format_from_the_cli(broken, fmt):
    result = run_cli("check", "--format", fmt)
    assert result.code == 1 and "GV121" in result.stdout


def test_several_reports_in_one_run(broken):
    result = run_cli("check", "--junit-xml", "out/junit.xml", "--json", "out/r.json",
                     "--format", "markdown", "--output", "out/summary.md")
    assert result.code == 1
    assert ET.parse(broken.root / "out/junit.xml").getroot().get("failures") == "1"
    assert (broken.root / "out/summary.md").read_text().startswith("## gradverify")
    assert "failed" in result.stdout   # the console still gets the report


def test_plain_report_has_a_fixed_width(broken):
    result = run_cli("check", "--format", "plain")
    assert max(len(line) for line in result.stdout.splitlines()) <= 100


def test_markdown_status_has_one_word():
    check = CheckResult("gradcheck", Status.XFAIL, 0.0, "surrogate", expect="by design")
    report = Report(ReportSettings(), (CaseResult("m:F", None, "c", Status.XFAIL, 0.0,
                                            checks=(check,)),))
    row = next(line for line in RENDERERS["markdown"].render(report).splitlines()
               if "`m:F`" in line)
    assert "| ✔️ xfail |" in row and "xfail xfail" not in row


def test_json_dumps_every_field_of_the_data_model():
    """The JSON report is the data model: a field added to a result class and forgotten by
    ``jsonfmt`` fails here (``CheckResult.data``, ``ErrorEntry.internal`` and
    ``ReportSettings.strict`` once were)."""
    import dataclasses

    from gradverify.report.jsonfmt import to_dict
    from gradverify.results import Evidence, InputInfo, JacobianBlock
    from gradverify.scores import MutantLine, MutantRun, MutationScore

    finding = Finding("GV121", Severity.ERROR, "m", input="x", output=0, hint="h",
                      location=Location("f.py", 1), data={"k": 1},
                      consequence_of="GV222 (mutation)",
                      smallest=Smallest("- name: c-smallest", "c-smallest", (("x", (1,)),), 3,
                                        repro="# script", no_repro=None),
                      evidence=Evidence((JacobianBlock("output 0", "x", ((float("nan"),),),
                                                       ((1.0,),), ((),), ((0,),)),), "tb"))
    check = CheckResult("gradcheck", Status.FAIL, 0.1, "s", (finding,), mode="slow",
                        expect="e", data={"d": 2})
    case = CaseResult("m:F", "s.yaml", "c", Status.FAIL, 0.2, (InputInfo("x", "tensor", (3,),
                                                                          "float32", True),),
                      (check,), inferred=True)
    error = ErrorEntry("m:G", "s.yaml", "GV011", "bug", internal=True,
                       location=Location("s.yaml", 4))
    run = MutantRun("negate:3:0", "`g` -> `-g`", Location("f.py", 2), "killed", "gradcheck",
                    {"difference": 1.0})
    case = dataclasses.replace(case, mutants=(run,))
    line = MutantLine("`a * w` -> `a`", Location("f.py", 3), "every case has w = 1")
    score = MutationScore("m:F", "s.yaml", 2, 1, (line,), (line,), (line,), note="n")
    report = Report(ReportSettings(strict=True, empty_ok=True), (case,), (error,), 0.3,
                    {"gradverify": "0", "torch": "t", "python": "p"}, ("note",), (score,))
    dumped = to_dict(report)
    fields = {cls: {f.name for f in dataclasses.fields(cls)} for cls in (
        Finding, CheckResult, CaseResult, InputInfo, ErrorEntry, ReportSettings, Smallest)}
    result = dumped["results"][0]
    assert fields[CaseResult] <= set(result)
    assert fields[InputInfo] <= set(result["inputs"][0])
    assert fields[CheckResult] <= set(result["checks"][0])
    assert fields[Finding] <= set(result["checks"][0]["findings"][0])
    assert fields[Smallest] <= set(result["checks"][0]["findings"][0]["smallest"])
    evidence = result["checks"][0]["findings"][0]["evidence"]
    assert {f.name for f in dataclasses.fields(Evidence)} == set(evidence)
    assert {f.name for f in dataclasses.fields(JacobianBlock)} == set(evidence["blocks"][0])
    assert evidence["blocks"][0]["analytical"] == [["nan"]]  # strict JSON
    assert evidence["blocks"][0]["rows"] == [[]] and evidence["traceback"] == "tb"
    assert dumped["schema"] == 2
    assert result["checks"][0]["findings"][0]["smallest"]["shapes"] == [
        {"name": "x", "shape": [1]}]
    assert fields[ErrorEntry] <= set(dumped["errors"][0])
    assert fields[ReportSettings] <= set(dumped["settings"])
    # the report's own fields: settings, results, errors and notes as such; its duration in the
    # summary, its versions at the top (``text`` is how raise_for_failures renders it, no data)
    assert {f.name for f in dataclasses.fields(Report)} == {
        "settings", "results", "errors", "notes", "duration_s", "versions", "mutants", "text"}
    # the mutation score (--mutate): as the issue gives it, a place as {"file", "line"}
    mutants = dumped["mutants"][0]
    assert {f.name for f in dataclasses.fields(MutationScore)} <= set(mutants)
    assert {f.name for f in dataclasses.fields(MutantLine)} <= set(mutants["survived"][0])
    assert mutants["survived"][0]["location"] == {"file": "f.py", "line": 3}
    assert {f.name for f in dataclasses.fields(MutantRun)} <= set(result["mutants"][0])
    assert {"settings", "results", "errors", "notes"} <= set(dumped)
    assert dumped["summary"]["duration_s"] == 0.3 and dumped["notes"] == ["note"]
    assert (dumped["gradverify"], dumped["torch"], dumped["python"]) == ("0", "t", "p")
    assert dumped["errors"][0]["internal"] is True and dumped["settings"]["strict"] is True
    assert result["checks"][0]["data"] == {"d": 2}
    # a place is the "file:line" text every format prints
    assert result["checks"][0]["findings"][0]["location"] == "f.py:1"
    assert dumped["errors"][0]["location"] == "s.yaml:4"


# ----------------------------------------------------------------------------- places


@pytest.mark.parametrize(("location", "text"), [
    (Location("pkg/ops.py", 42), "pkg/ops.py:42"),
    (Location("pkg/ops.py"), "pkg/ops.py"),
    (Location("C:\\src\\ops.py", 7), "C:\\src\\ops.py:7"),
])
def test_a_location_prints_as_file_colon_line_and_parses_back(location, text):
    assert str(location) == text
    assert Location.parse(text) == location


def test_github_takes_file_and_line_from_locations_never_from_messages():
    """A message quoting a place (a traceback line, a path in an exception) is text: only the
    model's ``Location`` puts an annotation on a line."""
    misleading = Finding("GV121", Severity.ERROR, "x.py:3: raised ValueError at y.py:9")
    placed = Finding("GV121", Severity.ERROR, "x.py:3: wrong", location=Location("ops.py", 12))
    only_file = Finding("GV121", Severity.ERROR, "wrong", location=Location("ops.py"))
    case = CaseResult("m:F", None, "c", Status.FAIL, 0.0, checks=(
        CheckResult("gradcheck", Status.FAIL, 0.0, "s", (misleading, placed, only_file)),))
    errors = (ErrorEntry(None, "s.yaml", "GV002", "x.py:3: looks like a place"),
              ErrorEntry(None, "s.yaml", "GV002", "bad value", location=Location("s.yaml", 5)))
    lines = RENDERERS["github"].render(Report(ReportSettings(), (case,), errors)).splitlines()
    assert lines[0].startswith("::error title=GV121 gradcheck::m:F [c] gradcheck: x.py:3: ")
    assert lines[1].startswith("::error file=ops.py,line=12,title=GV121 gradcheck::")
    assert lines[2].startswith("::error title=GV121 gradcheck::")  # no line to place it on
    assert lines[3] == "::error title=GV002::x.py:3: looks like a place"
    assert lines[4] == "::error file=s.yaml,line=5,title=GV002::bad value"


def test_a_spec_error_carries_its_place_into_the_report(project):
    project.write("specs/bad.yaml", "target: ops:F\ncases:\n  - args: {x: {shape: [3]}}\n"
                                    "    bogus: 1\n")
    result = run_cli("check", "specs/bad.yaml", "--format", "github")
    assert result.code == 3
    assert any(line.startswith("::error file=specs/bad.yaml,line=") for line in
               result.stdout.splitlines()), result.stdout


# ----------------------------------------------------------------------------- verbosity


@pytest.mark.parametrize("name", sorted(RENDERERS))
def test_every_format_takes_the_verbosity_and_says_whether_it_reads_it(name):
    renderer = RENDERERS[name]
    report = _report()
    texts = {level: renderer.render(report, level) for level in Verbosity}
    assert renderer.render(report) == texts[Verbosity.NORMAL]
    if renderer.reads_verbosity:
        assert len(set(texts.values())) == len(Verbosity), name
    else:
        assert len(set(texts.values())) == 1, name


def test_quiet_reaches_the_report_file(broken):
    result = run_cli("check", "-q", "--format", "plain", "--output", "out/report.txt")
    assert result.code == 1
    written = (broken.root / "out/report.txt").read_text()
    assert "specs/neg.yaml  ops:Neg" not in written  # -q: no overview line
    assert "[GV121 gradcheck]" in written and written == result.stdout


# ----------------------------------------------------------------------------- --mutate


def _scored() -> Report:
    from dataclasses import replace

    from gradverify.scores import MutantLine, MutationScore

    lived = MutantLine("`grad * w` -> `grad`", Location("pkg/ops.py", 13),
                       "every case has w = 1; give w random values")
    gone = MutantLine("`grad` -> `ones_like(grad)`", Location("pkg/ops.py", 12),
                      "backward never reads grad")
    score = MutationScore("pkg.ops:F\n::error", "specs/f.yaml", 14, 13, (lived,), (gone,))
    return replace(_report(), mutants=(score,))


def test_every_text_format_gives_the_mutation_score():
    report = _scored()
    plain = " ".join(RENDERERS["plain"].render(report).split())  # whatever width COLUMNS sets
    assert "specs/f.yaml pkg.ops:F\\n::error: 13/14 mutants killed (1 equivalent)" in plain
    assert ("pkg/ops.py:13: survived: `grad * w` -> `grad`: every case has w = 1; give w random "
            "values") in plain
    assert "backward never reads grad" not in plain  # equivalent ones with -v only
    assert "backward never reads grad" in " ".join(
        RENDERERS["plain"].render(report, Verbosity.VERBOSE).split())
    markdown = RENDERERS["markdown"].render(report)
    assert "| specs/f.yaml | `pkg.ops:F\\n::error` | 13/14 | pkg/ops.py:13: `grad * w` -> " \
           "`grad`: every case has w = 1; give w random values |" in markdown
    notice = [line for line in RENDERERS["github"].render(report).splitlines()
              if line.startswith("::notice")]
    assert notice == ["::notice file=pkg/ops.py,line=13,title=mutant survived::pkg.ops:F\\n::error:"
                      " `grad * w` -> `grad` survives: every case has w = 1; give w random values"]
