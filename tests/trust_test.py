"""Verdicts users can trust: no false failure on correct Functions that are easy to flag, and
never weaker than bare ``torch.autograd.gradcheck``/``gradgradcheck`` (docs/checks.md)."""
from __future__ import annotations

import ast
import inspect
import os
import re
import textwrap
import traceback
import warnings
from typing import Any, ClassVar

import numpy as np
import pytest
import torch

import zoo
from gradverify import torchcompat, verify
from gradverify.case.binding import bind
from gradverify.case.inputs import InputMaker, case_seed, fresh_leaf
from gradverify.report.text import said
from gradverify.results import CheckResult, Severity, Status
from gradverify.spec import file as spec_mod
from gradverify.targets import introspect

EVERY_FUNCTION = [*zoo.BROKEN, *zoo.CORRECT, *zoo.HARD]
NAMES = [cls.__name__ for cls in EVERY_FUNCTION]
assert len(NAMES) == len(set(NAMES)), "zoo names must be unique"


def _checks(report) -> dict[str, Any]:
    """The checks of the report's first case by name (the case the differential test uses)."""
    return {c.name: c for c in report.results[0].checks}


# ----------------------------------------------------------------------------- no false failure


def test_the_corpus_is_large_enough():
    assert len(zoo.HARD) >= 30


@pytest.mark.parametrize("cls", zoo.HARD, ids=lambda c: c.__name__)
def test_hard_correct_function_passes_every_default_check(cls):
    report = verify(cls, spec=cls.SPEC)
    assert not report.errors, [e.message for e in report.errors]
    allowed = getattr(cls, "WARNS", {})
    for check in _checks(report).values():
        codes = {f.code for f in check.findings if f.severity != Severity.INFO}
        if (check.status == Status.WARN and codes <= {allowed.get(check.name)}) \
                or zoo.old_style_warning(check):
            continue
        assert check.status in (Status.PASS, Status.SKIP, Status.XFAIL), \
            (check.name, check.status, [f.message for f in check.findings])
        if check.status == Status.SKIP:
            assert check.summary, f"{check.name} skipped without a reason"
    assert report.ok


def test_every_check_has_a_correct_function_its_naive_version_would_flag():
    from gradverify.registry import REGISTRY

    docs = " ".join(" ".join((cls.__doc__ or "").split()) for cls in zoo.HARD)
    # "naive saved_tensors/mutation: ..." names the checks a naive version of which would flag
    named = {name for phrase in re.findall(r"naive ([\w/]+):", docs) for name in phrase.split("/")}
    # device needs a second device; compile is opt-in (its zoo entries are in zoo/compile.py)
    # the op checks' correct ops are in tests/opzoo.py (targets_test)
    wanted = {n for n, c in REGISTRY.items() if not c.made_for} - {"device", "compile"}
    assert wanted <= named, wanted - named


def test_view_outputs_are_protected_not_unprotected():
    for cls in (zoo.IdentityView, zoo.SqueezedOutput,
                zoo.InputReturnedAsIs, zoo.UnbindViews):
        check = _checks(verify(cls, spec=cls.SPEC, checks=["saved_tensors"]))["saved_tensors"]
        assert check.status == Status.PASS, [f.message for f in check.findings]


def test_sparse_saved_intermediate_is_handled_and_its_alias_noted():
    cls = zoo.SpecialSpmm
    report = verify(cls, spec=cls.SPEC, checks=["saved_tensors", "mutation"])
    assert not report.errors
    checks = _checks(report)
    assert checks["mutation"].status == Status.PASS
    saved = checks["saved_tensors"]
    assert saved.status == Status.PASS
    notes = [f for f in saved.findings if f.code == "GV214"]
    assert notes and all(f.severity == Severity.INFO for f in notes)
    assert {f.input for f in notes} <= {"indices", "values"}
    assert "sparse_coo" in notes[0].message


def test_an_unprotected_read_is_still_caught_next_to_protection():
    # the same check that now passes view outputs still fails a tensor kept on ctx
    check = _checks(verify(zoo.InputOnCtx, spec=zoo.InputOnCtx.SPEC,
                           checks=["saved_tensors"]))["saved_tensors"]
    assert check.status == Status.FAIL
    assert "GV213" in {f.code for f in check.findings}


# ----------------------------------------------------------------------------- double backward


