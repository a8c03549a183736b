"""Odd things named as input: a device or a FIFO given as a spec (refused at once, never read
forever), a spec written as JSON, a file that is neither spec nor module, and a class name
typed in another Unicode normal form (Python normalises identifiers, NFKC). Run through the
installed command, bounded by a timeout: a hang fails the test instead of the suite."""
from __future__ import annotations

import os
import sys
import unicodedata
from pathlib import Path

import pytest

from hostile import GOOD, gv, make_project, needs_command, unwrap

pytestmark = needs_command


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path)


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_a_device_given_as_a_spec_is_refused_not_read(project):
    result = gv(project, "check", "good:Good", "--spec", "/dev/zero", timeout=60)
    assert result.returncode == 3
    assert "not a spec: not a regular file" in unwrap(result.stdout)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("command", [("check", "good:Good", "--spec"), ("check",), ("list",)])
def test_a_fifo_is_refused_not_waited_on(project, command):
    os.mkfifo(project / "pipe.yaml")
    result = gv(project, *command, "pipe.yaml", timeout=60)
    assert "not a spec: not a regular file" in unwrap(result.stdout + result.stderr)
    assert result.returncode == 3  # list too: a spec it cannot read is an error


def test_a_spec_written_as_json_is_read_as_yaml(project):
    (project / "gen").mkdir()
    (project / "gen" / "good.json").write_text(
        '{"target": "good:Good", "cases": [{"name": "vec", "args": {"x": {"shape": [3]}}}]}')
    result = gv(project, "check", "gen/good.json")
    assert result.returncode == 0, result.stdout
    assert "gen/good.json  good:Good" in result.stdout


def test_a_file_that_is_neither_spec_nor_module_says_what_targets_are(project):
    (project / "notes.txt").write_text("hello\n")
    result = gv(project, "check", "notes.txt")
    assert result.returncode == 3
    assert "not a spec file (.yaml, .yml or .json)" in unwrap(result.stdout)
    assert "cannot import module" not in result.stdout


@pytest.mark.skipif(sys.platform == "darwin", reason="the file system normalises names itself")
def test_a_class_name_in_another_normal_form_is_the_class(project):
    (project / "uni.py").write_text(GOOD.replace("class Good", "class Café"), encoding="utf-8")
    typed = "uni:" + unicodedata.normalize("NFD", "Café")
    assert typed != "uni:Café"
    result = gv(project, "check", typed)
    assert result.returncode == 0, result.stdout
    assert "did you mean" not in result.stdout
