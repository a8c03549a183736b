"""``gradverify init`` types an argument as an integer index when forward hands it to a helper
that indexes with it (a function of the module, one defined in forward, a method of the class,
a few calls deep), and, where reading the source cannot tell, when forward raises an indexing
error on a float guess. Before, such an argument was guessed a float tensor and the spec
stopped at ``IndexError: tensors used as indices must be long, ...``."""
from __future__ import annotations

import shlex

import pytest

import functions
from conftest import run_cli
from gradverify.init.guess import first_guesses
from gradverify.targets import introspect


def _function(name: str, call: str, backward: str) -> str:
    return f'''
class {name}(Function):
    @staticmethod
    def forward(ctx, x, chosen):
        ctx.save_for_backward(chosen)
        ctx.shape = x.shape
        return {call}

    @staticmethod
    def backward(ctx, grad):
        (chosen,) = ctx.saved_tensors
        return grad.new_zeros(ctx.shape).{backward}, None
'''


ROWS = "index_add(0, chosen, grad)"
COLS = "index_add(1, chosen, grad)"

HELPERS = functions.module('''
def _gather_rows(x, rows):
    return x[rows]


def _select(x, pick):
    return x.index_select(0, pick)


def _cols(x, which):
    return x[:, which]


def _take(x, where):
    return torch.gather(x, 1, where)


def _outer(t, i):
    return _middle(t, i)


def _middle(t, i):
    return _cols(t, i)


def _ping(t, v):
    return _pong(t, v) if t.numel() > 1e9 else t * v


def _pong(t, v):
    return _ping(t, v)


def _self(t, v, depth=0):
    return t * v if depth > 3 else _self(t, v, depth + 1)
''', _function("Rows", "_gather_rows(x, chosen)", ROWS),
    _function("Select", "_select(x, chosen)", ROWS),
    _function("Cols", "_cols(x, which=chosen)", COLS),
    _function("Take", "_take(x, chosen)", "scatter_add(1, chosen, grad)"),
    _function("Deep", "_outer(x, chosen)", COLS),
    _function("Nested", "pick(x, chosen)", ROWS).replace(
        "        ctx.save_for_backward(chosen)\n",
        "        def pick(t, k):\n            return t[:, k]\n\n"
        "        ctx.save_for_backward(chosen)\n", 1).replace(ROWS, COLS),
    _function("Static", "Static._rows(x, chosen)", ROWS).replace(
        "    @staticmethod\n    def backward",
        "    @staticmethod\n    def _rows(t, k):\n        return t[k]\n\n"
        "    @staticmethod\n    def backward", 1),
    _function("Cycle", "_ping(x, chosen) + _self(x, chosen)", "add(grad * 2 * chosen)"))


def _guess(name: str, parameter: str = "chosen"):
    import helpers

    return {g.name: g for g in first_guesses(introspect(getattr(helpers, name)))}[parameter]


@pytest.mark.parametrize(("name", "high"), [
    pytest.param("Rows", "N", id="x[rows]"),
    pytest.param("Select", "N", id="index_select"),
    pytest.param("Cols", "D", id="x[:, which], by keyword"),
    pytest.param("Take", "D", id="torch.gather"),
    pytest.param("Deep", "D", id="three calls deep"),
    pytest.param("Nested", "D", id="a function defined in forward"),
    pytest.param("Static", "N", id="a staticmethod of the class"),
])
def test_an_argument_a_helper_indexes_with_is_an_index(project, name, high):
    project.write("helpers.py", HELPERS)
    guess = _guess(name)
    assert (guess.kind, guess.dtype, guess.high) == ("tensor", "int64", high), guess


def test_recursive_helpers_end_and_say_nothing_of_a_multiplied_argument(project):
    project.write("helpers.py", HELPERS)
    assert _guess("Cycle").dtype == "float32"


def test_init_writes_helper_indexed_specs_that_check_runs(project):
    project.write("helpers.py", HELPERS)
    result = run_cli("init", "helpers:Cols", "-o", "cols.yaml")
    assert result.code == 0 and "(inputs run)" in result.stdout, result.output
    text = (project.root / "cols.yaml").read_text()
    assert "chosen: {shape: [N], dtype: int64, high: D}" in text
    assert "forward indexes x with them" in text
    next_line = result.stdout.splitlines()[-1].removeprefix("next: ")
    assert run_cli(*shlex.split(next_line)[1:]).code == 0


TABLE = functions.module('''
def _cols(x, which):
    return x[:, which]


def _rows(x, which):
    return torch.nn.functional.embedding(which.long(), x)


_HOW = {"cols": _cols, "rows": _rows}  # a table of helpers: not followed by reading
''', _function("TableCols", '_HOW["cols"](x, chosen)', COLS),
    _function("TableRows", '_HOW["rows"](x, chosen)', ROWS).replace(
        "index_add(0, chosen, grad)", "index_add(0, chosen.long(), grad)"))


@pytest.mark.parametrize(("name", "high", "error"), [
    pytest.param("TableCols", "D", "tensors used as indices", id="dtype error"),
    pytest.param("TableRows", "N", "out of range", id="float indices out of range"),
])
def test_an_indexing_error_on_a_float_guess_retries_it_as_an_index(project, name, high, error):
    project.write("table.py", TABLE)
    import table

    from gradverify.init.probe import evaluate

    info = introspect(getattr(table, name))
    guesses = first_guesses(info)
    assert guesses[1].dtype == "float32"  # reading the source cannot tell
    assert error in (evaluate(info, guesses).error or "")  # what the probe stopped at before
    result = run_cli("init", f"table:{name}", "-o", "t.yaml")
    assert result.code == 0 and "(inputs run)" in result.stdout, result.output
    text = (project.root / "t.yaml").read_text()
    assert f"chosen: {{shape: [N], dtype: int64, high: {high}}}" in text
    assert "forward raised an indexing error on floats" in text
    assert run_cli("check", "t.yaml").code == 0


MODULE = '''
import torch
from torch import nn


class Picker(nn.Module):
    def __init__(self, d: int = 4):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(d))

    def forward(self, x, chosen):
        return self._pick(x, chosen) * self.scale

    def _pick(self, t, k):
        return t[k]
'''


def test_a_method_called_on_self_is_followed(project):
    project.write("mods.py", MODULE)
    result = run_cli("init", "mods:Picker")
    assert result.code == 0, result.output
    assert "chosen: {shape: [N], dtype: int64, high: N}  # indices (int64), values in [0, N): " \
           "forward indexes x with them" in result.stdout
