"""Values that would silently turn a run into a pass: an unset variable's empty string for a
file, a target or a check list, and non-finite tolerances. Each is refused up front with its exit
code and a message that names the option; nothing selected is exit 5, as pytest does. Run through
the installed command, as a user (or a CI script with an unset variable) runs it."""
from __future__ import annotations

from pathlib import Path

import pytest

from hostile import SIGN_BUG, digest, gv, make_project, needs_command, unwrap

pytestmark = needs_command


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = make_project(tmp_path)
    (root / "flip.py").write_text(SIGN_BUG)
    (root / "flip.yaml").write_text("target: flip:SignBug\ncases:\n  - args: {x: {shape: [3]}}\n")
    return root


@pytest.mark.parametrize("args", [
    pytest.param(("--json", ""), id="json"),
    pytest.param(("--junit-xml", ""), id="junit-xml"),
    pytest.param(("--format", "json", "--output", ""), id="output"),
    pytest.param(("--spec", ""), id="spec"),
    pytest.param(("",), id="target"),
])
def test_an_empty_value_is_a_usage_error(project, args):
    before = digest(project)
    result = gv(project, "check", "flip.yaml", *args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "is an empty string (an unset variable?)" in result.stderr
    assert digest(project) == before  # no report written anywhere


@pytest.mark.parametrize(("option", "value"), [
    ("--atol", "nan"), ("--rtol", "nan"), ("--atol", "inf"), ("--eps", "inf"), ("--eps", "nan"),
])
def test_a_tolerance_that_is_not_finite_is_a_usage_error(project, option, value):
    result = gv(project, "check", "flip.yaml", option, value)
    assert result.returncode == 2
    assert f"Invalid value for '{option}': '{value}' is not a finite number" in result.stderr


def test_infinite_tolerances_never_turn_a_sign_bug_into_a_pass(project):
    result = gv(project, "check", "flip.yaml", "--atol", "inf", "--rtol", "inf")
    assert result.returncode == 2 and "passed" not in result.stdout


@pytest.mark.parametrize("where", ["flag", "pyproject"])
def test_an_empty_check_selection_selects_nothing_exit_5(project, where):
    args = ("--only", "") if where == "flag" else ()
    if where == "pyproject":
        (project / "pyproject.toml").write_text("[tool.gradverify]\nonly = []\n")
    result = gv(project, "check", "flip.yaml", *args)
    assert result.returncode == 5, result.stdout
    assert "names no check: nothing was selected" in unwrap(result.stdout)
    assert "passed" not in result.stdout


def test_a_check_selection_that_names_checks_still_runs(project):
    result = gv(project, "check", "flip.yaml", "--only", "gradcheck,")
    assert result.returncode == 1 and "GV121" in result.stdout
