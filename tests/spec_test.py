"""Spec validation: each kind of mistake gives file:line, the key path and a useful message."""
from __future__ import annotations

import pytest

from gradverify.errors import SpecError
from gradverify.spec.file import load_file, load_text
from gradverify.specmodel import COMPLEX, FLOATING, SeqArg, TensorArg, ValueArg

GOOD_TARGET = "target: m:F\n"

INVALID = [
    pytest.param("cases:\n  - args: [{shape: [3, 4]}\n", 3,
                 "while parsing a flow sequence (line 2)", id="yaml-syntax"),
    pytest.param("", None, "empty spec file", id="empty"),
    pytest.param("# only a comment\n", None, "empty spec file", id="only-comment"),
    pytest.param("- a\n- b\n", 1, "expected a spec (a mapping), got a list", id="not-mapping"),
    pytest.param("target: m:F\ncases: []\n", 2, "cases: expected a non-empty list", id="no-cases"),
    pytest.param("target: m:F\n", 1, "missing key 'cases'", id="missing-cases"),
    pytest.param("targt: m:F\ncases: [{args: []}]\n", 1,
                 "unknown key 'targt' (did you mean 'target'?)", id="misspelt-top-key"),
    pytest.param(GOOD_TARGET + "cases:\n  - args:\n      x: {shpe: [3]}\n", 4,
                 "cases[0].args.x: an argument mapping must be a tensor", id="misspelt-shape"),
    pytest.param(GOOD_TARGET + "cases:\n  - args:\n      x: {shape: [3], dtyp: float64}\n", 4,
                 "cases[0].args.x.dtyp: unknown key 'dtyp' (did you mean 'dtype'?)",
                 id="misspelt-tensor-key"),
    pytest.param(GOOD_TARGET + "cases:\n  - args:\n      x: {shape: [3], dtype: flaot32}\n", 4,
                 "cases[0].args.x.dtype: unknown dtype 'flaot32' (did you mean 'float32'?)",
                 id="bad-dtype"),
    pytest.param(GOOD_TARGET + "cases:\n  - args:\n      x: {shape: [3], init: gauss}\n", 4,
                 "unknown init 'gauss'", id="bad-init"),
    pytest.param(GOOD_TARGET + "cases:\n  - args:\n      x: {shape: [-1]}\n", 4,
                 "cases[0].args.x.shape[0]: must be >= 0", id="negative-size"),
    pytest.param(GOOD_TARGET + "cases:\n  - args:\n      x: {shape: [N]}\n", 4,
                 "cases[0].args.x.shape[0]: unknown dim 'N'", id="unknown-dim"),
    pytest.param(GOOD_TARGET + "dims: {N: -2}\ncases:\n  - args: []\n", 2, "dims.N: must be >= 0",
                 id="negative-dim"),
    pytest.param(GOOD_TARGET + "dims: {N: [1, 2.5]}\ncases:\n  - args: []\n", 2,
                 "dims.N: expected an integer", id="float-dim"),
    pytest.param(GOOD_TARGET + "cases:\n  - args:\n      x: {shape: [3], dtype: int64, "
                 "requires_grad: true}\n", 4, "only floating-point and complex tensors can "
                 "require grad", id="int-requires-grad"),
    pytest.param(GOOD_TARGET + "cases:\n  - args:\n      x: {shape: [3], dtype: int64, "
                 "init: randn}\n", 4, "makes floating-point values", id="float-init-int-dtype"),
    pytest.param(GOOD_TARGET + "cases:\n  - args:\n      x: {shape: [3], init: uniform, "
                 "low: 2, high: 1}\n", 4, "'high' (1) must be greater than 'low' (2)",
                 id="uniform-high-low"),
    pytest.param(GOOD_TARGET + "cases:\n  - args:\n      x: {shape: [3], p: 0.5}\n", 4,
                 "'p' applies only to init: bernoulli", id="param-for-wrong-init"),
    pytest.param(GOOD_TARGET + "cases:\n  - args:\n      x: {shape: [3, 4], init: spd}\n", 4,
                 "last two are equal", id="spd-not-square"),
    pytest.param(GOOD_TARGET + "cases:\n  - args:\n      x: {values: [[1, 2], [3]]}\n", 4,
                 "ragged nested list", id="ragged-values"),
    pytest.param(GOOD_TARGET + "cases:\n  - args:\n      x: {shape: [3], values: [1, 2, 3]}\n",
                 4, "either 'shape' or 'values'", id="shape-and-values"),
    pytest.param(GOOD_TARGET + "cases:\n  - args: [[1, 2]]\n", 3,
                 "write {tuple: [...]} or {list: [...]}", id="bare-list-arg"),
    pytest.param(GOOD_TARGET + "cases:\n  - name: a\n  - name: b\n", 3, "missing 'args'",
                 id="case-without-args"),
    pytest.param(GOOD_TARGET + "cases:\n  - {name: a, args: []}\n  - {name: a, args: []}\n", 4,
                 "duplicate case name 'a'", id="duplicate-case"),
    pytest.param(GOOD_TARGET + "checks: {gradchek: false}\ncases:\n  - args: []\n", 2,
                 "checks.gradchek: unknown check 'gradchek' (did you mean 'gradcheck'?)",
                 id="unknown-check"),
    pytest.param(GOOD_TARGET + "checks: {gradcheck: {mode: quick}}\ncases:\n  - args: []\n", 2,
                 "checks.gradcheck.mode: invalid value 'quick'", id="bad-check-option"),
    pytest.param(GOOD_TARGET + "expect: {gradcheck: ''}\ncases:\n  - args: []\n", 2,
                 "expect.gradcheck: expected a non-empty string", id="empty-expect-reason"),
    pytest.param(GOOD_TARGET + "tolerance: {atol: -1}\ncases:\n  - args: []\n", 2,
                 "tolerance.atol: must be >= 0", id="negative-tolerance"),
    pytest.param(GOOD_TARGET + "tolerance: {atl: 1}\ncases:\n  - args: []\n", 2,
                 "unknown key 'atl' (did you mean 'atol'?)", id="misspelt-tolerance"),
    pytest.param("target: not a target\ncases:\n  - args: []\n", 1,
                 "target: expected 'package.module:Name'", id="bad-target-syntax"),
    pytest.param(GOOD_TARGET + "cases:\n  - args: []\n    factory: m:make\n", 3,
                 "either 'args' or 'factory'", id="args-and-factory"),
    pytest.param("a: !!python/object/apply:os.system [echo hacked]\n", 1,
                 "never constructs objects", id="python-tag"),
    pytest.param("a: 1\na: 2\n", 2, "duplicate key 'a'", id="duplicate-key"),
    pytest.param(GOOD_TARGET + "version: 2\ncases:\n  - args: []\n", 2,
                 "unsupported spec version 2", id="version"),
    pytest.param(GOOD_TARGET + "compose: some\ncases:\n  - args: []\n", 2,
                 "compose: expected all (every composition check", id="compose-value"),
]


