"""Every broken Function is caught by the check it targets; no correct Function fails."""
from __future__ import annotations

import json
import os
import sys

import pytest
import torch

import zoo
from gradverify import verify
from gradverify.registry import REGISTRY
from gradverify.report.jsonfmt import to_dict
from gradverify.report.text import advice, said
from gradverify.results import Location, Severity, Status


def _findings(report, check):
    return [f for case in report.results for c in case.checks if c.name == check
            for f in c.findings]


def _status(report, check):
    return {c.status for case in report.results for c in case.checks if c.name == check}


@pytest.mark.parametrize("cls", zoo.BROKEN, ids=lambda c: c.__name__)
def test_broken_function_is_caught(cls):
    check, code, input_name = cls.EXPECT
    report = verify(cls, spec=cls.SPEC)
    assert not report.errors, report.errors
    severity = getattr(cls, "SEVERITY", "error")
    assert _status(report, check) == {{"error": Status.FAIL, "warning": Status.WARN,
                                       "info": Status.PASS}[severity]}
    found = [f for f in _findings(report, check) if f.code == code]
    assert found, _findings(report, check)
    if input_name is not None:
        # the input named, and no other (an output's finding names none)
        assert {f.input for f in found} - {None} == {input_name}
        found = [f for f in found if f.input == input_name]
        assert repr(input_name) in found[0].message
    assert found[0].severity == Severity(severity)
    if hasattr(cls, "PATTERN"):
        assert cls.PATTERN in found[0].message
    assert found[0].hint
    if severity == "error":
        assert not report.ok
    # places are Locations, and what the JSON report dumps of a finding is JSON-safe
    assert all(f.location is None or isinstance(f.location, Location)
               for case in report.results for c in case.checks for f in c.findings)
    json.dumps(to_dict(report))


@pytest.mark.parametrize("cls", zoo.CORRECT, ids=lambda c: c.__name__)
def test_correct_function_passes(cls):
    report = verify(cls, spec=cls.SPEC)
    bad = [(c.name, c.status, [f.message for f in c.findings])
           for case in report.results for c in case.checks
           if c.status not in (Status.PASS, Status.SKIP) and not zoo.old_style_warning(c)]
    assert not bad
    assert report.ok


def test_once_differentiable_is_a_skip_with_reason():
    report = verify(zoo.OnceDifferentiableSin, spec=zoo.VEC)
    (result,) = [c for c in report.results[0].checks if c.name == "gradgradcheck"]
    assert result.status == Status.SKIP
    assert "once_differentiable" in result.summary
    assert [f.code for f in result.findings] == ["GV143"]


class _OnceInside(torch.nn.Module):
    """A module whose forward calls a @once_differentiable Function: its double backward is
    torch's error node, not a wrong gradient."""

    def forward(self, x):
        return zoo.OnceDifferentiableSin.apply(x) * 2


def test_a_module_calling_a_once_differentiable_function_is_a_skip_not_a_failure():
    report = verify(_OnceInside, spec=zoo.VEC)
    (result,) = [c for c in report.results[0].checks if c.name == "gradgradcheck"]
    assert result.status == Status.SKIP, [f.message for f in result.findings]
    assert [f.code for f in result.findings] == ["GV143"]
    assert report.ok


def test_every_check_has_zoo_coverage():
    covered = {cls.EXPECT[0] for cls in zoo.BROKEN}
    # `device` needs a second device; device_check_test below drives its comparison on cpu:0.
    # What `compile` catches is torch.compile's and depends on torch's version: trust_test
    # drives it against bare torch. The op checks' buggy ops are in tests/opzoo.py.
    assert covered == {n for n, c in REGISTRY.items() if not c.made_for} - {
        "device", "compile"}


def test_failed_prerequisite_skips_dependent_checks():
    report = verify(zoo.TooFewGradients, spec=zoo.TooFewGradients.SPEC)
    statuses = {c.name: c for c in report.results[0].checks}
    assert statuses["gradcheck"].status == Status.SKIP
    assert "contract failed" in statuses["gradcheck"].summary
    assert statuses["gradgradcheck"].status == Status.SKIP


