"""[tool.gradverify] in the nearest pyproject.toml; command-line flags override it."""
from __future__ import annotations

import json

import pytest

from conftest import run_cli

OPS = """
import torch
from torch.autograd import Function

class Twice(Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        return grad * w, grad * x
"""


@pytest.fixture
def configured(project):
    project.write("ops.py", OPS)
    project.write("pyproject.toml", """
        [tool.gradverify]
        specs = ["checks/specs"]
        checks = { gradgradcheck = false }
        seed = 7
        fail-on-warnings = true
    """)
    project.write("checks/specs/twice.yaml",
                  "target: ops:Twice\ncases:\n  - args: {x: {shape: [3]}, "
                  "w: {shape: [3], init: zeros}}\n")  # x's gradient never exercised: a warning
    return project


def test_non_default_spec_folder_and_settings(configured):
    result = run_cli("check", "--format", "json")
    data = json.loads(result.stdout)
    assert data["settings"]["seed"] == 7
    names = [c["name"] for c in data["results"][0]["checks"]]
    assert "gradgradcheck" not in names and "gradcheck" in names
    assert result.code == 1   # fail-on-warnings: GV129's warning fails


def test_flags_override_config(configured):
    result = run_cli("check", "--format", "json", "--seed", "3", "--only", "gradgradcheck")
    data = json.loads(result.stdout)
    assert data["settings"]["seed"] == 3
    assert [c["name"] for c in data["results"][0]["checks"]] == ["gradgradcheck"]
    assert result.code == 0


def test_nearest_pyproject_upward(configured):
    (configured.root / "sub").mkdir()
    import os

    os.chdir(configured.root / "sub")
    result = run_cli("list")
    assert "twice.yaml" in result.stdout


@pytest.mark.parametrize(("text", "message"), [
    ("spec = ['x']", "unknown key 'spec' (did you mean 'specs'?)"),
    ("checks = { gradchek = false }", "checks.gradchek: unknown check"),
    ("jobs = 0", "jobs: expected a positive integer"),
    ("only = ['lnt']", "only: unknown check 'lnt' (did you mean 'lint'?)"),
    ("tolerance = { atol = -1 }", "tolerance.atol: must be >= 0"),
    ("tolerance = { atol = nan }", "tolerance.atol: expected a finite number, got nan"),
    ("checks = { gradcheck = { mode = 'quick' } }", "checks.gradcheck.mode: invalid value"),
    ("mode = 'quick'", "mode: invalid value 'quick'"),
    ("timeout = 0", "timeout: must be > 0"),
])
def test_bad_config_exits_3(project, text, message):
    project.write("pyproject.toml", f"[tool.gradverify]\n{text}\n")
    result = run_cli("check")
    assert result.code == 3
    assert message in result.output and "[tool.gradverify]" in result.output


@pytest.mark.parametrize("tolerance", [{"atol": float("nan")}, {"atol": -1}, {"eps": 0},
                                       {"atol": "1e-5"}, {"tol": 1e-5}])
def test_pyproject_and_spec_read_settings_with_one_validator(tmp_path, tolerance):
    """The same value is refused with the same message in either file."""
    from gradverify import config
    from gradverify.errors import SpecError
    from gradverify.spec.file import from_dict

    with pytest.raises(SpecError) as in_spec:
        from_dict({"target": "m:F", "tolerance": tolerance, "cases": [{"args": [{"shape": [2]}]}]})
    with pytest.raises(SpecError) as in_pyproject:
        config.parse({"tolerance": tolerance}, root=tmp_path)
    assert in_spec.value.message == in_pyproject.value.message


OFF_BY_HALF_PERCENT = """
import torch
from torch.autograd import Function

class Scaled(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    def backward(ctx, grad):
        x, = ctx.saved_tensors
        return grad * x.cos() * 1.005     # 0.5% off: fails rtol 1e-3, passes rtol 1e-2
"""

SPEC = "target: scaled:Scaled\ncases:\n  - args: {x: {shape: [3]}}\n"


def _verdicts(data):
    return [(c["name"], c["status"]) for r in data["results"] for c in r["checks"]]


def test_the_same_setting_from_pyproject_the_cli_and_the_api_gives_the_same_run(project):
    """tolerance and checks from [tool.gradverify], as flags, and as verify()'s keywords."""
    import gradverify

    project.write("scaled.py", OFF_BY_HALF_PERCENT)
    project.write("specs/scaled.yaml", SPEC)
    default = _verdicts(json.loads(run_cli("check", "--format", "json").stdout))
    assert ("gradcheck", "fail") in default

    by_flags = run_cli("check", "--format", "json", "--rtol", "1e-2", "--skip", "lint,precision")
    project.write("pyproject.toml", """
        [tool.gradverify]
        tolerance = { rtol = 1e-2 }
        skip = ["lint", "precision"]
    """)
    by_pyproject = run_cli("check", "--format", "json")
    assert by_flags.code == by_pyproject.code == 0
    runs = [_verdicts(json.loads(r.stdout)) for r in (by_flags, by_pyproject)]
    api_by_pyproject = gradverify.verify("scaled:Scaled", spec="specs/scaled.yaml")
    (project.root / "pyproject.toml").unlink()
    api_by_keywords = gradverify.verify("scaled:Scaled", spec="specs/scaled.yaml", rtol=1e-2,
                                        skip=["lint", "precision"])
    for report in (api_by_pyproject, api_by_keywords):
        runs.append([(c.name, c.status.value) for r in report.results for c in r.checks])
    assert runs[0] == runs[1] == runs[2] == runs[3]
    assert ("gradcheck", "pass") in runs[0] and "lint" not in dict(runs[0])


def test_verify_honours_pyproject_checks_and_their_options(project):
    import gradverify

    project.write("scaled.py", OFF_BY_HALF_PERCENT)
    project.write("specs/scaled.yaml", SPEC)
    project.write("pyproject.toml", """
        [tool.gradverify]
        checks = { gradgradcheck = false, gradcheck = { mode = "fast" } }
    """)
    report = gradverify.verify("scaled:Scaled", spec="specs/scaled.yaml")
    checks = {c.name: c for r in report.results for c in r.checks}
    assert "gradgradcheck" not in checks and checks["gradcheck"].mode == "fast"
    # a flag still wins over pyproject
    report = gradverify.verify("scaled:Scaled", spec="specs/scaled.yaml", checks=["gradgradcheck"])
    assert [c.name for r in report.results for c in r.checks] == ["gradgradcheck"]


def test_mutate_from_config(configured):
    """`mutate = true` is --mutate; a score never changes the exit code (here the warning's)."""
    text = (configured.root / "pyproject.toml").read_text()
    configured.write("pyproject.toml", text + "mutate = true\n")
    result = run_cli("check", "--format", "json")
    (score,) = json.loads(result.stdout)["mutants"]
    assert score["target"] == "ops:Twice" and score["total"] >= 10
    assert result.code == 1
    configured.write("pyproject.toml", text + 'mutate = "yes"\n')
    result = run_cli("check")
    assert result.code == 3 and "mutate" in result.stderr
