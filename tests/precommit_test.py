"""The real pre-commit, in a fresh git repository, with the `repo: local` hook of docs/ci.md."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import functions

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

GOOD = functions.module(functions.square())


def _run(args, cwd, env):
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)


def test_pre_commit_passes_then_fails_after_breaking(tmp_path):
    pre_commit = [sys.executable, "-m", "pre_commit"]
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "cache"), "NO_COLOR": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    repo = tmp_path / "repo"
    (repo / "specs").mkdir(parents=True)
    (repo / "ops.py").write_text(GOOD)
    (repo / "helpers.py").write_text("X = 1\n")
    (repo / "specs/square.yaml").write_text(
        "target: ops:Square\ncases:\n  - args: {x: {shape: [3]}}\n")
    (repo / ".pre-commit-config.yaml").write_text(textwrap.dedent(f"""
        repos:
          - repo: local
            hooks:
              - id: gradverify
                name: gradverify
                entry: {sys.executable} -m gradverify check --changed --no-color
                language: system
                files: \\.(py|ya?ml)$
                require_serial: true
    """))
    assert _run(["git", "init", "-q"], repo, env).returncode == 0
    assert _run(["git", "add", "."], repo, env).returncode == 0

    ok = _run([*pre_commit, "run", "--files", "ops.py", "specs/square.yaml"], repo, env)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "gradverify" in ok.stdout and "Passed" in ok.stdout

    unrelated = _run([*pre_commit, "run", "--files", "helpers.py", ".pre-commit-config.yaml"],
                     repo, env)
    assert unrelated.returncode == 0, unrelated.stdout + unrelated.stderr

    (repo / "ops.py").write_text(GOOD.replace("2 * x * grad", "3 * x * grad"))
    bad = _run([*pre_commit, "run", "--files", "ops.py"], repo, env)
    assert bad.returncode == 1
    assert "Failed" in bad.stdout and "GV121" in bad.stdout
