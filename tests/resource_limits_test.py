"""Inputs too large for the machine: a YAML bomb, a large data file in the spec folder, absurd
tensor sizes and a case that runs out of memory (a real limit, prlimit) are each one clear
error, at once, and the other targets still run. The installed ``gradverify`` runs as a
subprocess.
"""
from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hostile import GRADVERIFY, gv, make_project, needs_command, unwrap

pytestmark = [needs_command,
              pytest.mark.skipif(not sys.platform.startswith("linux"),
                                 reason="real rlimits (prlimit)")]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path)


def _laughs(depth: int) -> str:
    """A YAML "billion laughs" on one line: anchor ``a<depth>`` is a list of the level below and
    eight aliases of it, so 9 ** (depth + 1) ones hide in a few hundred bytes."""
    if depth == 0:
        return "&a0 [" + ",".join("1" * 9) + "]"
    return f"&a{depth} [{_laughs(depth - 1)}" + f",*a{depth - 1}" * 8 + "]"


BOMB = f"""target: good:Good
cases:
  - name: a
    args:
      x:
        values: {_laughs(7)}
"""


def test_a_yaml_bomb_fails_at_once_and_the_rest_runs(project):
    (project / "specs" / "bomb.yaml").write_text(BOMB)
    start = time.monotonic()
    result = gv(project, "check", timeout=60)
    assert time.monotonic() - start < 30
    assert result.returncode == 3
    assert "specs/bomb.yaml:6" in result.stdout and "aliases" in result.stdout
    assert re.search(r"specs/good.yaml +good:Good +\.", result.stdout)


def test_a_large_data_file_in_the_spec_folder_is_named_quickly(project):
    with open(project / "specs" / "annotations.yaml", "w") as handle:
        handle.write("images:\n")
        for i in range(700_000):
            handle.write(f"  - {{id: {i}, bbox: [0.25, 0.5, 3, 4], label: cat}}\n")
    assert (project / "specs" / "annotations.yaml").stat().st_size > 30 * 2**20
    start = time.monotonic()
    result = subprocess.run(["/usr/bin/time", "-f", "%M", GRADVERIFY, "list", "specs"],
                            cwd=project, capture_output=True, text=True, timeout=60)
    assert time.monotonic() - start < 20
    assert int(result.stderr.strip().splitlines()[-1]) < 512 * 1024  # KiB: spec reading alone
    result = gv(project, "check", timeout=60)
    assert result.returncode == 3
    assert "specs/annotations.yaml" in result.stdout and "not a spec" in unwrap(result.stdout)
    assert re.search(r"specs/good.yaml +good:Good +\.", result.stdout)


@pytest.mark.parametrize("args, message", [
    ("{x: {values: " + "[" * 80 + "1" + "]" * 80 + "}}", "nested more than 16 deep"),
    ("{x: {shape: [0, 100000000000000000000]}}", "too large"),
])
def test_absurd_tensors_are_spec_errors(project, args, message):
    (project / "specs" / "absurd.yaml").write_text(
        f"target: good:Good\ncases:\n  - name: a\n    args: {args}\n")
    result = gv(project, "check", "specs/absurd.yaml")
    assert result.returncode == 3, result.stdout + result.stderr
    assert message in unwrap(result.stdout)
    assert "GV011" not in result.stdout


@pytest.mark.slow
def test_out_of_memory_is_its_own_finding(project):
    (project / "specs" / "huge.yaml").write_text(
        "target: good:Good\ncases:\n  - name: huge\n    args: {x: {shape: [12000, 12000]}}\n")
    result = gv(project, "check", wrap=("prlimit", "--as=3000000000"), timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    flat = unwrap(result.stdout)
    assert "GV016" in flat and "out of memory" in flat and "'huge'" in flat
    assert "[12000, 12000]" in flat and re.search(r"specs/good.yaml +good:Good +\.", flat)
    assert "native code" not in flat and "inputs.py" not in flat

