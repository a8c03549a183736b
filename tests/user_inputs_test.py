"""Inputs as users write them: spec paths in any spelling, a spec folder that cannot be read,
YAML merge keys and Unicode names, ``list`` past a broken module, and ``record`` that never
appends to an invalid spec. The installed ``gradverify`` runs as a subprocess.
"""
from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

import functions
from hostile import GOOD, NO_ROOT, gv, make_project, needs_command, unwrap

pytestmark = [needs_command,
              pytest.mark.skipif(not sys.platform.startswith("linux"),
                                 reason="real permissions and paths")]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path)


def test_yaml_merge_keys_and_unicode_names(project):
    (project / "uniops.py").write_text(GOOD.replace("class Good(", "class ΔScale("))
    (project / "specs" / "merged.yaml").write_text(
        "target: uniops:ΔScale\ncases:\n  - &small\n    name: small\n"
        "    args: {x: {shape: [3]}}\n  - <<: *small\n    name: other\n", encoding="utf-8")
    result = gv(project, "check", "specs/merged.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"specs/merged.yaml +uniops:ΔScale +\.\.", result.stdout)


def test_record_never_appends_to_an_invalid_spec(project):
    (project / "train.py").write_text(
        "import torch\nimport good\ngood.Good.apply(torch.randn(3, requires_grad=True))\n")
    (project / "rec").mkdir()
    (project / "rec" / "Good.yaml").write_text("target: good:Good\ncases:\n  - name: [half\n")
    before = (project / "rec" / "Good.yaml").read_text()
    # not shrunk (no probe process): where the cases go is decided before shrinking
    result = gv(project, "record", "-o", "rec", "--no-shrink", "--", "python", "train.py")
    assert result.returncode == 0, result.stderr
    assert (project / "rec" / "Good.yaml").read_text() == before
    assert (project / "rec" / "Good_2.yaml").is_file()
    assert "is not a valid spec" in unwrap(result.stderr)
    assert gv(project, "check", "rec/Good_2.yaml").returncode == 0


def test_paths_as_users_write_them(project):
    folder = project / "my ops dir"
    folder.mkdir()
    (folder / "ünï códe ops.py").write_text(functions.module(functions.square("Quad")),
                                            encoding="utf-8")
    (project / "more.yaml").mkdir()
    (project / "more.yaml" / "quad.yaml").write_text(
        'target: "my ops dir/ünï códe ops.py:Quad"\ncases:\n  - name: v\n'
        "    args: {x: {shape: [3]}}\n", encoding="utf-8")
    result = gv(project, "check", "more.yaml", "--format", "json")
    assert result.returncode == 0, result.stdout + result.stderr
    [case] = json.loads(result.stdout)["results"]
    assert case["spec"] == "more.yaml/quad.yaml" and case["status"] == "pass"


@pytest.mark.skipif(not shutil.which("capsh"), reason="needs capsh to drop root's overrides")
def test_a_spec_folder_that_cannot_be_read_is_said(project):
    private = project / "specs" / "private"
    private.mkdir()
    (private / "more.yaml").write_text("target: good:Good\ncases: [{args: [{shape: [2]}]}]\n")
    private.chmod(0)
    try:
        result = gv(project, "check", wrap=NO_ROOT)
        listed = gv(project, "list", wrap=NO_ROOT)
    finally:
        private.chmod(0o755)
    assert result.returncode == 3, result.stdout + result.stderr
    message = "specs/private: cannot read this folder (permission denied): the spec files in it"
    assert message in unwrap(result.stdout) and "[GV001]" in result.stdout
    assert re.search(r"specs/good.yaml +good:Good +\.", result.stdout)  # the rest ran
    assert listed.returncode == 3 and message in listed.stderr
    assert "specs/good.yaml:1  good:Good  1 case" in listed.stdout


MADE = """
import torch
from torch.autograd import Function


def make_square():
    class Square(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return 2 * x * grad
    return Square


def _twice(ctx, x):
    return x * 2


def _twice_back(ctx, grad):
    return grad * 2


Square = make_square()
Twice = type("GeneratedTwice_0x1f", (Function,), {"forward": staticmethod(_twice),
                                                  "backward": staticmethod(_twice_back)})
"""


def test_list_names_what_check_accepts_and_lists_past_a_broken_module(project):
    (project / "made.py").write_text(MADE)
    (project / "halfedit.py").write_text("import torch\nx = (\n")
    (project / "relpkg").mkdir()
    (project / "relpkg" / "__init__.py").write_text("")
    (project / "relpkg" / "ops.py").write_text(GOOD)
    result = gv(project, "list", "made", "halfedit", "relpkg.ops")
    assert result.returncode == 3, result.stdout + result.stderr
    names = re.findall(r"^(\S+)  \(", result.stdout, re.M)
    assert sorted(names) == ["made:Square", "made:Twice", "relpkg.ops:Good"]
    assert "<locals>" not in result.stdout and "GeneratedTwice" not in result.stdout
    assert "gradverify init made:Twice" in result.stdout
    assert "SyntaxError: '(' was never closed at halfedit.py:2" in result.stderr
    assert "gradverify/" not in result.stderr and "Traceback" not in result.stderr
    checked = gv(project, "check", *names[:2], "-q")
    assert checked.returncode == 0, checked.stdout + checked.stderr

