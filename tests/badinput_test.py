"""A corpus of bad input: every item gets its exit code and a message, never a traceback."""
from __future__ import annotations

import json

import pytest

from conftest import run_cli

OPS = """
import torch
from torch.autograd import Function


class Double(Function):
    @staticmethod
    def forward(x, w=None):
        return x * 2

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return grad * 2, None


class Picky(Function):
    @staticmethod
    def forward(ctx, x):
        if x.shape[0] != 7:
            raise ValueError(f"expected 7 rows, got {x.shape[0]}")
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


class NotFunction:
    pass


def broken_factory():
    raise KeyError("nope")
"""

CORPUS = {
    "syntax.yaml": ("target: ops:Double\ncases: [\n", "YAML error"),
    "empty.yaml": ("", "empty spec file"),
    "tag.yaml": ("target: !!python/object/apply:os.system ['touch PWNED']\ncases: []\n",
                 "never constructs objects"),
    "unknown-key.yaml": ("target: ops:Double\ncases:\n  - args: {x: {shape: [2], dtyp: x}}\n",
                         "unknown key 'dtyp' (did you mean 'dtype'?)"),
    "bad-dtype.yaml": ("target: ops:Double\ncases:\n  - args: {x: {shape: [2], dtype: f32}}\n",
                       "unknown dtype 'f32'"),
    "negative-dim.yaml": ("target: ops:Double\ndims: {N: -1}\ncases:\n  - args: [{shape: [N]}]\n",
                          "dims.N: must be >= 0"),
    "unknown-dim.yaml": ("target: ops:Double\ncases:\n  - args: [{shape: [M]}]\n",
                         "unknown dim 'M'"),
    "too-many-args.yaml": ("target: ops:Double\ncases:\n  - args: [{shape: [2]}, null, 3]\n",
                           "takes 2 argument(s), the case gives 3"),
    "wrong-name.yaml": ("target: ops:Double\ncases:\n  - args: {X: {shape: [2]}}\n",
                        "has no parameter 'X'"),
    "missing-module.yaml": ("target: opz:Double\ncases:\n  - args: [{shape: [2]}]\n",
                            "cannot import module 'opz'"),
    "missing-class.yaml": ("target: ops:Dubble\ncases:\n  - args: [{shape: [2]}]\n",
                           "did you mean 'Double'"),
    "not-function.yaml": ("target: ops:NotFunction\ncases:\n  - args: [{shape: [2]}]\n",
                          "gradverify verifies torch.autograd.Function classes, custom ops"),
    "missing-factory.yaml": ("target: ops:Double\ncases:\n  - factory: ops:nofactory\n",
                             "factory 'ops:nofactory'"),
    "raising-factory.yaml": ("target: ops:Double\ncases:\n  - factory: ops:broken_factory\n",
                             "raised KeyError"),
    "too-large.yaml": ("target: ops:Double\ncases:\n  - args: [{shape: [100000, 100000]}]\n",
                       "needs 74.5 GiB for its float64 inputs"),
}


@pytest.fixture
def corpus(project):
    project.write("ops.py", OPS)
    project.write("specs/good.yaml", "target: ops:Double\ncases:\n  - args: [{shape: [3]}]\n")
    for name, (text, _) in CORPUS.items():
        project.write(f"specs/{name}", text)
    (project.root / "specs/latin1.yaml").write_bytes(b"target: ops:Double  # caf\xe9\ncases: []\n")
    return project


def test_corpus_exit_3_every_message_and_good_target_still_runs(corpus):
    result = run_cli("check", "--json", "report.json")
    assert result.code == 3
    assert "Traceback" not in result.output
    for name, (_, message) in CORPUS.items():
        line = next((text for text in result.flat.splitlines() if message in text), None)
        assert line is not None, (name, message)
    assert "not valid UTF-8" in result.stdout
    assert not (corpus.root / "PWNED").exists()
    data = json.loads((corpus.root / "report.json").read_text())
    assert [r["target"] for r in data["results"]] == ["ops:Double"]
    assert data["results"][0]["status"] == "pass"
    assert len(data["errors"]) == len(CORPUS) + 1
    assert data["summary"]["exit_code"] == 3


def test_forward_raising_is_a_case_error_exit_1(corpus):
    corpus.write("picky.yaml", "target: ops:Picky\ncases:\n  - args: [{shape: [3]}]\n")
    result = run_cli("check", "picky.yaml")
    assert result.code == 1
    assert "forward raised ValueError: expected 7 rows, got 3 on the inputs of case 'case0' " \
           "(x: [3] float64)" in result.flat
    assert "ops.py:" in result.stdout and "Traceback" not in result.output


def test_too_large_is_refused_before_allocating(corpus):
    result = run_cli("check", "specs/too-large.yaml")
    assert result.code == 3 and "limit 2 GiB" in result.stdout
    # the message names the tensor that takes the memory, and its shape
    assert "74.5 GiB of it for 'x' of shape [100000, 100000]" in result.flat


@pytest.mark.parametrize("device", ["cpu\n", "cuda:0\n", "cpu ", "cpu:01", "cuda:00", "cuda:\u0661",
                                    "cuda:99999999999", "cuda:128"])
def test_a_device_torch_would_refuse_is_a_usage_error_at_start(project, device):
    """A trailing newline once passed the spelling check, and torch refused it later: exit 4."""
    project.write("ops.py", OPS)
    result = run_cli("check", "ops:Double", "--device", device)
    assert result.code == 2, result.output
    assert "device: expected cpu, cuda or cuda:N" in result.stderr
    import gradverify
    import ops

    with pytest.raises(gradverify.errors.UsageError, match="device: expected"):
        gradverify.verify(ops.Double, device=device)


@pytest.mark.parametrize(("keyword", "value"), [("atol", float("nan")), ("rtol", float("inf")),
                                                ("atol", -1.0), ("eps", 0.0)])
def test_verify_refuses_a_tolerance_the_command_line_refuses(project, keyword, value):
    project.write("ops.py", OPS)
    import gradverify
    import ops

    with pytest.raises(gradverify.errors.UsageError, match=f"{keyword}: must be a finite"):
        gradverify.verify(ops.Double, **{keyword: value})


def test_list_exits_3_on_a_spec_it_cannot_read(project):
    import os

    os.mkfifo(project.root / "fifo.yaml")
    project.write("bad.yaml", "target: [\n")
    for name in ("fifo.yaml", "bad.yaml"):
        result = run_cli("list", name)
        assert result.code == 3, result.output
        assert f"{name}" in result.stderr and "invalid spec" in result.stderr
