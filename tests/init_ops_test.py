"""``gradverify init`` on custom ops, ops registered by name and modules with targets it cannot
introspect: guesses from the schema's types, shapes found by probing, file names without
colons, ``--import``, and a note (not an abort) for a target that cannot be introspected."""
from __future__ import annotations

from typing import Any

import pytest

import torchversions
from conftest import run_cli
from gradverify.init.guess import Guess, arg_value, first_guesses
from gradverify.init.nearby import alternatives
from gradverify.init.schema import typed_guesses
from gradverify.targets import resolve
from gradverify.targets.custom_op import library_ops

torchversions.require_test_ops(module=True)  # initzoo_lib defines custom ops at import

import initzoo_lib  # noqa: E402


def _typed(op: str) -> dict[str, Guess]:
    info = resolve(op, ("initzoo_types",))
    return {g.name: g for g in first_guesses(info, typed_guesses(info))}


@pytest.mark.parametrize(("name", "expected"), [
    pytest.param("x", {"shape": ["N", "D"]}, id="Tensor"),
    pytest.param("xs", {"list": [{"shape": ["N", "D"]}, {"shape": ["N", "D"]}]}, id="Tensor[]"),
    pytest.param("weights", {"list": [0.5, 2.0]}, id="float[]"),
    pytest.param("dims", {"list": [-1]}, id="int[]-dims"),
    pytest.param("size", {"list": ["N", "D"]}, id="SymInt[]-size"),
    pytest.param("stride", {"list": [1, 1]}, id="int[2]"),
    pytest.param("flag", False, id="bool"),
    pytest.param("alpha", 0.5, id="float"),
    pytest.param("value", 0.5, id="Scalar"),
    pytest.param("dim", -1, id="int-dim"),
    pytest.param("num_groups", "S", id="int-size"),
    pytest.param("other", {"shape": ["N", "D"]}, id="Tensor?"),
    pytest.param("mode", "", id="str-unknown"),
    pytest.param("dtype", None, id="ScalarType?"),
])
def test_an_op_schemas_types_make_the_guesses(name: str, expected: Any) -> None:
    assert arg_value(_typed("initzoo_types::every")[name]) == expected


def test_schema_defaults_strings_and_optionals() -> None:
    guesses = _typed("initzoo_types::every")
    assert guesses["eps"].kind == guesses["keep"].kind == "default"
    assert guesses["mode"].why.startswith("TODO")  # nothing in the source to compare it with
    assert guesses["other"].optional and guesses["extra"].optional
    last = list(alternatives(guesses["other"], list(guesses.values())))[-1]
    assert last.kind == "none" and arg_value(last) is None  # null, when no tensor runs
    shapes = [g.shape for g in alternatives(guesses["x"], list(guesses.values()))]
    assert shapes[-1] == ()  # a 0-dim tensor, when no other shape runs


def test_init_on_ops_writes_specs_that_check_passes(project) -> None:
    result = run_cli("init", "initzoo", "-o", "specs/")
    assert result.code == 0, result.output
    for op in ("weighted_sum", "sum_dims", "rms_norm", "temp_softmax", "shift_by", "reduce",
               "add_maybe"):
        assert f"wrote specs/initzoo.{op}.yaml: initzoo:{op} (inputs run)" in result.stdout
    assert not [p for p in (project.root / "specs").iterdir() if ":" in p.name]

    def spec(op: str) -> str:
        return (project.root / f"specs/initzoo.{op}.yaml").read_text()

    assert "target: initzoo:rms_norm" in spec("rms_norm")
    assert "xs: {list: [{shape: [N, D]}, {shape: [N, D]}]}" in spec("weighted_sum")
    assert "weights: {list: [0.5, 2.0]}" in spec("weighted_sum")
    assert "dims: {list: [-1]}" in spec("sum_dims") and "keepdim: false" in spec("sum_dims")
    assert "x: {shape: [N, D]}" in spec("rms_norm") and "weight: {shape: [D]}" in spec("rms_norm")
    assert "temperature: {shape: [], init: positive}" in spec("temp_softmax")
    assert "amount: {shape: []}" in spec("shift_by")
    assert "mode: sum" in spec("reduce") and "dim: -1" in spec("reduce")
    check = run_cli("check", "specs")
    assert check.code == 0, check.output
    assert "error:" not in check.output
    # Run again (after adding a target, say): the specs there, perhaps edited, are kept.
    (project.root / "specs/initzoo.rms_norm.yaml").write_text(spec("rms_norm") + "# mine\n")
    (project.root / "specs/initzoo.reduce.yaml").unlink()
    again = run_cli("init", "initzoo", "-o", "specs/")
    assert again.code == 0, again.output
    assert "wrote specs/initzoo.reduce.yaml" in again.stdout
    assert "specs/initzoo.rms_norm.yaml exists (kept" in again.output
    assert spec("rms_norm").endswith("# mine\n")


