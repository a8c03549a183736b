"""Findings name the line of the defect where it can be known: the in-place write into a saved
tensor or the incoming gradient (not backward's ``def``), and the element of backward's executed
``return`` that gives a wrong gradient (``checks/_defect.py``, ``checks/_probes.py``)."""
from __future__ import annotations

import inspect

import torch
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


class WrongTermAssignedEarlier(Function):
    """The gradient for `x` is computed wrong lines before the `return` that gives it."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return torch.sin(x) * w

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        if grad.numel() > 100:
            gx = grad * torch.cos(x) * w
        else:
            gx = -grad * torch.cos(x) * w  # the defect
        gw = grad * torch.sin(x)
        out = gx.contiguous()
        return out.view_as(x), gw


class OneInputAccumulated(Function):
    """One input, its gradient accumulated: the last statement that changed it is named."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3 + x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        gx = grad.clone()
        gx += 3 * grad * x ** 3  # the defect: x ** 2
        return gx


class ReturnsWhatWasSaved(Function):
    """A wrong gradient that is a value forward saved: no statement of backward computes it,
    so the `return` is named."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x * 3)
        return x ** 2

    @staticmethod
    def backward(ctx, grad):
        (three_x,) = ctx.saved_tensors
        return three_x  # the defect: 2 * x * grad


class ZeroedAfterwards(Function):
    """The gradient's first element zeroed in place after it was computed right."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(context, grad):
        gx = grad * 2
        gx[0] = 0  # the defect
        return gx


class ReturnsAnItemOfWhatWasSaved(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x * 3)
        return x ** 2

    @staticmethod
    def backward(context, grad):
        three_x = context.saved_tensors[0]
        return three_x  # the defect: 2 * x * grad


class CopiedIntoPartOfABuffer(Function):
    """A wrong term computed, then copied into part of a zero buffer: the copy computes
    nothing, the statement before it does."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 2

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        part = 3 * x * grad  # the defect: 2 * x * grad
        gx = torch.zeros_like(x)
        gx[...] = part.reshape(x.shape)
        return gx


SPEC_XW = {"cases": [{"args": {"x": {"shape": [3]}, "w": {"shape": [3]}}}]}
SPEC_X = {"cases": [{"args": {"x": {"shape": [3]}}}]}


def test_a_wrong_gradient_points_at_the_statement_that_computed_it() -> None:
    finding = _finding(WrongTermAssignedEarlier, "gradcheck", SPEC_XW)
    assert finding.code == "GV121" and finding.input == "x" and finding.location is not None
    assert finding.location.line == _line_of(WrongTermAssignedEarlier, "# the defect")
    finding = _finding(OneInputAccumulated, "gradcheck", SPEC_X)
    assert finding.location is not None
    assert finding.location.line == _line_of(OneInputAccumulated, "# the defect")
    finding = _finding(ReturnsWhatWasSaved, "gradcheck", SPEC_X)
    assert finding.location is not None
    assert finding.location.line == _line_of(ReturnsWhatWasSaved, "return three_x")
    finding = _finding(ZeroedAfterwards, "gradcheck", SPEC_X)
    assert finding.location is not None
    assert finding.location.line == _line_of(ZeroedAfterwards, "# the defect")
    finding = _finding(ReturnsAnItemOfWhatWasSaved, "gradcheck", SPEC_X)
    assert finding.location is not None
    assert finding.location.line == _line_of(ReturnsAnItemOfWhatWasSaved, "return three_x")
    finding = _finding(CopiedIntoPartOfABuffer, "gradcheck", SPEC_X)
    assert finding.location is not None
    assert finding.location.line == _line_of(CopiedIntoPartOfABuffer, "# the defect")


def test_traced_gives_the_lines_run_and_puts_the_tracer_back() -> None:
    import sys

    from gradverify import frames

    def f(flag: bool) -> int:
        y = 1
        if flag:
            y = 2
        return y

    first = f.__code__.co_firstlineno
    run = frames.traced(f.__code__, lambda: f(False))
    assert run is not None and run.returned.line == first + 4
    assert run.lines == (first + 1, first + 2, first + 4)
    assert frames.traced(f.__code__, lambda: None) is None
    assert sys.gettrace() is None or "coverage" in type(sys.gettrace()).__module__
