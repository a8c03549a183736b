"""Never destroy the user's files: a report never goes over a file the run reads (its
pyproject.toml included), and a Function that crashes leaves no core file in the project, even
with ``ulimit -c unlimited``. Run through the installed command, comparing the files on disk
before and after."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import functions
from hostile import GRADVERIFY, digest, gv, make_project, needs_command

pytestmark = [needs_command,
              pytest.mark.skipif(not sys.platform.startswith("linux"),
                                 reason="core dumps and rlimits as Linux has them")]

SEGFAULT = functions.module(
    functions.one_input("Segfault", backward=f"{functions.SEGFAULTS}\nreturn grad"),
    header="import ctypes\nimport torch\nfrom torch.autograd import Function\n")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = make_project(tmp_path)
    (root / "pyproject.toml").write_text('[project]\nname = "mine"\n\n[tool.gradverify]\n'
                                         'specs = ["specs"]\n')
    return root


@pytest.mark.parametrize("option", ["--output", "--json", "--junit-xml"])
def test_a_report_never_goes_over_the_pyproject_the_run_reads(project, option):
    before = digest(project)
    args = ("--format", "json", option, "pyproject.toml") if option == "--output" else \
        (option, "pyproject.toml")
    result = gv(project, "check", *args)
    assert result.returncode == 2, result.stdout + result.stderr  # a usage error, as before
    assert "refusing to write the report over pyproject.toml, which this run reads" in \
        " ".join(result.stderr.split())
    assert digest(project) == before


def test_a_segfaulting_function_leaves_no_core_file(project):
    if shutil.which("prlimit") is None:
        pytest.skip("prlimit (util-linux) sets the core limit for the run")
    (project / "crash.py").write_text(SEGFAULT)
    (project / "specs" / "crash.yaml").write_text(
        "target: crash:Segfault\ncases:\n  - args: {x: {shape: [3]}}\n")
    (project / "core").write_text("the user's own file named core\n")
    before = digest(project)
    result = subprocess.run(["prlimit", "--core=unlimited", GRADVERIFY, "check"], cwd=project,
                            capture_output=True, text=True, timeout=300,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "SIGSEGV" in result.stdout
    assert digest(project) == before  # `core` is still the user's, and no core.PID appeared


PRINTS = """
import os
import sys
import torch
from torch.autograd import Function

LINE = "x" * 1023 + "\\n"


class Prints(Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        for _ in range(48 * 1024):  # 48 MiB
            sys.stdout.write(LINE)
        print("the last words before the crash", flush=True)
        os.abort()
"""


def _folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def test_what_a_function_prints_is_bounded_and_its_last_words_kept(project, tmp_path):
    import threading

    (project / "prints.py").write_text(PRINTS)
    spool = tmp_path / "tmp"
    spool.mkdir()
    peak = [0]
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _folder_size(spool))
            done.wait(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        result = gv(project, "check", "prints:Prints", env={"TMPDIR": str(spool)})
    finally:
        done.set()
        watcher.join()
    assert result.returncode == 1, result.stdout
    assert "SIGABRT" in result.stdout and "the last words before the crash" in result.stdout
    assert peak[0] < 4 * 1024**2  # not 48 MiB of log


@pytest.mark.parametrize("name", ["good.py", "pyproject.toml", "mine.yaml"])
def test_init_force_never_replaces_a_file_gradverify_did_not_write(project, name):
    (project / "mine.yaml").write_text("# my own spec\ntarget: good:Good\ncases: []\n")
    before = digest(project)
    result = gv(project, "init", "good:Good", "-o", name, "--force")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "is not a spec gradverify wrote" in " ".join(result.stderr.split())
    assert digest(project) == before


def test_init_force_replaces_a_spec_init_wrote(project):
    first = gv(project, "init", "good:Good", "-o", "g.yaml")
    assert first.returncode == 0, first.stderr
    (project / "g.yaml").write_text((project / "g.yaml").read_text() + "# edited\n")
    again = gv(project, "init", "good:Good", "-o", "g.yaml", "--force")
    assert again.returncode == 0 and "# edited" not in (project / "g.yaml").read_text()