@pytest.mark.parametrize("cls, code", [
    (zoo.AbsDetachesIncomingGrad, "GV144"),
    (zoo.LinearGradData, "GV142"),
    (zoo.GatherDetachesIncomingGrad, "GV142"),
])
def test_detached_incoming_gradient_is_named_by_input(cls, code):
    check = _checks(verify(cls, spec=cls.SPEC, checks=["gradgradcheck"]))["gradgradcheck"]
    assert check.status == Status.FAIL
    finding = next(f for f in check.findings if f.code == code)
    assert finding.input == "x" and "'x'" in finding.message
    assert "incoming gradient" in finding.message


def test_both_blocks_are_checked_wrt_inputs_and_incoming_gradients():
    check = _checks(verify(zoo.Exp, spec=zoo.Exp.SPEC, checks=["gradgradcheck"]))["gradgradcheck"]
    assert check.status == Status.PASS
    assert "incoming gradients" in check.summary


# ----------------------------------------------------------------------------- never weaker


def _bare_inputs(cls) -> list[Any]:
    """The float64 arguments of the spec's first case, as gradverify makes them."""
    spec = spec_mod.from_dict(cls.SPEC)
    info = introspect(cls)
    case = spec.cases[0]
    maker = InputMaker(case, bind(case, info, spec), info,
                       case_seed(0, info.target, case.name), "cpu")
    return list(maker.args("double").values)