def test_kink_skips_second_order_instead_of_failing():
    report = verify(zoo.ReluAtZero, spec=zoo.ReluAtZero.SPEC)
    statuses = {c.name: c.status for c in report.results[0].checks}
    assert (statuses["contract"], statuses["gradcheck"], statuses["gradgradcheck"]) == \
        (Status.PASS, Status.WARN, Status.SKIP)


def test_expect_turns_failure_into_xfail_and_pass_into_xpass():
    spec = dict(zoo.SinWrongSign.SPEC, expect={"gradcheck": "known"})
    report = verify(zoo.SinWrongSign, spec=spec)
    assert _status(report, "gradcheck") == {Status.XFAIL}
    assert report.ok
    report = verify(zoo.Exp, spec=dict(zoo.Exp.SPEC, expect={"gradcheck": "known"}))
    assert _status(report, "gradcheck") == {Status.XPASS}
    assert report.ok
    assert not verify(zoo.Exp, spec=dict(zoo.Exp.SPEC, expect={"gradcheck": "known"}),
                      strict=True).ok


def test_only_and_skip_select_checks():
    report = verify(zoo.Exp, spec=zoo.Exp.SPEC, checks=["gradcheck"])
    assert [c.name for c in report.results[0].checks] == ["gradcheck"]
    # reference runs only for specs naming one, device only off the CPU, the compositions
    # (compile, autocast) are opt-in, and the op checks only for custom ops
    everything_but = [n for n, c in REGISTRY.items() if not c.made_for and c.default
                      and n not in ("gradgradcheck", "reference", "device")]
    report = verify(zoo.Exp, spec=zoo.Exp.SPEC, skip=["gradgradcheck"])
    assert [c.name for c in report.results[0].checks] == everything_but
    spec = dict(zoo.Exp.SPEC, checks={"gradgradcheck": False})
    assert [c.name for c in verify(zoo.Exp, spec=spec).results[0].checks] == everything_but


def test_compose_turns_on_every_composition_check_and_skip_still_wins():
    compositions = [n for n, c in REGISTRY.items() if c.composition]
    assert set(compositions) == {"compile", "autocast"}
    assert all(not REGISTRY[n].default for n in compositions)
    names = [c.name for c in verify(zoo.Exp, spec=zoo.Exp.SPEC, compose=True).results[0].checks]
    assert set(compositions) <= set(names)
    names = [c.name for c in verify(zoo.Exp, spec=zoo.Exp.SPEC, compose=True,
                                    skip=["compile"]).results[0].checks]
    assert "autocast" in names and "compile" not in names


def test_fast_mode_is_reported_and_no_slow_case_noted():
    spec = {"cases": [{"name": "big", "args": {"x": {"shape": [300, 300]}}}]}
    report = verify(zoo.Exp, spec=spec, checks=["gradcheck"])
    (check,) = report.results[0].checks
    assert check.mode == "fast"
    codes = [f.code for f in check.findings]
    assert "GV123" in codes and "GV124" in codes
    assert check.status == Status.PASS


def test_fast_mode_catches_a_wrong_gradient_on_large_inputs():
    spec = {"cases": [{"name": "big", "args": {"x": {"shape": [300, 300]}}}]}
    report = verify(zoo.SinWrongSign, spec=spec, checks=["gradcheck"])
    (check,) = report.results[0].checks
    assert check.mode == "fast" and check.status == Status.FAIL
    finding = next(f for f in check.findings if f.code == "GV121")
    assert finding.input == "x" and "sign flipped" in finding.message
    assert finding.data["sampled"] is True


def test_square_shapes_get_a_note():
    spec = {"cases": [{"name": "sq", "args": {"x": {"shape": [3, 3]}}}]}
    report = verify(zoo.Exp, spec=spec, checks=["gradcheck"])
    assert "GV125" in [f.code for f in report.results[0].checks[0].findings]


