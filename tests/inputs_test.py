"""Inputs: seeded, per dtype role, every init, binding to forward's parameters."""
from __future__ import annotations

import pytest
import torch

import zoo
from gradverify.errors import SpecError
from gradverify.inputs import InputMaker, bind, case_seed
from gradverify.specfile import load_text
from gradverify.target import introspect


def make(args_yaml: str, cls=zoo.Exp, seed: int = 0, dims: str = ""):
    (spec,) = load_text(f"target: m:F\n{dims}cases:\n  - name: c\n    args: {args_yaml}\n")
    case = spec.cases[0]
    info = introspect(cls)
    return InputMaker(case, bind(case, info, spec), info, case_seed(seed, info.target, case.name),
                      "cpu")


def test_same_seed_same_values_other_seed_other_values():
    a = make("[{shape: [3, 4]}]").args()
    b = make("[{shape: [3, 4]}]").args()
    c = make("[{shape: [3, 4]}]", seed=1).args()
    assert torch.equal(a.values[0], b.values[0])
    assert not torch.equal(a.values[0], c.values[0])


def test_roles_share_values_and_differ_in_dtype():
    maker = make("[{shape: [3, 4], dtype: float32}]")
    double, working = maker.args("double"), maker.args("working")
    assert double.values[0].dtype == torch.float64 and working.values[0].dtype == torch.float32
    assert torch.equal(double.values[0], working.values[0].double())
    assert double.values[0].requires_grad and double.values[0].is_leaf


def test_args_are_fresh_clones():
    maker = make("[{shape: [3]}]")
    first = maker.args()
    first.values[0].data.add_(1)
    assert not torch.equal(first.values[0], maker.args().values[0])


@pytest.mark.parametrize(("arg", "check"), [
    ("{shape: [50], init: positive}", lambda t: bool((t > 0).all())),
    ("{shape: [50], init: rand}", lambda t: bool(((t >= 0) & (t < 1)).all())),
    ("{shape: [50], init: uniform, low: 2, high: 3}", lambda t: bool(((t >= 2) & (t < 3)).all())),
    ("{shape: [200], init: normal, mean: 10, std: 0.1}", lambda t: abs(float(t.mean()) - 10) < 0.1),
    ("{shape: [4, 6], sorted: true}", lambda t: bool((t.diff(dim=-1) >= 0).all())),
    ("{shape: [2, 3], init: zeros}", lambda t: bool((t == 0).all())),
    ("{shape: [2, 3], init: ones}", lambda t: bool((t == 1).all())),
    ("{shape: [2, 3], init: arange}", lambda t: t.flatten().tolist() == [0, 1, 2, 3, 4, 5]),
    ("{shape: [3, 3], init: eye}", lambda t: torch.equal(t, torch.eye(3, dtype=t.dtype))),
    ("{shape: [4, 4], init: spd}", lambda t: bool((torch.linalg.eigvalsh(t) > 0).all())
     and torch.allclose(t, t.mT)),
    ("{shape: [3, 5], dtype: int64, init: randperm}",
     lambda t: all(sorted(r) == list(range(5)) for r in t.tolist())),
    ("{shape: [100], dtype: int64, init: randint, low: 3, high: 6}",
     lambda t: t.dtype == torch.int64 and set(t.tolist()) <= {3, 4, 5}),
    ("{shape: [100], dtype: bool}", lambda t: t.dtype == torch.bool and not t.requires_grad),
    ("{shape: [100], init: bernoulli, p: 1.0}", lambda t: bool((t == 1).all())),
    ("{values: [[1, 2], [3, 4]], dtype: float64}", lambda t: t.tolist() == [[1, 2], [3, 4]]),
    ("{shape: [3], dtype: complex64}", lambda t: t.dtype == torch.complex128 and t.requires_grad),
    ("{shape: [3], requires_grad: false}", lambda t: not t.requires_grad),
    ("{shape: [N, 2]}", lambda t: tuple(t.shape) == (5, 2)),
])
def test_inits(arg, check):
    tensor = make(f"[{arg}]", dims="dims: {N: 5}\n").args("double").values[0]
    with torch.no_grad():
        assert check(tensor), tensor


def test_python_values_and_sequences():
    maker = make("[{shape: [2]}, 3, {tuple: [1, {shape: [2]}]}, true, {list: [a, null]}]",
                 cls=zoo.ScaleShift)
    args = maker.args()
    assert args.values[1] == 3 and args.values[4] == ["a", None]
    assert isinstance(args.values[2], tuple) and args.values[2][0] == 1
    assert isinstance(args.values[2][1], torch.Tensor)
    assert args.names == ["x", "scale", "shift", "flag", "tag"]


def test_named_args_fill_skipped_defaults_in_order():
    maker = make("{x: {shape: [2, 3]}}", cls=zoo.OptionalBias)
    assert maker.args().names == ["x"]
    (spec,) = load_text("target: m:F\ncases:\n  - args: {bias: {shape: [3]}}\n")
    with pytest.raises(SpecError, match="missing argument 'x'"):
        bind(spec.cases[0], introspect(zoo.OptionalBias), spec)


@pytest.mark.parametrize(("args", "message"), [
    ("{wieght: {shape: [3]}}", "has no parameter 'wieght'"),
    ("[{shape: [3]}, {shape: [3]}, {shape: [3]}]", "takes 2 argument(s), the case gives 3"),
    ("[]", "needs at least 2 argument(s)"),
])
def test_binding_errors_name_forward_signature(args, message):
    (spec,) = load_text(f"target: m:F\ncases:\n  - args: {args}\n", "s.yaml")
    with pytest.raises(SpecError) as info:
        bind(spec.cases[0], introspect(zoo.SetupContextMul), spec)
    assert message in str(info.value)
    assert "SetupContextMul.forward(x, y)" in str(info.value) or "wieght" in str(info.value)
    assert str(info.value).startswith("s.yaml:3: cases[0].args")


def test_randint_high_may_name_a_dim():
    (spec,) = load_text("target: m:F\ncases:\n  - name: c\n    dims: {N: 3}\n"
                        "    args: [{shape: [50], dtype: int64, high: N}]\n")
    case = spec.cases[0]
    assert case.args[0][1].params == {"high": "N"}
    info = introspect(zoo.Exp)
    values = InputMaker(case, bind(case, info, spec), info, 0, "cpu").args("double").values
    assert int(values[0].max()) == 2 and int(values[0].min()) == 0