def _declares_writes(cls: Any) -> bool:
    """Whether the Function calls ``ctx.mark_dirty`` (in its source, comments aside)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    return any(isinstance(node, ast.Attribute) and node.attr == "mark_dirty"
               for node in ast.walk(tree))


def _bare(cls, inputs: list[Any], which: str, **flags: Any) -> BaseException | None:
    """Bare torch on ``cls.apply`` with default flags, as torch calls it: on the same tensors
    every call (a forward writing into its input changes what the next call sees); mark_dirty
    Functions get clones, as any hand-written script must give them. Returns what it raised: a
    GradcheckError, or what the Function raised inside it (torch's own crashes are told apart
    by ``_torch_crashed``)."""
    clone = _declares_writes(cls)

    def fn(*args: Any) -> Any:
        return cls.apply(*[a.clone() if clone and isinstance(a, torch.Tensor) else a
                           for a in args])

    call = getattr(torch.autograd, which)
    # a copy as a user script makes one: of the same class (a subclass index stays one)
    fresh = [fresh_leaf(a, a.requires_grad) if isinstance(a, torch.Tensor) else a
             for a in inputs]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            call(fn, tuple(fresh), **flags)
        except Exception as exc:  # noqa: BLE001 -- any raise is bare torch failing
            return exc
    return None


def _torch_crashed(exc: BaseException) -> bool:
    """Bare torch raised inside gradcheck's own code, rather than reporting a mismatch or passing
    on what the Function or the engine raised: a limit of torch's gradcheck (it subtracts bool
    outputs in its numerical Jacobian), not a finding about the Function."""
    from torch.autograd.gradcheck import GradcheckError

    frames = traceback.extract_tb(exc.__traceback__)
    return not isinstance(exc, GradcheckError) and bool(frames) \
        and frames[-1].filename.endswith(os.path.join("autograd", "gradcheck.py"))


TORCH_CANNOT_RUN = {zoo.CountsAndMask}
"""Functions on which bare torch crashes in its own code (a bool output); pinned, so that the
exception cannot grow unnoticed."""


def _failed(check) -> bool:
    return check is not None and check.status in (Status.FAIL, Status.XFAIL, Status.ERROR)


def _skipped_after(check, checks) -> bool:
    """Skipped because it cannot run: the contract failed (autograd rejects backward's result).
    Never because another check found another defect: gradcheck's failure, expected or not,
    never excuses gradgradcheck."""
    return check.status == Status.SKIP and checks.get("contract") is not None \
        and checks["contract"].status in (Status.FAIL, Status.ERROR)


@pytest.mark.parametrize("cls", EVERY_FUNCTION, ids=NAMES)
def test_never_weaker_than_bare_torch(cls):
    inputs = _bare_inputs(cls)
    if not any(isinstance(a, torch.Tensor) and a.requires_grad for a in inputs):
        pytest.skip("no input requires grad: bare gradcheck refuses to run")
    report = verify(cls, spec=cls.SPEC,
                    checks=["contract", "gradcheck", "gradgradcheck", "undefined_grad",
                            "determinism"])
    assert not report.errors, [e.message for e in report.errors]
    checks = _checks(report)
    first, second = checks["gradcheck"], checks["gradgradcheck"]

    bare_first = _bare(cls, inputs, "gradcheck")
    if bare_first is not None and _torch_crashed(bare_first):
        assert cls in TORCH_CANNOT_RUN, bare_first
        return
    if bare_first is not None:
        if _bare(cls, inputs, "gradcheck", check_undefined_grad=False) is None:
            # only torch's undefined-output-gradient test failed: our undefined_grad check
            assert _failed(checks["undefined_grad"]), bare_first
        elif "not reentrant" in str(bare_first):
            # torch saw two backward passes differ (uninitialised memory or randomness, by
            # chance of the allocator): gradverify's determinism check poisons the allocator
            # between passes, so it sees this every time, not by chance
            assert _failed(checks["determinism"]), bare_first
        elif "expected to be zero" in str(bare_first):
            # every floating output marked non-differentiable yet depending on the inputs:
            # documented as the contract's GV111 warning (gradcheck has nothing to compare)
            assert "GV111" in {f.code for f in checks["contract"].findings}, bare_first
        else:
            kink = "GV122" in {f.code for f in first.findings}
            assert _failed(first) or kink or _skipped_after(first, checks), \
                (str(bare_first)[:300], first.status, first.summary)

    # Second order, also after a first-order failure: a declared (expected) gradcheck failure
    # must not hide double backward, which bare gradgradcheck still checks.
    bare_second = _bare(cls, inputs, "gradgradcheck")
    if bare_second is not None and not _torch_crashed(bare_second):
        once = "GV143" in {f.code for f in second.findings}
        kink = "GV122" in {f.code for f in first.findings}
        assert _failed(second) or once or kink or _skipped_after(second, checks) \
            or _round_off(cls, inputs, second), \
            (str(bare_second)[:300], second.status, second.summary)


def _round_off(cls, inputs: list[Any], check: CheckResult) -> bool:
    """gradverify found the Function computes in float32 inside, and bare torch passes at
    the tolerances it used for that (docs/checks.md): bare torch's float64 failure was
    float32 round-off in its finite differences."""
    from gradverify.specmodel import FLOAT32_INSIDE_TOLERANCE as tol

    return "computes in float32 inside" in check.summary and _bare(
        cls, inputs, check.name, atol=tol.atol, rtol=tol.rtol, eps=tol.eps) is None


DECLARED = [cls for cls in EVERY_FUNCTION if "gradcheck" in cls.SPEC.get("expect", {})]


def test_a_wrong_first_and_a_broken_second_derivative_both_show():
    """Checks are independent: gradcheck's failure never hides gradgradcheck's."""
    cls = zoo.WrongFactorDetached
    assert _bare(cls, _bare_inputs(cls), "gradcheck") is not None
    assert _bare(cls, _bare_inputs(cls), "gradgradcheck") is not None
    checks = _checks(verify(cls, spec=cls.SPEC))
    for name, code in (cls.ALSO, cls.EXPECT[:2]):
        assert checks[name].status == Status.FAIL, (name, checks[name].summary)
        assert code in {f.code for f in checks[name].findings}, name


def test_the_differential_test_covers_declared_failures():
    """Functions whose spec declares gradcheck's failure are in the differential test, and on
    one of them bare gradgradcheck fails: gradverify's must then run and fail too."""
    assert len(DECLARED) >= 3
    failing = [cls for cls in DECLARED if _bare(cls, _bare_inputs(cls), "gradgradcheck")]
    assert zoo.SpikeFloat32Surrogate in failing
    second = _checks(verify(zoo.SpikeFloat32Surrogate, spec=zoo.SpikeFloat32Surrogate.SPEC))
    assert second["gradcheck"].status == Status.XFAIL
    assert second["gradgradcheck"].status == Status.FAIL


# ----------------------------------------------------------------------------- linearity


@pytest.mark.parametrize("cls", [zoo.GuidedReluDropsNegative, zoo.ClipsIncomingGrad],
                         ids=lambda c: c.__name__)
def test_nonlinear_backward_passes_bare_gradcheck_and_fails_ours(cls):
    inputs = _bare_inputs(cls)
    # bare gradcheck passes in both modes: it feeds only non-negative incoming gradients
    assert _bare(cls, inputs, "gradcheck") is None
    assert _bare(cls, inputs, "gradcheck", fast_mode=True) is None
    # yet backward is not linear in the incoming gradient: backward(a g) != a backward(g) for
    # a = -1 (dropping negatives) or a = 2 (clipping)
    x = inputs[0].detach().clone().requires_grad_(True)
    y = cls.apply(x)
    g = torch.randn(y.shape, dtype=y.dtype, generator=torch.Generator().manual_seed(0))
    (once,) = torch.autograd.grad(y, x, g, retain_graph=True)
    scaled = {a: torch.autograd.grad(y, x, a * g, retain_graph=True)[0] for a in (-1.0, 2.0)}
    assert any(not torch.allclose(scaled[a], a * once) for a in scaled)
    check = _checks(verify(cls, spec=cls.SPEC, checks=["gradcheck"]))["gradcheck"]
    assert check.status == Status.FAIL
    finding = next(f for f in check.findings if f.code == "GV127")
    assert finding.input == "x" and "not linear in the incoming gradient" in finding.message


def test_declared_nonlinear_backward_is_an_expected_failure():
    spec = {**zoo.GuidedReluDropsNegative.SPEC, "expect": {"gradcheck": "guided backprop"}}
    report = verify(zoo.GuidedReluDropsNegative, spec=spec)
    assert _checks(report)["gradcheck"].status == Status.XFAIL
    assert report.ok


def test_none_for_a_needed_input_follows_from_a_declared_gradcheck_failure():
    """A relevance rule declared not to be the gradient returns None for weight and bias on
    purpose: needs_input_grad's GV202 is marked as a consequence of the declaration and the
    row is an expected failure. Declaring another check changes nothing: GV202 stays a FAIL."""
    cls = zoo.RelevanceEpsilonRule
    row = _checks(verify(cls, spec=cls.SPEC))["needs_input_grad"]
    assert row.status == Status.XFAIL and "declared expected failure of gradcheck" in row.expect
    marked = [f for f in row.findings if f.code == "GV202"]
    assert {f.input for f in marked} == {"weight", "bias"}
    assert all(f.consequence_of == "GV121 (gradcheck)" and "spec declaring gradcheck" in
               said(f) for f in marked)
    spec = {**cls.SPEC, "expect": {"determinism": "not what this is about"}}
    row = _checks(verify(cls, spec=spec))["needs_input_grad"]
    assert row.status == Status.FAIL
    assert all(f.consequence_of is None for f in row.findings if f.code == "GV202")


# ----------------------------------------------------------------------------- compile


def test_compile_calls_mark_dirty_functions_as_users_do():
    """Applied to a non-leaf, made inside and outside the compiled region: no leaf-in-place
    artifact. Where torch.compile itself gets the gradient wrong (torch 2.13, input made outside
    the region), the finding says so and blames torch.compile; where both ways agree, a pass."""
    cls = zoo.InplaceSigmoidSavesOutput
    spec = {**cls.SPEC, "checks": {"compile": True}}
    check = _checks(verify(cls, spec=spec, checks=["gradcheck", "compile"]))["compile"]
    # torch 2.1's inductor needs pkg_resources: a note that it cannot run, never a refusal of
    # the Function
    codes = {f.code for f in check.findings if "backend='inductor'" not in f.message}
    assert "GV353" not in codes, [f.message for f in check.findings]

    inputs = _bare_inputs(cls)
    x = inputs[0].detach().clone().requires_grad_(True)
    eager_y = cls.apply(x.clone())
    g = torch.ones_like(eager_y)
    (eager,) = torch.autograd.grad(eager_y, x, g)
    ways = {"inside": lambda t: cls.apply(t.clone()), "outside": lambda t: cls.apply(t)}
    got = {}
    for way, call in ways.items():  # as users call it: made inside the region, or handed in
        torch._dynamo.reset()
        compiled = torch.compile(call, backend="aot_eager")  # around a graph break on old torch
        (got[way],) = torch.autograd.grad(compiled(x if way == "inside" else x.clone()), x, g)
    assert torch.allclose(got["inside"], eager)  # made inside the region: torch gets it right
    outside = got["outside"]
    if torch.allclose(outside, eager):
        assert check.status == Status.PASS, [f.message for f in check.findings]
    else:
        assert check.status == Status.FAIL
        finding = next(f for f in check.findings if f.code == "GV352")
        assert "outside the compiled region" in finding.message
        assert "torch.compile mishandles" in finding.message


@pytest.mark.parametrize("cls", [zoo.ToListForward, zoo.DataDependentBranch, zoo.SinWithJvp])
def test_a_graph_break_is_a_note_and_the_gradients_users_get_are_compared(cls):
    """fullgraph=True refuses them (bare torch raises), yet compiled as users compile them
    their gradients are right: the row passes, with Dynamo's reason as a note (GV351)."""
    x = torch.randn(3, dtype=torch.double, requires_grad=True)
    torch._dynamo.reset()
    with pytest.raises(Exception) as raised:
        torch.compile(cls.apply, fullgraph=True, backend="aot_eager")(x)
    assert torchcompat.is_graph_break(raised.value)
    torch._dynamo.reset()
    compiled = torch.compile(cls.apply, backend="aot_eager")(x)
    (got,) = torch.autograd.grad(compiled.sum(), x)
    (eager,) = torch.autograd.grad(cls.apply(x).sum(), x)
    assert torch.allclose(got, eager)
    row = _checks(verify(cls, spec=cls.SPEC, checks=["compile"]))["compile"]
    assert row.status == Status.PASS, [f.message for f in row.findings]
    assert row.findings[0].code == "GV351" and "runs it in eager" in row.findings[0].message
    # notes only (torch 2.1 cannot compile torch.func.grad of a jvp Function: GV353, a note)
    assert {f.severity for f in row.findings} == {Severity.INFO} and "graph break" in row.summary
    assert {f.code for f in row.findings} <= {"GV351", "GV353"}


class NumpyForward(torch.autograd.Function):
    """Right in eager (autograd and torch.func.grad); torch 2.13's
    torch.compile(torch.func.grad(f)) drops its custom backward (forward leaves torch through
    numpy) and gives a zero gradient; torch 2.15 gets it right; torch 2.1 cannot compile it."""

    SPEC: ClassVar = {"checks": {"compile": True}, "cases": [{"args": {"x": {"shape": [3]}}}]}

    @staticmethod
    def forward(x):
        return torch.from_numpy(np.exp(x.detach().numpy()))

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * y


def _compiled(spec):
    return {**spec, "checks": {"compile": True}}


class NumpyGatedMul(zoo.GatedOnNeedsInputGrad):
    """``x * w`` whose backward computes only what ``ctx.needs_input_grad`` asks for (the
    pattern of pytorch#159299), right in eager, with a forward that leaves torch through numpy:
    torch 2.13's torch.compile(torch.func.grad(f)) drops the custom backward and gives zero for
    both ``x`` and ``w`` when it is called on the inputs themselves. ``zoo.GatedOnNeedsInputGrad``
    is the same over a forward in torch: right there, but called with one input passed in and
    the other made inside the compiled function, the input passed in is said to need no
    gradient and gets zero. Their correct look-alike is ``UngatedMul``."""

    SPEC: ClassVar = _compiled(zoo.GatedOnNeedsInputGrad.SPEC)

    @staticmethod
    def forward(x, w):
        return torch.from_numpy(x.detach().numpy() * w.detach().numpy())


class UngatedMul(zoo.GatedOnNeedsInputGrad):
    """``x * w`` whose backward computes both gradients whatever ``ctx.needs_input_grad``
    says: the correct look-alike of the gated products, right in every compiled cell."""

    SPEC: ClassVar = _compiled(zoo.GatedOnNeedsInputGrad.SPEC)

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        return grad * w, grad * x


def _made_inside(cls, made):
    """``cls.apply(...).sum()`` with the inputs at the positions ``made`` made inside it."""
    return lambda *a: cls.apply(*(t * 1.5 if i in made else t for i, t in enumerate(a))).sum()


def _bare_compiled_grad(cls, inputs):
    """Eager and compiled torch.func.grad of ``cls.apply(*inputs).sum()`` for every input,
    on the inputs themselves, on intermediates, and with one input passed in beside
    intermediates (None where this torch cannot compile it)."""
    argnums = tuple(range(len(inputs)))
    every = set(range(len(inputs)))
    cells = {"leaves": _made_inside(cls, set()), "intermediates": _made_inside(cls, every)}
    if len(inputs) > 1:
        cells.update({f"{kept} passed in": _made_inside(cls, every - {kept}) for kept in every})
    compared = {}
    for name, loss in cells.items():
        eager = torch.func.grad(loss, argnums=argnums)(*inputs)
        torch._dynamo.reset()
        try:
            compiled = torch.compile(torch.func.grad(loss, argnums=argnums),
                                     backend="aot_eager")(*inputs)
        except Exception:  # noqa: BLE001 -- torch 2.1 cannot compile it
            compiled = None
        compared[name] = (eager, compiled)
    return compared


@pytest.mark.parametrize("cls", [NumpyForward, NumpyGatedMul, zoo.GatedOnNeedsInputGrad,
                                 UngatedMul])
def test_compiled_func_grad_is_judged_against_bare_torch(cls):
    """GV354 exactly where bare torch.compile(torch.func.grad(f)) differs from eager, for each
    input it differs on; where this torch cannot compile it, a note; where it gets it right
    (in every cell: on the inputs, on intermediates, one passed in beside intermediates), a
    pass."""
    spec = _compiled(cls.SPEC)
    names = list(spec["cases"][0]["args"])
    inputs = [torch.randn(3, dtype=torch.double) for _ in names]
    compared = _bare_compiled_grad(cls, inputs)
    row = _checks(verify(cls, spec=spec, checks=["compile"]))["compile"]
    codes = {(f.code, f.severity) for f in row.findings}
    if any(compiled is None for _, compiled in compared.values()):
        assert row.status == Status.PASS and ("GV353", Severity.INFO) in codes, codes
        return
    wrong = {name for eager, compiled in compared.values()
             for name, e, c in zip(names, eager, compiled) if not torch.allclose(e, c)}
    if not wrong:
        assert row.status == Status.PASS and not codes, codes
        return
    assert row.status == Status.FAIL and codes == {("GV354", Severity.ERROR)}, codes
    assert sorted(f.input for f in row.findings) == sorted(wrong)  # each input once
    # in the first cell it is wrong in, said as that cell passes the inputs
    first = {name: cell for cell, (eager, compiled) in reversed(compared.items())
             for name, e, c in zip(names, eager, compiled) if not torch.allclose(e, c)}
    for finding in row.findings:
        assert f"on torch {torch.__version__}" in finding.message
        assert "torch.compile is at fault" in finding.message
        assert "torch.compiler.disable" in finding.hint
        cell = first[finding.input]
        if cell.endswith("passed in"):
            passed = names[int(cell.split()[0])]
            assert f"'{passed}' passed in)" in finding.message, finding.message
            assert "pytorch#159299" in finding.hint
        else:
            assert "passed in" not in finding.message and "159299" not in finding.hint


def test_the_compiled_func_grad_cell_can_fail_here():
    """Not vacuous on the pinned torch: its compiled func.grad gets a Function whose forward
    leaves torch wrong, for both inputs of the gated product, and the gated product in torch
    wrong for the input passed in beside an intermediate."""
    if torch.__version__.split("+")[0] != "2.13.0":
        pytest.skip("pinned to what torch 2.13 gets wrong")
    inputs = [torch.randn(3, dtype=torch.double) for _ in range(2)]
    eager, compiled = _bare_compiled_grad(NumpyGatedMul, inputs)["leaves"]
    assert compiled is not None and all(not torch.allclose(e, c) for e, c in zip(eager, compiled))
    # the gated product in torch (pytorch#159299): the input passed in beside an intermediate
    # gets zero, the intermediate its gradient; on the inputs or on intermediates, both right
    compared = _bare_compiled_grad(zoo.GatedOnNeedsInputGrad, inputs)
    for kept in (0, 1):
        eager, compiled = compared[f"{kept} passed in"]
        assert torch.count_nonzero(compiled[kept]) == 0 and torch.count_nonzero(eager[kept])
        assert torch.allclose(eager[1 - kept], compiled[1 - kept])
    for cell in ("leaves", "intermediates"):
        assert all(torch.allclose(e, c) for e, c in zip(*compared[cell]))
    # and the look-alike that computes both gradients, right in every cell
    for eager, compiled in _bare_compiled_grad(UngatedMul, inputs).values():
        assert all(torch.allclose(e, c) for e, c in zip(eager, compiled))


def test_differential_test_sees_failures_of_both_kinds():
    """The differential test is not vacuous: bare torch fails first and second order somewhere."""
    first = [cls for cls in zoo.BROKEN if _bare(cls, _bare_inputs(cls), "gradcheck")]
    second = [cls for cls in zoo.BROKEN
              if not _bare(cls, _bare_inputs(cls), "gradcheck")
              and _bare(cls, _bare_inputs(cls), "gradgradcheck")]
    assert zoo.SinWrongSign in first
    assert {zoo.AbsDetachesIncomingGrad, zoo.LinearGradData, zoo.CubeDetached} <= set(second)


def test_bare_torch_cannot_run_exactly_where_pinned():
    crashed = {cls for cls in EVERY_FUNCTION
               if (exc := _bare(cls, _bare_inputs(cls), "gradcheck")) is not None
               and _torch_crashed(exc)}
    assert crashed == TORCH_CANNOT_RUN
