"""A run leaves nothing behind in TMPDIR or the working folder that it did not document:
torch's compiler cache (the checkpoint check imports torch._dynamo, which makes it) goes to a
folder of the run, removed at its end, unless the user named one."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import functions
from conftest import ROOT


def _check(tmp_path: Path, *flags: str, env: dict[str, str] | None = None) -> Path:
    """``gradverify check exp.yaml`` as a user runs it, in a folder of its own with a TMPDIR
    of its own: that TMPDIR, afterwards."""
    work, temp = tmp_path / "work", tmp_path / "tmp"
    work.mkdir()
    temp.mkdir()
    shutil.copy(ROOT / "specs/exp.yaml", work / "exp.yaml")
    environ = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    environ.update({"TMPDIR": str(temp), "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]), **(env or {})})
    run = subprocess.run([sys.executable, "-m", "gradverify", "check", "exp.yaml",
                          "--only", "checkpoint,gradcheck", *flags], cwd=work, env=environ,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "checkpoint" in run.stdout or "passed" in run.stdout
    assert sorted(p.name for p in work.iterdir()) == ["exp.yaml"]
    return temp


@pytest.mark.parametrize("isolate", [True, False], ids=["workers", "in-process"])
def test_a_run_leaves_no_compiler_cache_in_tmpdir(tmp_path, fresh_processes, isolate):
    temp = _check(tmp_path, *([] if isolate else ["--no-isolate"]))
    assert sorted(p.name for p in temp.iterdir()) == []


def test_a_compiler_cache_the_user_named_is_theirs(tmp_path, fresh_processes):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "kept").write_text("the user's")
    temp = _check(tmp_path, env={"TORCHINDUCTOR_CACHE_DIR": str(mine)})
    assert sorted(p.name for p in temp.iterdir()) == []  # no folder of the run made either
    assert (mine / "kept").read_text() == "the user's"  # left where the user wants it


COMPILES_AT_IMPORT = functions.module(
    functions.scale("Twice", 2),
    # as a library that compiles does, at import
    header=functions.HEADER + "import torch._dynamo  # noqa: F401\n")


@pytest.mark.parametrize("isolate", [True, False], ids=["workers", "in-process"])
def test_a_target_whose_import_makes_the_compiler_cache_leaves_none(tmp_path, fresh_processes,
                                                                     isolate):
    """The target is imported where the run is (its discovery, in-process): its import's
    cache goes to the run's folder as the checks' does."""
    work, temp = tmp_path / "work", tmp_path / "tmp"
    work.mkdir()
    temp.mkdir()
    (work / "dyn.py").write_text(COMPILES_AT_IMPORT)
    environ = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    environ.update({"TMPDIR": str(temp), "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])})
    run = subprocess.run([sys.executable, "-m", "gradverify", "check", "dyn:Twice", "--only",
                          "gradcheck", *([] if isolate else ["--no-isolate"])], cwd=work,
                         env=environ, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert sorted(p.name for p in temp.iterdir()) == []
