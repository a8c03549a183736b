"""Every report format survives whatever text user code puts in a report (lone surrogates,
NUL, control characters, megabytes) and copies at most its first and last 64 KiB."""
from __future__ import annotations

import pytest

from gradverify.report import safe
from gradverify.report.formats import FORMATS
from gradverify.report.safe import HEAD_BYTES, TAIL_BYTES, bounded
from gradverify.run import output
from tests.conftest import run_cli

MESSAGE = "bad \udcff text \x00 \x1b[31m ::error::" + "y" * 300_000 + " the end"

HOSTILE = f'''
import torch


class Hostile(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        raise ValueError({MESSAGE!r})

    @staticmethod
    def backward(ctx, grad):
        return grad
'''


def test_text_is_cut_as_printed_output_is():
    assert (safe.HEAD_BYTES, safe.TAIL_BYTES) == (output.HEAD_BYTES, output.TAIL_BYTES)


def test_bounded_keeps_both_ends_and_says_what_it_left_out():
    text = "a" * HEAD_BYTES + "b" * 1000 + "c" * TAIL_BYTES
    cut = bounded(text)
    assert cut.startswith("a" * HEAD_BYTES) and cut.endswith("c" * TAIL_BYTES)
    assert "[... 1000 characters left out ...]" in cut and "b" not in cut
    assert bounded("short \udcff") == "short \\udcff"
    assert bounded("plain") == "plain"


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_writes_hostile_text(project, fmt):
    project.write("textbomb.py", HOSTILE)
    result = run_cli("check", "textbomb:Hostile", "--format", fmt, "--output", f"report.{fmt}")
    assert result.code == 1, result.output
    written = (project.root / f"report.{fmt}").read_bytes()
    text = written.decode("utf-8")  # well formed: no lone surrogate reached the file
    assert "y" * 1000 in text or "y" * 1000 in text.replace("\\n", "\n")
    assert len(written) < 3 * (HEAD_BYTES + TAIL_BYTES)
    assert "the end" in text


def test_the_pytest_plugin_s_failure_texts_are_bounded_too():
    """An import error's message, or a broken spec's, reaches pytest through ``CheckFailed``:
    cut and encodable as in every report format."""
    from gradverify.pytest_plugin import CheckFailed

    text = str(CheckFailed(MESSAGE))
    assert text == bounded(MESSAGE) and len(text) < HEAD_BYTES + TAIL_BYTES + 100
    text.encode("utf-8")
