"""The suite is hermetic against the caller's terminal and locale (tests/conftest.py): a wide
terminal, ``NO_COLOR``/``FORCE_COLOR`` or ``LC_ALL=C`` in the environment that runs pytest
changes no test's verdict."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import CALLERS_ENVIRONMENT, ROOT

HOSTILE = {"COLUMNS": "200", "LINES": "10", "NO_COLOR": "", "FORCE_COLOR": "1",
           "CLICOLOR_FORCE": "1", "TERM": "xterm-256color", "LC_ALL": "C", "LANG": "C"}
"""A wide colour terminal under the C locale: each of these broke a test once or could."""


def test_every_test_sees_none_of_the_callers_terminal_and_locale():
    assert not {key for key in CALLERS_ENVIRONMENT if key != "NO_COLOR"} & set(os.environ)
    assert os.environ["NO_COLOR"] == "1"


def test_a_test_may_set_them_for_itself(monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    assert os.environ["COLUMNS"] == "60"


@pytest.mark.slow
def test_width_colour_and_locale_of_the_caller_change_no_verdict():
    """Tests that read the report's width and colour, in a pytest run under a hostile caller's
    environment (in-process through CliRunner, and as subprocesses)."""
    chosen = ["tests/formats_test.py::test_plain_report_has_a_fixed_width",
              "tests/report_test.py::test_golden_console_report",
              "tests/report_test.py::test_render_plain_has_no_escape_codes",
              "tests/cli_test.py", "tests/caller_environment_test.py::"
              "test_every_test_sees_none_of_the_callers_terminal_and_locale"]
    # cli_test's slowest tests check what init writes and that examples pass: no width, colour
    # or locale in what they assert
    slow = "bundled_examples or star_args or init_reads or init_writes or opt_in_compile"
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             "-p", "no:xdist", "-k", f"not ({slow})", *chosen], cwd=ROOT,
                            capture_output=True,
                            text=True, env={**os.environ, **HOSTILE}, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and "failed" not in result.stdout
