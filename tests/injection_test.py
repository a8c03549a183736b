"""User-controlled text (what a crashing Function printed, an exception's message) never acts on
the log it lands in: no line of any format starts with ``::`` (a GitHub workflow command once
the runner strips leading spaces) unless it is gradverify's own annotation, and no escape
sequence (a screen clear, a window title, an OSC 52 clipboard write) gets through raw. Run
through the installed command, in every text format."""
from __future__ import annotations

from pathlib import Path

import pytest

from hostile import gv, needs_command

NOISY = '''
import os
import torch
from torch.autograd import Function

PAD = int(os.environ.get("PAD", "0"))


class Noisy(Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        print("a" * PAD + " ::set-env name=EVIL::1 " + "b" * PAD
              + " ::error file=x.py::INJECTED \\x1b[2J \\x1b]0;title\\x07 \\x1b]52;c;ZXZpbA==\\x07",
              flush=True)
        os.abort()
'''

RAW = ("\x1b", "\x07", "\x9b", "\x9d")


pytestmark = needs_command


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "noisy.py").write_text(NOISY)
    return tmp_path


def _commands(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.lstrip().startswith("::")]


@pytest.mark.parametrize("pad", [10, 37, 60, 83])
def test_a_crashs_output_never_starts_a_line_of_the_plain_console(project, pad):
    result = gv(project, "check", "noisy:Noisy", "--format", "plain",
                env={"PAD": str(pad), "COLUMNS": "100"})
    assert result.returncode == 1, result.stdout
    assert "INJECTED" in result.stdout  # the output is shown, as text
    assert _commands(result.stdout) == []
    assert not any(c in result.stdout for c in RAW)


def test_the_github_format_escapes_what_the_crash_printed(project):
    result = gv(project, "check", "noisy:Noisy", "--format", "github", env={"PAD": "5"})
    assert result.returncode == 1
    commands = _commands(result.stdout)
    assert commands and all(line.startswith(("::error ", "::warning ")) for line in commands)
    assert len(commands) == 1  # gradverify's own annotation, and nothing the crash printed
    assert not any(c in result.stdout for c in RAW)
    assert "\\x1b[2J" in result.stdout


@pytest.mark.parametrize("fmt", ["markdown", "junit", "json"])
def test_no_format_passes_an_escape_sequence_through_raw(project, fmt):
    result = gv(project, "check", "noisy:Noisy", "--format", fmt, env={"PAD": "5"})
    assert result.returncode == 1
    assert not any(c in result.stdout for c in RAW)
    assert _commands(result.stdout) == []


def test_paths_and_names_from_the_user_never_start_a_line_of_any_stream(project):
    """A folder named with ``\\n::error::`` in it: init's lines, the spec it writes (a valid
    one: its comments stay one line each), list's lines and an output error all say it
    escaped."""
    (project / "good.py").write_text(NOISY.replace("        print(", "        return g * 2\n"
                                                   "        print("))
    folder = "specs\n::error::INJECTED"
    made = gv(project, "init", "good:Noisy", "-o", folder + "/")
    assert made.returncode == 0, made.stderr
    listed = gv(project, "list", folder)
    assert listed.returncode == 0, listed.stderr
    checked = gv(project, "check", folder, "-q", "--json", f"{project}/none\n::error::X/r.json")
    for result in (made, listed, checked):
        assert _commands(result.stdout) == [] and _commands(result.stderr) == [], result
    assert "specs\\n::error::INJECTED" in made.stdout and "Noisy  1 case" in listed.stdout
    spec = (project / folder / "Noisy.yaml").read_text()
    assert not any(line.startswith("::") for line in spec.splitlines())
