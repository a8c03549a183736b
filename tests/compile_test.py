"""The compile check's messages (``checks/compile.py``): torch's reason, whole, and a hint that
blames the locale where the locale is at fault."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT
from gradverify.checks import compile as compile_check

RAISED = ("backend='aot_eager' raised:\nUnicodeDecodeError: 'ascii' codec can't decode byte 0xe2 "
          "in position 602: ordinal not in range(128)\n\nSet TORCHDYNAMO_VERBOSE=1 for the "
          "internal stack trace")


def test_a_header_line_is_followed_by_what_it_introduces():
    """torch's BackendCompilerFailed says ``backend=... raised:`` on its first line and the error
    on the second: the finding once ended at "raised:", with no reason."""
    reason = compile_check._reason(RuntimeError(RAISED))
    assert reason == ("backend='aot_eager' raised: UnicodeDecodeError: 'ascii' codec can't "
                      "decode byte 0xe2 in position 602: ordinal not in range(128)")
    assert compile_check._reason(RuntimeError("one line\nmore")) == "one line"
    assert compile_check._reason(RuntimeError("")) == "RuntimeError"


def test_a_decode_error_is_blamed_on_the_locale():
    assert compile_check._hint(RuntimeError(RAISED)) == compile_check.LOCALE_HINT
    assert "TORCH_LOGS" in compile_check._hint(RuntimeError("graph break"))


@pytest.mark.slow
def test_under_an_ascii_locale_the_finding_says_why():
    """Under LC_ALL=C without UTF-8 mode, torch 2.13's inductor cannot read its own templates:
    the compile finding names the decode error and the locale (a torch that reads them as
    UTF-8 passes)."""
    env = {**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    result = subprocess.run([sys.executable, "-m", "gradverify", "check",
                             "specs/mul_constant.yaml", "--only", "compile"], cwd=ROOT,
                            capture_output=True, text=True, env=env, timeout=300)
    assert "Traceback" not in result.stderr, result.stderr
    if result.returncode == 0:
        assert " passed" in result.stdout
        return
    assert result.returncode == 1, result.stdout + result.stderr
    flat = " ".join(result.stdout.split())
    assert "raised: UnicodeDecodeError" in flat and "PYTHONUTF8=1" in flat, result.stdout