@pytest.mark.parametrize(("text", "line", "message"), INVALID)
def test_invalid_spec_is_rejected_with_location(text, line, message):
    with pytest.raises(SpecError) as info:
        load_text(text, "specs/x.yaml")
    error = info.value
    assert message in str(error)
    assert error.file == "specs/x.yaml"
    assert error.line == line
    assert str(error).startswith(f"specs/x.yaml{':' + str(line) if line else ''}: ")


def test_file_errors(tmp_path):
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(b"target: m:F\ncases:\n  - name: caf\xe9\n")
    with pytest.raises(SpecError, match="not valid UTF-8") as info:
        load_file(bad)
    assert info.value.line == 3
    with pytest.raises(SpecError, match="cannot read spec file"):
        load_file(tmp_path / "missing.yaml")


def test_full_spec_parses():
    (spec,) = load_text("""
target: pkg.mod:Func
reference: pkg.mod:ref
dims: {N: [1, 4], D: 3}
tolerance: {atol: 1.0e-5, rtol: 1.0e-3, eps: 1.0e-6, nondet_tol: 0.0}
checks:
  gradgradcheck: false
  gradcheck: {mode: slow}
expect:
  contract: "known issue"
cases:
  - name: with-bias
    args:
      input: {shape: [N, D]}
      weight: {shape: [5, D], init: uniform, low: -1, high: 1}
      bias: {shape: [5], dtype: float64, requires_grad: false}
      dim: 1
      flag: true
      pair: {tuple: [1, 1]}
      names: {list: [a, b]}
  - name: list-args
    args: [{shape: [N, D]}, {shape: [5, D]}, null]
    tolerance: {atol: 1.0e-4}
    expect: {gradcheck: "case-level"}
  - name: factory
    factory: pkg.testing:make_inputs
    dtype: float64
""", "s.yaml")
    assert spec.target == "pkg.mod:Func" and spec.reference == "pkg.mod:ref"
    assert [c.name for c in spec.cases] == ["with-bias[N=1]", "with-bias[N=4]", "list-args[N=1]",
                                            "list-args[N=4]", "factory[N=1]", "factory[N=4]"]
    case = spec.cases[1]
    assert case.dims == {"N": 4, "D": 3}
    args = dict(case.args)
    assert args["input"] == TensorArg(shape=("N", "D"))
    assert args["weight"].init == "uniform" and args["weight"].params == {"low": -1, "high": 1}
    assert not args["bias"].differentiable and args["bias"].dtype == "float64"
    assert args["dim"] == ValueArg(1) and args["flag"] == ValueArg(True)
    assert args["pair"] == SeqArg("tuple", (ValueArg(1), ValueArg(1)))
    assert args["names"] == SeqArg("list", (ValueArg("a"), ValueArg("b")))
    assert spec.checks["gradgradcheck"].enabled is False
    assert spec.checks["gradcheck"].options == {"mode": "slow"}
    assert spec.expect == {"contract": "known issue"}
    assert spec.cases[2].tolerance.atol == 1e-4
    assert spec.cases[2].expect == {"gradcheck": "case-level"}
    assert spec.cases[4].factory == "pkg.testing:make_inputs" and spec.cases[4].dtype == "float64"


