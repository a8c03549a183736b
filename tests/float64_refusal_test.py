"""Kernels that refuse float64 (docs/checks.md, "Kernels without float64"): forward or backward
raising on the float64 copies of the inputs but running in their working dtype is no defect of
the Function. Without a spec's reference nothing can judge it (an error, never a failure); with
one, the reference check alone judges it, and catches a wrong gradient."""
from __future__ import annotations

import pytest
import torch
from torch.autograd import Function

from gradverify import verify
from gradverify.results import Status

_NO_FLOAT64 = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}


class ForwardRefuses(Function):
    @staticmethod
    def forward(ctx, x):
        _NO_FLOAT64[x.dtype]
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


class ForwardRefusesWrongBackward(ForwardRefuses):
    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return x * grad


class BackwardRefuses(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        _NO_FLOAT64[x.dtype]
        return 2 * x * grad


class BackwardRefusesWrong(BackwardRefuses):
    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        _NO_FLOAT64[x.dtype]
        return x * grad


class BackwardAlwaysRaises(BackwardRefuses):
    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad @ x.view(2, 2)  # [4] @ [2, 2]: wrong in every dtype


def square(x):
    return x * x


def _spec(**extra):
    return {"cases": [{"args": {"x": {"shape": [4], "dtype": "float32"}}}], **extra}


def _rows(function, **extra):
    report = verify(function, spec=_spec(**extra))
    assert not report.errors, [e.message for e in report.errors]
    (result,) = report.results
    return result, {c.name: c for c in result.checks}


@pytest.mark.parametrize("selected", [{}, {"checks": ["gradcheck"]}], ids=["all", "gradcheck"])
def test_a_backward_that_refuses_float64_is_an_error_never_a_failure(selected):
    report = verify(BackwardRefuses, spec=_spec(), **selected)
    (result,) = report.results
    rows = {c.name: c for c in result.checks}
    carrier = rows["contract" if not selected else "gradcheck"]
    assert result.status == carrier.status == Status.ERROR
    (finding,) = carrier.findings
    assert finding.code == "GV026" and finding.refuses_float64 == (
        "backward raised KeyError: torch.float64")
    assert "reference: mod:fn" in (finding.hint or "")
    assert not [f.code for c in result.checks for f in c.findings if f.code != "GV026"]
    if not selected:
        assert rows["gradcheck"].status == Status.SKIP
        assert rows["gradcheck"].summary == ("skipped: needs float64, where backward raised "
                                             "KeyError: torch.float64 (see contract)")
        assert rows["lint"].status == Status.PASS  # reads the class: needs no float64


def test_a_forward_that_refuses_float64_stays_an_error_naming_the_reference():
    result, rows = _rows(ForwardRefuses)
    assert result.status == Status.ERROR
    (finding,) = rows["contract"].findings
    assert finding.code == "GV008" and finding.refuses_float64 == (
        "forward raised KeyError: torch.float64")
    assert "reference: mod:fn" in (finding.hint or "")


@pytest.mark.parametrize("function", [ForwardRefuses, BackwardRefuses])
def test_with_a_reference_only_the_reference_judges_and_passes_a_correct_kernel(function):
    result, rows = _rows(function, reference="float64_refusal_test:square")
    assert result.status == Status.PASS
    assert rows["reference"].status == Status.PASS, rows["reference"].summary
    assert rows["reference"].data["rule"]["dtype"] == "float32"
    judged = {name for name, row in rows.items() if row.status != Status.SKIP}
    assert judged == {"reference", "lint"}
    assert rows["gradcheck"].summary.startswith("skipped: needs float64, where ")


@pytest.mark.parametrize("function", [ForwardRefuses, BackwardRefuses])
def test_without_the_reference_check_the_refusal_is_the_cases_error(function):
    report = verify(function, spec=_spec(reference="float64_refusal_test:square"),
                    skip=["reference"])
    (result,) = report.results
    rows = {c.name: c for c in result.checks}
    assert result.status == Status.ERROR
    assert "reference" not in rows and rows["contract"].status == Status.ERROR


@pytest.mark.parametrize("function", [ForwardRefusesWrongBackward, BackwardRefusesWrong])
def test_with_a_reference_a_wrong_gradient_is_caught_in_the_working_dtype(function):
    result, rows = _rows(function, reference="float64_refusal_test:square")
    assert result.status == Status.FAIL
    (finding,) = rows["reference"].findings
    assert finding.code == "GV332" and finding.input == "x"


def test_a_backward_that_raises_in_every_dtype_is_still_a_failure():
    result, rows = _rows(BackwardAlwaysRaises)
    assert result.status == rows["contract"].status == Status.FAIL
    assert [f.code for f in rows["contract"].findings] == ["GV101"]
