"""The console (``gradverify/terminal.py``) as a user meets it: a stdout that is closed or full
costs no report file, a console that is not UTF-8 gets escapes (the files stay UTF-8), and
control characters in names never start a log line. The installed ``gradverify`` runs under
a shell with real redirections.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from hostile import GOOD, GRADVERIFY, SIGN_BUG, gv, make_project, needs_command

pytestmark = [needs_command,
              pytest.mark.skipif(not sys.platform.startswith("linux"),
                                 reason="real file descriptors and a shell")]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path)


def shell(cwd: Path, line: str, env: dict[str, str] | None = None
          ) -> subprocess.CompletedProcess[str]:
    """``gradverify ARGS`` with the shell's redirections (``>&-``, ``>/dev/full``)."""
    return subprocess.run(["bash", "-c", f"{GRADVERIFY} {line}"], cwd=cwd, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL,
                          env={**os.environ, "NO_COLOR": "1", **(env or {})})


@pytest.mark.parametrize("redirect, said", [
    (">&-", "cannot write to stdout (it is closed)"),
    (">/dev/full", "cannot write to stdout (no space left on device)"),
    ("<&- >&- 2>&-", None),
], ids=["stdout-closed", "stdout-full", "all-closed"])
def test_a_console_that_cannot_be_written_costs_no_report(project, redirect, said):
    (project / "buggy.py").write_text(SIGN_BUG)
    result = shell(project, f"check good:Good buggy:SignBug --json r.json --junit-xml j.xml "
                            f"{redirect}")
    assert result.returncode == 1, result.stderr  # the run's own: a check failed
    report = json.loads((project / "r.json").read_text())
    assert {r["target"] for r in report["results"]} == {"good:Good", "buggy:SignBug"}
    assert ET.parse(project / "j.xml").getroot().get("failures") != "0"
    if said:
        assert result.stderr.strip().splitlines() == [result.stderr.strip()]  # one line
        assert said in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("env", [{"PYTHONIOENCODING": "cp1252"},
                                 {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""}],
                         ids=["cp1252", "C-locale"])
def test_a_console_that_is_not_utf8_gets_escapes_and_the_files_utf8(project, env):
    (project / "uniops.py").write_text(GOOD.replace("class Good(", "class ΔScale("),
                                       encoding="utf-8")
    result = gv(project, "check", "uniops:ΔScale", "--json", "r.json", "--junit-xml", "j.xml",
                env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"uniops:\\u0394Scale +\(inferred spec\) +\.", result.stdout)
    report = json.loads((project / "r.json").read_text(encoding="utf-8"))
    assert report["results"][0]["target"] == "uniops:ΔScale"
    assert 'classname="uniops:ΔScale"' in (project / "j.xml").read_text(encoding="utf-8")


INJECTED = "a\n::error file=x.py::INJECTED"


def test_control_characters_in_names_never_start_a_log_line(project):
    (project / "buggy.py").write_text(SIGN_BUG)
    (project / "specs" / "nl.yaml").write_text(
        f"target: buggy:SignBug\ncases:\n  - name: {json.dumps(INJECTED)}\n"
        "    args: {x: {shape: [3]}}\n")
    first = gv(project, "check", "specs/nl.yaml", "-v", "--format", "github", "--output",
               "gh.txt", "--json", "r.json", "--junit-xml", "j.xml")
    second = gv(project, "check", "specs/nl.yaml", "--format", "markdown", "--output", "m.md")
    assert first.returncode == second.returncode == 1, first.stdout + first.stderr
    texts = [first.stdout, second.stdout, *((project / f).read_text()
                                            for f in ("gh.txt", "m.md", "j.xml"))]
    for text in texts:
        assert not [line for line in text.splitlines()
                    if line.lstrip().startswith("::error file=x.py")], text
        assert "a\\n::error file=x.py::INJECTED" in text  # shown, escaped
    report = json.loads((project / "r.json").read_text())
    assert report["results"][0]["case"] == INJECTED  # the data itself is kept whole