def test_dims_sweep_only_over_dims_a_case_uses():
    (spec,) = load_text("target: m:F\ndims: {N: [1, 2], M: [3, 4]}\ncases:\n"
                        "  - {name: a, args: [{shape: [N]}]}\n"
                        "  - {name: b, args: [{shape: [N, M]}]}\n")
    assert [c.name for c in spec.cases] == ["a[N=1]", "a[N=2]", "b[N=1,M=3]", "b[N=1,M=4]",
                                            "b[N=2,M=3]", "b[N=2,M=4]"]


def test_multi_document_stream():
    specs = load_text("target: m:A\ncases: [{args: []}]\n---\ntarget: m:B\ncases: [{args: []}]\n")
    assert [s.target for s in specs] == ["m:A", "m:B"]
    assert [s.line for s in specs] == [1, 4]


def test_dtype_aliases_and_defaults():
    (spec,) = load_text("target: m:F\ncases:\n  - args: [{shape: [2], dtype: double}, "
                        "{shape: [2], dtype: long}, {shape: [2], dtype: bool}]\n")
    a, b, c = (arg for _, arg in spec.cases[0].args)
    assert (a.dtype, b.dtype, c.dtype) == ("float64", "int64", "bool")
    assert (a.resolved_init, b.resolved_init, c.resolved_init) == ("randn", "randint", "bernoulli")
    assert a.differentiable and not b.differentiable and not c.differentiable
    assert FLOATING.isdisjoint(COMPLEX)


@pytest.mark.parametrize(("text", "expected"), [
    ("1e-5", 1e-5), ("1E5", 1e5), (".5", 0.5), ("-2.5e3", -2500.0), ("+1e0", 1.0),
    ("1.0e-5", 1e-5), ("3", 3), ("0x10", 16), ("e5", "e5"), ("1e", "1e"), ("1.2.3", "1.2.3"),
    ("'1e-5'", "1e-5"),
])
def test_numbers_read_as_python_and_yaml_1_2_read_them(text, expected):
    from gradverify.spec.yamlio import load_documents

    ((doc, _),) = load_documents(f"value: {text}\n", "s.yaml")
    assert doc["value"] == expected and type(doc["value"]) is type(expected)


@pytest.mark.parametrize("value", [1e-5, 1e5, 1e300, -3.25e-8, 0.5, 2.0, float("inf"), 7])
def test_numbers_are_written_to_read_back_as_the_same_type_by_any_yaml(value):
    import yaml

    from gradverify.spec.yamlio import flow_scalar, load_documents

    text = flow_scalar(value)
    ((doc, _),) = load_documents(f"value: {text}\n", "s.yaml")
    for loaded in (doc["value"], yaml.safe_load(text)):  # ours (YAML 1.2) and PyYAML's 1.1
        assert loaded == value and type(loaded) is type(value), (text, loaded)