def test_float32_only_kernel_is_explained():
    class Float32Only(zoo.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return (x.float() ** 2 * 1.0001).to(torch.float32)

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return (2 * x.float() * grad.float()).to(torch.float32)

    import torch

    report = verify(Float32Only, spec=zoo.VEC)
    codes = {f.code for case in report.results for c in case.checks for f in c.findings}
    assert "GV113" in codes and "GV107" in codes
    assert "GV126" in codes


def test_smallest_case_also_runs_slow_mode_when_all_are_fast():
    spec = {"cases": [{"name": "big", "args": {"x": {"shape": [40, 40]}}},
                      {"name": "smaller", "args": {"x": {"shape": [30, 31]}}}]}
    report = verify(zoo.Exp, spec=spec, checks=["gradcheck"])
    modes = {r.case: r.checks[0].mode for r in report.results}
    assert modes == {"big": "fast", "smaller": "fast+slow"}
    codes = {f.code for r in report.results for f in r.checks[0].findings}
    assert "GV124" not in codes


class _Flaky(zoo.Function):
    """Gives a different answer on every other call: stands in for a device kernel that
    disagrees with the CPU path."""

    calls = 0

    @staticmethod
    def forward(ctx, x):
        _Flaky.calls += 1
        return x * (2 if _Flaky.calls % 2 else -2)

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


def test_device_check_compares_against_a_cpu_run():
    report = verify(_Flaky, spec=zoo.VEC, checks=["device"], device="cpu:0")
    (check,) = report.results[0].checks
    assert check.status == Status.FAIL
    assert {f.code for f in check.findings} == {"GV341"}
    assert "against cpu" in check.findings[0].message
    report = verify(zoo.Exp, spec=zoo.VEC, checks=["device"], device="cpu:0")
    assert report.results[0].checks[0].status == Status.PASS


def test_device_check_skips_when_the_function_cannot_run_on_the_cpu(monkeypatch):
    """A kernel made for the device only (Triton's, on a CPU tensor: "Pointer argument cannot
    be accessed from Triton") leaves nothing to compare against: a skip saying so, not an
    error of the check (seen with liger-kernel on CUDA)."""
    from gradverify.checks import _calls

    real = _calls.apply
    seen = []

    def first_call_raises(info, args):  # the device check's first call is its CPU run
        if sys._getframe(1).f_code.co_filename.endswith(os.path.join("checks", "device.py")):
            seen.append(1)
            if len(seen) == 1:
                raise ValueError("Pointer argument (at 0) cannot be accessed from Triton")
        return real(info, args)

    monkeypatch.setattr(_calls, "apply", first_call_raises)
    report = verify(zoo.Exp, spec=zoo.VEC, checks=["device"], device="cpu:0")
    (check,) = report.results[0].checks
    assert check.status == Status.SKIP, check
    assert "raised on the CPU" in check.summary and "Triton" in check.summary


def test_device_check_skips_on_cpu():
    report = verify(zoo.Exp, spec=zoo.VEC, checks=["device"])
    assert report.results[0].checks[0].status == Status.SKIP


# --------------------------------------------------------------------- findings say the right thing


def test_undefined_gradients_are_said_to_arrive_as_none_when_they_do():
    report = verify(zoo.NoneGradCrash, spec=zoo.NoneGradCrash.SPEC)
    messages = [f.message for f in _findings(report, "undefined_grad")]
    assert messages and all("arrive as None" in m or "arrives as None" in m for m in messages)
    assert not any("arrive as zeros" in m for m in messages)
    # gradcheck's own failure is backward raising, not "perturbing the inputs"
    (first,) = [f for f in _findings(report, "gradcheck") if f.code == "GV121"]
    assert first.message.startswith("backward raised TypeError")
    assert "see undefined_grad" in first.hint


def test_a_mismatch_from_a_tensor_changed_after_saving_points_at_it():
    report = verify(zoo.SavedThenScaled, spec=zoo.SavedThenScaled.SPEC)
    (mismatch,) = [f for f in _findings(report, "gradcheck") if f.code == "GV121"]
    assert "save_for_backward" in mismatch.hint and "GV224" in mismatch.hint
    assert "zoo/mutation.py:" in mismatch.hint  # the lines where it was saved and changed
    (saved,) = _findings(report, "mutation")
    assert saved.severity == Severity.ERROR and "when saved, the gradient is right" in saved.message


def test_an_undiagnosed_failure_still_names_the_input(monkeypatch):
    from gradverify.checks import _jacobian

    monkeypatch.setattr(_jacobian, "diagnose", lambda *args, **kwargs: [])
    report = verify(zoo.MatmulTransposedGrad, spec=zoo.MatmulTransposedGrad.SPEC,
                    checks=["gradcheck"])
    (finding,) = [f for f in _findings(report, "gradcheck") if f.code == "GV121"]
    assert finding.input == "b" and "'b'" in finding.message


def test_an_input_at_fault_is_found_without_torch_naming_it():
    from gradverify.case.context import CheckContext
    from gradverify.case.inputs import InputMaker
    from gradverify.checks import _calls
    from gradverify.checks._jacobian import failing_input
    from gradverify.discover import Job
    from gradverify.run.prepare import prepare
    from gradverify.spec.file import from_dict
    from gradverify.specmodel import DEFAULT_TOLERANCE

    prepared = prepare(Job("zoo:MatmulTransposedGrad", from_dict(zoo.MatmulTransposedGrad.SPEC),
                           zoo.MatmulTransposedGrad))
    case = prepared.spec.cases[0]
    ctx = CheckContext(info=prepared.info, spec=prepared.spec, case=case,
                       maker=InputMaker(case, prepared.bound[case.name], prepared.info, 0, "cpu"),
                       tolerance=DEFAULT_TOLERANCE.resolved())
    view = _calls.differentiable_view(ctx)
    assert view.names[failing_input(view.fn, view.inputs, ctx.tolerance)] == "b"


def test_second_order_hint_names_a_saved_intermediate():
    import torch
    from torch.autograd import Function

    class SpecialSpmm(Function):  # the GAT idiom without @once_differentiable
        @staticmethod
        def forward(ctx, indices, values, shape, b):
            a = torch.sparse_coo_tensor(indices, values, shape)
            ctx.save_for_backward(a, b)
            return torch.matmul(a, b)

        @staticmethod
        def backward(ctx, grad):
            a, b = ctx.saved_tensors
            edge = a._indices()[0] * a.shape[1] + a._indices()[1]
            return None, grad.matmul(b.t()).reshape(-1)[edge], None, a.t().matmul(grad)

    spec = {"cases": [{"name": "c", "args": {
        "indices": {"values": [[0, 1, 2, 2], [1, 2, 0, 1]], "dtype": "int64"},
        "values": {"shape": [4]}, "shape": {"tuple": [3, 3]}, "b": {"shape": [3, 2]}}}]}
    report = verify(SpecialSpmm, spec=spec, checks=["gradcheck", "gradgradcheck"])
    (finding,) = _findings(report, "gradgradcheck")
    assert "sparse_coo tensor built in forward" in finding.hint
    assert "Build it in backward from the saved inputs" in finding.hint


def test_findings_that_follow_from_another_say_so():
    """One root cause, said once: a backward that writes into a saved tensor (GV222) makes
    autograd refuse the next backward on the graph (gradcheck's, determinism's); those say
    they are its consequence and point at it instead of advice of their own. A backward that
    ignores its incoming gradient fails gradcheck and gradgradcheck: the second says so."""
    report = verify(zoo.BackwardMutatesSaved, spec=zoo.BackwardMutatesSaved.SPEC)
    findings = {f.code: f for case in report.results for c in case.checks for f in c.findings}
    assert findings["GV222"].consequence_of is None
    for code in ("GV121", "GV008"):
        assert findings[code].consequence_of == "GV222 (mutation)", findings[code]
        # the renderers say so (the finding keeps its own words and advice)
        assert said(findings[code]).endswith("; a consequence of GV222 (mutation)")
        assert advice(findings[code]) == "fix GV222 (mutation) first: this follows from it"
        assert "consequence" not in findings[code].message
    report = verify(zoo.IgnoresIncomingGrad, spec=zoo.IgnoresIncomingGrad.SPEC)
    second = [f for case in report.results for c in case.checks if c.name == "gradgradcheck"
              for f in c.findings]
    assert second and all(f.consequence_of == "GV121 (gradcheck)" for f in second), second


def test_what_a_write_into_the_incoming_gradient_corrupts_is_said_to_follow_from_it():
    """Seen with liger-kernel on CUDA: a backward that writes into its own tensors made
    gradcheck report a gradient that "squares the incoming gradient". gradcheck and the
    comparisons call the Function again on the tensors it wrote into: their findings are
    consequences of the write, said once; their rows still fail (bare gradcheck fails too)."""
    report = verify(zoo.BackwardMutatesGrad, spec=zoo.BackwardMutatesGrad.SPEC)
    checks = {c.name: c for c in report.results[0].checks}
    (root,) = [f for f in checks["mutation"].findings if f.code == "GV223"]
    assert root.consequence_of is None
    for name in ("gradcheck", "precision"):
        assert checks[name].status == Status.FAIL
        errors = [f for f in checks[name].findings if f.severity == Severity.ERROR]
        assert errors and all(f.consequence_of == "GV223 (mutation)" for f in errors), name
        assert all("a consequence of GV223 (mutation)" in said(f) for f in errors)
    # a check that reads backward's result once says nothing that follows from the write
    assert not any(f.consequence_of for f in checks["contract"].findings)


def _func_row(cls, **func):
    spec = {**cls.SPEC, "checks": {"func": func or True}}
    (case,) = verify(cls, spec=spec, checks=["func"]).results
    (row,) = case.checks
    return row


@pytest.mark.parametrize("cls", [zoo.OldStyleSinh, zoo.RecomputingSiLU],
                         ids=lambda c: c.__name__)
def test_a_function_torch_func_cannot_run_is_an_error_where_the_spec_asks_for_func(cls):
    """GV363 is a warning by default (the zoo's EXPECT); a spec that turns func on asks for
    it, and the option sets any severity; torch's reason (what torch.func requires, or its
    message) and the fix are said."""
    asked = _func_row(cls)
    assert asked.status == Status.FAIL
    (finding,) = asked.findings
    assert finding.code == "GV363" and finding.severity == Severity.ERROR
    # torch's reason: its own message, or for an old-style Function (whose message differs
    # between torch versions only by a link) what it requires
    reason = "requires a setup_context staticmethod" if cls is zoo.OldStyleSinh else "raises"
    assert "torch.func cannot run it" in finding.message and reason in finding.message
    assert "setup_context" in finding.hint or "closed form" in finding.hint
    assert _func_row(cls, unsupported="warning").status == Status.WARN
    noted = _func_row(cls, unsupported="note")
    assert noted.status == Status.PASS and noted.findings[0].severity == Severity.INFO


def test_an_old_style_function_is_said_once_on_its_first_case():
    spec = {"cases": [{"name": n, "args": {"x": {"shape": [s]}}} for n, s in (("a", 3),
                                                                              ("b", 4))]}
    report = verify(zoo.OldStyleSinh, spec=spec, checks=["func"])
    first, second = (next(c for c in case.checks if c.name == "func") for case in report.results)
    assert first.status == Status.WARN and [f.code for f in first.findings] == ["GV363"]
    assert second.status == Status.SKIP and "said on the target's first case" in second.summary
