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
        return grad * w, grad * x      # no needs_input_grad: a warning
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
                  "target: ops:Twice\ncases:\n  - args: {x: {shape: [3]}, w: {shape: [3]}}\n")
    return project


def test_non_default_spec_folder_and_settings(configured):
    result = run_cli("check", "--format", "json")
    data = json.loads(result.stdout)
    assert data["settings"]["seed"] == 7
    names = [c["name"] for c in data["results"][0]["checks"]]
    assert "gradgradcheck" not in names and "gradcheck" in names
    assert result.code == 1   # fail-on-warnings: the needs_input_grad warning fails


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
    ("spec = ['x']", "unknown key (did you mean 'specs'?)"),
    ("checks = { gradchek = false }", "checks.gradchek: unknown check"),
    ("jobs = 0", "jobs: expected a positive integer"),
    ("only = ['lnt']", "only: unknown check 'lnt' (did you mean 'lint'?)"),
    ("tolerance = { atol = -1 }", "tolerance.atol: expected a non-negative number"),
])
def test_bad_config_exits_3(project, text, message):
    project.write("pyproject.toml", f"[tool.gradverify]\n{text}\n")
    result = run_cli("check")
    assert result.code == 3
    assert message in result.output and "[tool.gradverify]" in result.output