def test_a_string_for_a_float_parameter_is_a_spec_error_at_its_line(tmp_path):
    from gradverify.targets import introspect

    module = tmp_path / "epsmod.py"
    module.write_text("from torch.autograd import Function\n\n"
                      "class AddEps(Function):\n    @staticmethod\n"
                      "    def forward(ctx, x, eps: float):\n        return x + eps\n\n"
                      "    @staticmethod\n    def backward(ctx, grad):\n"
                      "        return grad, None\n")
    import importlib.util

    spec_obj = importlib.util.spec_from_file_location("epsmod", module)
    loaded = importlib.util.module_from_spec(spec_obj)
    spec_obj.loader.exec_module(loaded)
    (spec,) = load_text("cases:\n  - name: a\n    args: {x: {shape: [3]}, eps: 1e-5}\n"
                        "  - name: b\n    args: {x: {shape: [3]}, eps: 'tiny'}\n", "s.yaml")
    from gradverify.case.binding import bind

    info = introspect(loaded.AddEps)
    assert bind(spec.cases[0], info, spec).args[1].value == 1e-5
    with pytest.raises(SpecError, match="annotated float and needs a float") as raised:
        bind(spec.cases[1], info, spec)
    assert "s.yaml:5" in str(raised.value) and "cases[1].args.eps" in str(raised.value)
    # at the argument's own line, every wrong argument of the case; an int given a float too
    module.write_text(module.read_text().replace("eps: float):", "eps: float, n: int = 1):"))
    spec_obj.loader.exec_module(loaded)
    (spec,) = load_text("cases:\n  - name: a\n    args:\n      x: {shape: [3]}\n"
                        "      eps: abc\n      n: 2.0\n", "t.yaml")
    with pytest.raises(SpecError) as raised:
        bind(spec.cases[0], introspect(loaded.AddEps), spec)
    assert "t.yaml:5" in str(raised.value) and "the string 'abc'" in str(raised.value)
    (other,) = raised.value.others
    assert "t.yaml:6" in str(other) and "'n' is annotated int" in str(other)
    assert "the float 2.0; write a whole number" in str(other)


@pytest.mark.parametrize(("annotation", "name"), [
    (float, "float"), ("float", "float"), ("Optional[float]", "float"), ("float | None", "float"),
    ("float?", "float"), ("float | str", None), ("int | Literal['auto']", None), (str, "str"),
])
def test_an_annotation_a_string_cannot_satisfy_is_read_from_its_members(annotation, name):
    from gradverify.case.binding import _annotation_name

    assert _annotation_name(annotation) == name


def test_todo_and_guesses_are_read_from_init_specs_only_one_document_at_a_time():
    init = ("# gradverify spec for m:F\n# TODO: no inputs tried made forward and backward run\n"
            "target: m:F\ndims: {N: 5, D: 4}\ncases:\n  - name: basic\n    args:\n"
            "      x: {shape: [N, D]}   # a float tensor\n"
            "      w: {shape: [D]}      # per feature: [D]\n")
    own = "# TODO: more cases\ntarget: m:G\ncases:\n  - name: a\n    args:\n" \
          "      x: {shape: [3]}   # mine\n"
    first, second = load_text(init + "---\n" + own, "s.yaml")
    assert first.todo == ((2, "# TODO: no inputs tried made forward and backward run"),)
    assert first.guessed == {"x": (8, "a float tensor"), "w": (9, "per feature: [D]")}
    assert second.todo == () and second.guessed == {}  # the user's own TODO: not init's
    (alone,) = load_text(own, "t.yaml")
    assert alone.todo == () and alone.guessed == {}


@pytest.mark.parametrize(("value", "expected"), [("all", True), ("true", True),
                                                 ("false", False)])
def test_compose_at_the_top_of_a_spec(value, expected):
    """``compose: all`` (or true, false) is read into ``Spec.compose``; before, the key was
    unknown and the spec refused."""
    (spec,) = load_text(GOOD_TARGET + f"compose: {value}\ncases:\n  - args: []\n", "x.yaml")
    assert spec.compose is expected
    (plain,) = load_text(GOOD_TARGET + "cases:\n  - args: []\n", "x.yaml")
    assert plain.compose is None
