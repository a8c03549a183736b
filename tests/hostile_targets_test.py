"""Targets that fight back: a module that stubs gradcheck, exits or prints at import, or raises
with control characters in its message, costs no other target its verdict and no report its
form. The installed ``gradverify`` runs as a subprocess, as a user runs it.
"""
from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import functions
from hostile import GOOD, SIGN_BUG, gv, make_project, needs_command, unwrap

pytestmark = [needs_command,
              pytest.mark.skipif(not sys.platform.startswith("linux"),
                                 reason="real processes")]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path)


def test_a_module_that_stubs_gradcheck_cannot_pass_another_target(project):
    (project / "stubber.py").write_text(functions.module(functions.scale("G", 2)) +
                                        "torch.autograd.gradcheck = lambda *a, **k: True\n"
                                        "torch.autograd.gradgradcheck = lambda *a, **k: True\n")
    (project / "buggy.py").write_text(SIGN_BUG)
    for mode in ((), ("--no-isolate",)):
        result = gv(project, "check", "stubber:G", "buggy:SignBug", "--format", "json", *mode)
        assert result.returncode == 1, result.stderr
        report = json.loads(result.stdout)
        buggy = next(r for r in report["results"] if r["target"] == "buggy:SignBug")
        assert {c["name"]: c["status"] for c in buggy["checks"]}["gradcheck"] == "fail"
        stubber = next(r for r in report["results"] if r["target"] == "stubber:G")
        messages = [f["message"] for c in stubber["checks"] for f in c["findings"]
                    if f["code"] == "GV012"]
        assert messages and "torch.autograd.gradcheck" in messages[0]


@pytest.mark.parametrize("mode", [(), ("--no-isolate",)], ids=["workers", "no-isolate"])
def test_modules_that_exit_at_import_are_their_own_errors(project, mode):
    (project / "exitmod.py").write_text("import sys\nsys.exit('bye')\n")
    (project / "interrupts.py").write_text("raise KeyboardInterrupt\n")
    (project / "wanders.py").write_text("import os\nos.chdir('/')\nfrom good import Good\n")
    (project / "sub").mkdir()
    (project / "sub" / "other.py").write_text(GOOD)
    targets = ["exitmod:F", "interrupts:F", "wanders:Good", "sub/other.py:Good", "good:Good"]
    if not mode:
        (project / "osexit.py").write_text("import os\nos._exit(7)\n")
        targets.insert(1, "osexit:F")
    result = gv(project, "check", *targets, "--json", "r.json", *mode)
    assert result.returncode == 3, result.stdout + result.stderr
    flat = unwrap(result.stdout)
    assert "importing 'exitmod' exited (sys.exit('bye'))" in flat
    assert "importing 'interrupts' raised KeyboardInterrupt" in flat
    if not mode:
        assert "importing osexit exited with status 7" in flat
    report = json.loads((project / "r.json").read_text())
    ran = {r["target"] for r in report["results"]}
    assert {"good:Good", "wanders:Good", "sub.other:Good"} <= ran
    assert "working directory" in flat  # wanders' chdir: a GV012 warning, undone


def test_printing_at_import_never_reaches_a_machine_report(project):
    (project / "noisy.py").write_text("print('hello from import')\n" + GOOD)
    result = gv(project, "check", "noisy:Good", "--no-isolate", "--format", "json")
    assert json.loads(result.stdout)["summary"]["exit_code"] == 0
    assert "hello from import" in result.stderr


def test_junit_stays_well_formed_whatever_an_exception_says(project):
    (project / "escapes.py").write_text(functions.module('''
class F(Function):
    @staticmethod
    def forward(ctx, x):
        raise ValueError("\\x1b[31mred\\x00 and NUL")

    @staticmethod
    def backward(ctx, grad):
        return grad
'''))
    result = gv(project, "check", "escapes:F", "--junit-xml", "j.xml")
    assert result.returncode == 1
    root = ET.parse(project / "j.xml").getroot()
    assert "\\x1b[31mred\\x00" in ET.tostring(root, encoding="unicode")

