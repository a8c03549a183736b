"""Targets that compute in a lower precision inside, without Triton: the detection of
float32 inside (``checks/_computes.py``), the spec's ``computes_in:``, and the error-baseline
rule of the reference check (``checks/_baseline.py``). Triton kernels: triton_test.py."""
from __future__ import annotations

import pytest
import torch
from torch.autograd import Function

import zoo
from gradverify import verify
from gradverify.checks import _baseline
from gradverify.results import Status


def _spec(**extra):
    return {"cases": [{"args": {"x": {"shape": [3, 5]}}}], **extra}


def _checks(report):
    assert not report.errors, [e.message for e in report.errors]
    (result,) = report.results
    return {c.name: c for c in result.checks}


class Float32Inside(Function):
    """A kernel's habit, in torch: float32 inside, the caller's dtype outside. Correct."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sin(x.float()).to(x.dtype) * 2

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return (grad.float() * 2 * torch.cos(x.float())).to(grad.dtype)


class Float32InsideWrongFactor(Float32Inside):
    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return (grad.float() * 3 * torch.cos(x.float())).to(grad.dtype)


class Quarters(Function):
    """Rounds to multiples of 0.25 (a straight-through quantiser): a coarse grid, not a
    kernel's float32."""

    @staticmethod
    def forward(ctx, x):
        return torch.round(x * 4) / 4

    @staticmethod
    def backward(ctx, grad):
        return grad


def sin2(x):
    return torch.sin(x) * 2


def test_float32_inside_is_detected_and_judged_at_float32_tolerance():
    checks = _checks(verify(Float32Inside, spec=_spec()))
    for name in ("gradcheck", "gradgradcheck"):
        assert checks[name].status == Status.PASS, checks[name].summary
        assert "forward computes in float32 inside (detected): atol 0.001, rtol 0.01, eps " \
               "0.004" in checks[name].summary
    assert checks["precision"].status == Status.SKIP
    assert "computes in float32 inside" in checks["precision"].summary


def test_bare_float64_gradcheck_fails_the_same_correct_function():
    """The motivation: float64 finite differences see float32 round-off."""
    x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    assert not torch.autograd.gradcheck(Float32Inside.apply, (x,), raise_exception=False)


def test_a_wrong_factor_still_fails_at_float32_tolerance():
    checks = _checks(verify(Float32InsideWrongFactor, spec=_spec()))
    assert checks["gradcheck"].status == Status.FAIL
    assert "GV121" in {f.code for f in checks["gradcheck"].findings}


@pytest.mark.parametrize(("cls", "inside"), [(zoo.Cancellation, None), (Quarters, None),
                                             (Float32Inside, "float32")],
                         ids=["cancellation", "quantiser", "float32-inside"])
def test_only_a_kernels_float32_is_taken_for_one(cls, inside):
    from gradverify.case.inputs import Args
    from gradverify.checks import _computes
    from gradverify.targets import introspect

    x = torch.rand(4, 6, dtype=torch.float32).double()  # what the checks hand it
    assert _computes.detect(introspect(cls), Args(["x"], [x], [True])) == inside


def test_computes_in_float64_turns_detection_off_and_float64_gradcheck_fails():
    checks = _checks(verify(Float32Inside, spec=_spec(computes_in="float64")))
    assert checks["gradcheck"].status == Status.FAIL  # float32 round-off, as bare torch says


def test_computes_in_bfloat16_leaves_finite_differences_out():
    checks = _checks(verify(Float32Inside, spec=_spec(computes_in="bfloat16",
                                                      reference="lowprecision_test:sin2")))
    for name in ("gradcheck", "gradgradcheck"):
        assert checks[name].status == Status.SKIP
        assert "finite differences cannot judge it; the reference check judges it" \
            in checks[name].summary
    assert checks["reference"].status == Status.PASS, checks["reference"].summary
    assert checks["reference"].summary.startswith("bfloat16: every output and gradient within 2 x")


def test_a_bad_computes_in_is_a_spec_error(tmp_path):
    from gradverify.errors import SpecError
    from gradverify.spec import file as spec_file

    with pytest.raises(SpecError, match="computes_in: expected the dtype the target computes in "
                                        "inside: float32, float16, bfloat16, float64"):
        spec_file.from_dict(_spec(computes_in="half"))