def test_init_finds_ops_a_module_registers_by_name(project) -> None:
    assert library_ops(initzoo_lib) == ["initzoo_lib::reshape_to", "initzoo_lib::softclip"]
    result = run_cli("init", "initzoo_lib", "-o", "specs/")
    assert result.code == 0, result.output
    for op in ("reshape_to", "softclip"):
        assert f"wrote specs/initzoo_lib.{op}.yaml: initzoo_lib::{op} (inputs run)" \
            in result.stdout
        text = (project.root / f"specs/initzoo_lib.{op}.yaml").read_text()
        assert f"target: initzoo_lib::{op}\nimports: [initzoo_lib]" in text
    assert "shape: {list: [N, D]}" in (project.root / "specs/initzoo_lib.reshape_to.yaml"
                                       ).read_text()
    check = run_cli("check", "specs")
    assert check.code == 0, check.output


def test_init_on_an_op_name_takes_imports(project) -> None:
    result = run_cli("init", "initzoo_lib::softclip", "--import", "initzoo_lib")
    assert result.code == 0, result.output
    assert "target: initzoo_lib::softclip\nimports: [initzoo_lib]" in result.stdout
    missing = run_cli("init", "initzoo_nowhere::op")
    assert missing.code == 3 and "pass --import MODULE" in missing.output
    bad = run_cli("init", "initzoo_nowhere::op", "--import", "no_such_module_here")
    assert bad.code == 3 and "no_such_module_here" in bad.output


BLOCKS = '''
import torch
from torch import nn


class Gate(nn.Module):
    """Holds parameters; no forward."""

    def __init__(self, dim):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(dim))


class Broken(nn.Module):
    def __init__(self):
        super().__init__()
        raise RuntimeError("needs a checkpoint file")

    def forward(self, x):
        return x


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.gate = Gate(dim)
        self.linear = nn.Linear(dim, dim)

    def forward(self, x):
        return self.linear(x) * self.gate.gain
'''


def test_init_skips_a_target_it_cannot_introspect_with_a_note(project) -> None:
    project.write("blocks.py", BLOCKS)
    result = run_cli("init", "blocks", "-o", "specs/")
    assert result.code == 0, result.output
    assert "note: skipped blocks:Gate: does not define forward  [GV005]" in result.stderr
    assert "note: skipped blocks:Broken: building blocks:Broken(**init_args) raised " \
           "RuntimeError: needs a checkpoint file  [GV020]" in result.stderr
    assert "wrote specs/Block.yaml: blocks:Block (inputs run)" in result.stdout
    assert sorted(p.name for p in (project.root / "specs").iterdir()) == ["Block.yaml"]
    assert run_cli("check", "specs").code == 0
    stdout = run_cli("init", "blocks")
    assert stdout.code == 0 and stdout.stdout.count("target: blocks:") == 1
    assert "note: skipped blocks:Gate" in stdout.stderr


def test_a_module_whose_every_target_fails_is_an_input_error(project) -> None:
    project.write("holders.py", BLOCKS.split("class Broken")[0])
    result = run_cli("init", "holders")
    assert result.code == 3 and "no target could be introspected" in result.output
    assert "holders:Gate: does not define forward" in result.output


OPTIONAL = '''
import torch
from torch.autograd import Function


class NoMaskYet(Function):
    @staticmethod
    def forward(ctx, x, mask=None):
        if mask is not None:
            raise NotImplementedError("masks are not supported yet")
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2, None
'''


def test_an_optional_tensor_that_never_runs_is_null(project) -> None:
    project.write("optional.py", OPTIONAL)
    result = run_cli("init", "optional:NoMaskYet")
    assert result.code == 0, result.output
    assert "mask: null" in result.stdout and "ran forward and backward" in result.stdout
