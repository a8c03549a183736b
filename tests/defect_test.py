"""Findings name the line of the defect where it can be known: the in-place write into a saved
tensor or the incoming gradient (not backward's ``def``), and the element of backward's executed
``return`` that gives a wrong gradient (``checks/_defect.py``, ``checks/_probes.py``)."""
from __future__ import annotations

import inspect

from torch.autograd import Function

import zoo.mutation as zoo_mutation
from gradverify import verify
from gradverify.results import Finding


def _finding(cls: type, check: str, spec: dict) -> Finding:
    report = verify(cls, spec=spec, checks=[check])
    (row,) = report.results[0].checks
    return row.findings[0]


def _line_of(cls: type, text: str) -> int:
    lines, start = inspect.getsourcelines(cls)
    return start + next(i for i, line in enumerate(lines) if text in line)


class TwoReturnsWrongWeight(Function):
    """The gradient for `w` has its sign flipped, in the second of two returns."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        if grad.numel() > 100:
            return grad * w, grad * x
        return (grad * w,
                -grad * x)  # the defect


def test_a_wrong_gradient_points_at_its_element_of_the_return_executed() -> None:
    finding = _finding(TwoReturnsWrongWeight, "gradcheck",
                       {"cases": [{"args": {"x": {"shape": [3]}, "w": {"shape": [3]}}}]})
    assert finding.code == "GV121" and finding.input == "w"
    assert finding.location is not None
    assert finding.location.line == _line_of(TwoReturnsWrongWeight, "-grad * x)")
    assert finding.location.file.endswith("defect_test.py")


def test_a_write_into_a_saved_tensor_points_at_the_in_place_op() -> None:
    cls = zoo_mutation.BackwardMutatesSaved
    finding = _finding(cls, "mutation", cls.SPEC)
    assert finding.code == "GV222" and finding.location is not None
    assert finding.location.line == _line_of(cls, "x.mul_(2)")


def test_a_write_into_the_incoming_gradient_points_at_the_in_place_op() -> None:
    cls = zoo_mutation.BackwardMutatesGrad
    finding = _finding(cls, "mutation", cls.SPEC)
    assert finding.code == "GV223" and finding.location is not None
    assert finding.location.line == _line_of(cls, "grad.mul_(3)")


def test_returned_at_is_the_executed_return_and_the_profiler_is_put_back() -> None:
    import sys

    from gradverify import frames

    def f(flag: bool) -> int:
        if flag:
            return 1
        return 2

    def outer_profile(frame, event, arg):  # type: ignore[no-untyped-def]
        return None

    first = f.__code__.co_firstlineno
    sys.setprofile(outer_profile)
    try:
        lines = [frames.returned_at(f.__code__, lambda flag=flag: f(flag))
                 for flag in (True, False)]
        assert [line.line if line else None for line in lines] == [first + 2, first + 3]
        assert frames.returned_at(f.__code__, lambda: None) is None
        assert sys.getprofile() is outer_profile
    finally:
        sys.setprofile(None)