def test_the_rule_passes_a_correct_kernel_and_fails_a_wrong_one_naming_the_input():
    ok = _checks(verify(Float32Inside, spec=_spec(reference="lowprecision_test:sin2")))
    assert ok["reference"].status == Status.PASS, ok["reference"].summary
    rule = ok["reference"].data["rule"]
    assert rule["dtype"] == "float32" and rule["seeds"] == 3 and rule["k"] == 2.0
    figures = rule["tensors"]["gradient for 'x'"]
    assert set(figures) == {"max_abs", "rms", "ulp", "baseline_max_abs", "limit", "flake_rate",
                            "past_limit_rate", "condition", "condition_limit"}
    assert figures["max_abs"] <= figures["limit"] and figures["flake_rate"] == 0
    assert figures["past_limit_rate"] == 0 and figures["condition"] is None

    bad = _checks(verify(Float32InsideWrongFactor, spec=_spec(reference="lowprecision_test:sin2")))
    (finding,) = bad["reference"].findings
    assert finding.code == "GV332" and finding.input == "x"
    assert "breaks the error-baseline rule against lowprecision_test:sin2 in float32: max abs " \
           "error" in finding.message and "on 3 of 3 seed(s)" in finding.message


def test_the_seeds_option_sets_how_many_runs_judge():
    spec = _spec(reference="lowprecision_test:sin2", checks={"reference": {"seeds": 5}})
    checks = _checks(verify(Float32Inside, spec=spec))
    assert checks["reference"].data["rule"]["seeds"] == 5


def test_a_tensor_over_the_limit_on_fewer_than_half_the_seeds_is_a_flaky_warning():
    def fig(error: float) -> _baseline.Figures:
        return _baseline.Figures("output 0", error, error, 1e-7, 1.0, 2.0**-23)

    flaky = _baseline.Tally([fig(1e-7), fig(1.0), fig(1e-7)])
    assert len(flaky.broken) == 1 and not flaky.fails
    assert _baseline.Tally([fig(1.0), fig(1.0), fig(1e-7)]).fails
    assert fig(0.0).ulps == 0 and fig(float("nan")).broken


def test_the_floor_lets_a_kernel_round_once_where_the_baseline_is_exact():
    exact = _baseline.figures("output 0", torch.tensor([1.0 + 2.0**-22]), torch.tensor([1.0]),
                              torch.tensor([1.0]), 2.0**-23)
    assert exact.baseline == 0 and exact.ulps == 2 and not exact.broken
    far = _baseline.figures("output 0", torch.tensor([1.001]), torch.tensor([1.0]),
                            torch.tensor([1.0]), 2.0**-23)
    assert far.broken


def _welford(**reference):
    spec = {**zoo.WelfordVariance.SPEC, "checks": {"reference": reference}}
    return _checks(verify(zoo.WelfordVariance, spec=spec, checks=["reference"]))["reference"]


def test_another_correct_algorithm_passes_by_the_condition_allowance_and_fails_without_it():
    """Welford's variance of data with a mean of 100: past twice torch's own float32 error on
    every seed, within its componentwise condition; with the allowance taken away
    (`condition: 0`) the first limit alone fails it."""
    passed = _welford()
    assert passed.status == Status.PASS and not passed.findings, passed.summary
    rule = passed.data["rule"]
    assert rule["condition"] == 10
    figures = rule["tensors"]["output 0"]
    assert figures["past_limit_rate"] == 1 and figures["max_abs"] > figures["limit"]
    assert 0 < figures["condition"] < 2 and figures["flake_rate"] == 0

    failed = _welford(condition=0)
    assert failed.status == Status.FAIL
    (finding,) = failed.findings
    assert finding.code == "GV331"
    assert "its worst element is off by 0." in finding.message
    assert "(allowed 0 x), on 3 of 3 seed(s)" in finding.message


def variance_without_graph(x):
    with torch.no_grad():
        return torch.var(x, dim=-1, correction=0)


def test_a_reference_autograd_cannot_differentiate_gives_no_allowance():
    spec = {**zoo.WelfordVariance.SPEC, "reference": "lowprecision_test:variance_without_graph"}
    report = verify(zoo.WelfordVariance, spec=spec, checks=["reference"])
    check = _checks(report)["reference"]
    assert check.status == Status.FAIL
    assert check.data["rule"]["tensors"]["output 0"]["condition"] is None
    assert "its worst element" not in check.findings[0].message


def test_the_allowance_is_judged_per_element_on_the_elements_past_the_limit():
    """An element within its own condition passes; one element far past its own fails the
    tensor, however well conditioned the others are."""
    from gradverify.checks import _condition

    class Sensitivities:
        def of_output(self, index, elements):
            return torch.full((len(elements),), 1.0, dtype=torch.float64)

    eps = 2.0**-23
    error = torch.tensor([0.0, 5 * eps, 9 * eps], dtype=torch.float64)
    assert _condition.worst_ratio(Sensitivities(), 0, True, error, 4 * eps, eps) == \
        pytest.approx(9)
    error[0] = 50 * eps
    assert _condition.worst_ratio(Sensitivities(), 0, True, error, 4 * eps, eps) == \
        pytest.approx(50)
    error[0] = float("inf")
    assert _condition.worst_ratio(Sensitivities(), 0, True, error, 4 * eps, eps) == \
        float("inf")
    assert _condition.worst_ratio(Sensitivities(), 0, True, error * 0, 4 * eps, eps) == 0
