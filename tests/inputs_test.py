"""Inputs: seeded, per dtype role, every init, binding to forward's parameters."""
from __future__ import annotations

import pytest
import torch

import zoo
from gradverify.case.binding import bind
from gradverify.case.inputs import InputMaker, case_seed
from gradverify.errors import InputError, SpecError
from gradverify.spec.file import load_text
from gradverify.targets import introspect


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


def test_a_bare_list_by_name_is_for_a_star_parameter_only():
    (spec,) = load_text("target: m:F\ncases:\n  - args:\n      x: [1, 2]\n", "s.yaml")
    with pytest.raises(SpecError, match=r"write \{tuple: \[...\]\}.*does not have"):
        bind(spec.cases[0], introspect(zoo.Exp), spec)


def test_star_parameter_items_are_named_by_position():
    (spec,) = load_text("target: m:F\ncases:\n  - args:\n      xs: [{shape: [2]}, {shape: [2]}]\n"
                        "  - args: [{shape: [2]}, {shape: [2]}, {shape: [2]}]\n")
    info = introspect(zoo.SumOfMany)
    named, listed = (bind(case, info, spec) for case in spec.cases)
    assert named.names == ("xs[0]", "xs[1]")
    assert listed.names == ("xs[0]", "xs[1]", "xs[2]")


# ----------------------------------------------------------------------------- factories


def _factory_maker(factory: str, cls=zoo.Exp, dtype: str = "float32"):
    (spec,) = load_text(f"target: m:F\ncases:\n  - name: c\n    factory: {factory}\n"
                        f"    dtype: {dtype}\n")
    case = spec.cases[0]
    info = introspect(cls)
    return InputMaker(case, bind(case, info, spec), info, 7, "cpu")


def test_a_factory_without_device_has_its_tensors_moved_to_the_case_s_device():
    """The bug (seen on CUDA): a factory that takes no ``device`` left its tensors on the CPU
    under ``--device cuda``, so the case ran on the CPU. ``meta`` stands in for CUDA here."""
    (spec,) = load_text("target: m:F\ncases:\n  - name: c\n"
                        "    factory: zoo:make_float32_sparse\n")
    case = spec.cases[0]
    info = introspect(zoo.FactoryWithoutDtype)
    maker = InputMaker(case, bind(case, info, spec), info, 7, "meta")
    for role in ("double", "working"):
        tensors = [v for v in maker.args(role).values if isinstance(v, torch.Tensor)]
        assert tensors and {t.device.type for t in tensors} == {"meta"}, role


def test_a_factory_tensor_that_refuses_to_move_is_a_spec_error_naming_it():
    (spec,) = load_text("target: m:F\ncases:\n  - name: c\n"
                        "    factory: zoo:make_quantized_weight\n")
    case = spec.cases[0]
    info = introspect(zoo.QuantizedScale)
    maker = InputMaker(case, bind(case, info, spec), info, 7, "meta")
    with pytest.raises(InputError, match=r"tensor 'weight' stays on cpu when moved to meta.*"
                                         r"take `device`") as caught:
        maker.args("double")
    assert caught.value.code == "GV006"


def test_factory_without_dtype_is_converted_like_yaml_inputs():
    maker = _factory_maker("zoo:make_float32_sparse", zoo.FactoryWithoutDtype)
    double, working = maker.args("double"), maker.args("working")
    assert double.values[1].dtype == double.values[3].dtype == torch.float64
    assert working.values[1].dtype == torch.float32
    assert double.values[0].dtype == torch.int64 and double.values[2] == 6
    assert torch.equal(working.values[1].double(), double.values[1])
    assert double.diff_positions == [1, 3]


def test_factory_is_called_once_and_roles_hold_the_same_values():
    maker = _factory_maker("zoo:make_in_dtype", zoo.FactoryWithDtype)
    double, working, widened = maker.args("double"), maker.args("working"), maker.args("widened")
    assert (double.values[0].dtype, working.values[0].dtype, widened.values[0].dtype) == \
        (torch.float64, torch.float32, torch.float64)
    # the working values are the float64 ones rounded; widened is exactly them again
    assert torch.equal(working.values[0], double.values[0].float())
    assert torch.equal(widened.values[0], working.values[0].double())


def make_ignoring_dtype(generator, dtype):
    return (torch.randn(3, 4, generator=generator),)


def test_factory_that_takes_dtype_and_ignores_it_is_a_spec_error():
    maker = _factory_maker("inputs_test:make_ignoring_dtype")
    with pytest.raises(InputError) as info:
        maker.args("double")
    assert info.value.code == "GV006"
    assert "takes `dtype` but returned 'x' as float32 when called with dtype=float64" \
        in str(info.value)


def test_a_subclass_keeps_its_class_in_every_role_and_copy():
    maker = _factory_maker("zoo:make_sorted_index", zoo.SegmentSumSortedIndex)
    for role in ("double", "working", "widened"):
        index = maker.args(role).values[0]
        assert type(index) is zoo.SortedIndex, role
    # the plain ways of copying drop it: why fresh_leaf exists
    assert type(maker.args().values[0].detach()) is torch.Tensor


def test_a_layout_that_drops_the_subclass_is_not_tried():
    from gradverify.checks import _tensors as tk

    index = maker_index = _factory_maker("zoo:make_sorted_index",
                                         zoo.SegmentSumSortedIndex).args().values[0]
    assert tk.noncontiguous(maker_index, "strided") is None
    assert tk.noncontiguous(index.as_subclass(torch.Tensor), "strided") is not None


def test_the_bundled_sparse_factory_draws_each_position_once():
    import torch

    from gradverify.examples.sparse import make_sparse_inputs

    for seed in range(5):
        made = make_sparse_inputs(torch.Generator().manual_seed(seed), torch.float64,
                                  {"R": 3, "C": 4, "K": 2, "NNZ": 12})
        positions = {tuple(p) for p in made["indices"].t().tolist()}
        assert len(positions) == 12  # all of the 3 x 4 matrix, none twice
