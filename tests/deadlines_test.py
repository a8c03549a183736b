"""What hangs is bounded by --timeout where one is given: a target's import in `check`, and
`init`'s probe of a target (each by 120 s otherwise)."""
from __future__ import annotations

import time

import pytest

from conftest import run_cli

HANGS_ON_IMPORT = """
import threading

threading.Event().wait()  # never set
"""

HANGS_IN_FORWARD = """
import threading

import torch


class Stuck(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        threading.Event().wait()  # a kernel that deadlocks on what init guessed
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad
"""


@pytest.mark.slow  # a hang stopped after 10 s
def test_a_hanging_import_is_bounded_by_the_timeout(project):
    project.write("stuck.py", HANGS_ON_IMPORT)
    started = time.monotonic()
    result = run_cli("check", "stuck:Anything", "--timeout", "10", isolate=True)
    assert time.monotonic() - started < 90
    assert result.code == 3, result.output
    assert "importing stuck did not finish within 10 s" in result.flat


@pytest.mark.slow  # a hang stopped after 8 s
def test_a_hanging_init_probe_is_bounded_by_the_timeout(project):
    project.write("stuck.py", HANGS_IN_FORWARD)
    started = time.monotonic()
    result = run_cli("init", "stuck:Stuck", "--timeout", "8")
    assert time.monotonic() - started < 90
    assert result.code == 0, result.output
    assert "did not finish within 8 s" in result.stdout
