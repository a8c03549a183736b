"""The cheap composition cells that run by default: checkpoint and saved_hooks.
Their zoo Functions (tests/zoo/{checkpoint,saved_hooks}.py) are
run by zoo_test and trust_test; here, what the zoo cannot show."""
from __future__ import annotations

from typing import ClassVar

import pytest
import torch
from torch.autograd import Function

import zoo
from gradverify import verify
from gradverify.registry import REGISTRY
from gradverify.results import Severity, Status

PAIR = zoo.spec_for(x={"shape": [3]}, w={"shape": [3]})
CELLS = ("checkpoint", "saved_hooks")


def _row(report, check):
    (row,) = [c for case in report.results for c in case.checks if c.name == check]
    return row


def test_the_cells_run_by_default_and_are_not_compositions():
    assert all(REGISTRY[n].default and not REGISTRY[n].composition for n in CELLS)


LOOK_ALIKES = {
    "mark_dirty": [zoo.InplaceAddScalar, zoo.InplaceSigmoidSavesOutput, zoo.InplaceMul,
                   zoo.ScaleInPlaceDirty],
    "once_differentiable numpy": [zoo.NumpyOnceDifferentiable, zoo.NumpyBackwardDeclared,
                                  zoo.KernelScratchSaved],
    "multi-output, non-differentiable outputs": [zoo.MaxWithIndex, zoo.CountsAndMask,
                                                 zoo.GlobalMaxPoolIndices],
    "views": [zoo.IdentityView, zoo.MaxValuesReshaped],
    "declares a jvp": [zoo.SinWithJvp, zoo.SetupContextTanh, zoo.CubeFunctional],
}


@pytest.mark.parametrize("cls", [c for group in LOOK_ALIKES.values() for c in group],
                         ids=lambda c: c.__name__)
def test_the_cells_are_silent_on_correct_look_alikes(cls):
    report = verify(cls, spec=cls.SPEC, checks=CELLS)
    rows = {c.name: c for case in report.results for c in case.checks}
    assert set(rows) == set(CELLS)
    for row in rows.values():
        assert row.status in (Status.PASS, Status.SKIP), (row.name, row.findings)
        assert row.summary
    # each one composes at least once (checkpoint runs on every differentiable Function)
    assert rows["checkpoint"].status == Status.PASS, rows["checkpoint"].summary


class _SavesOneOrTwo(Function):
    """forward saves one tensor or two, by the parity of a call counter; backward handles
    both, so every eager call is right. Checkpoint's recomputation saves the other number."""

    CALLS: ClassVar[list[int]] = [0]

    @staticmethod
    def forward(x, w):
        return x * w

    @staticmethod
    def setup_context(ctx, inputs, output):
        _SavesOneOrTwo.CALLS[0] += 1
        x, w = inputs
        ctx.save_for_backward(*((torch.stack([x, w]),) if _SavesOneOrTwo.CALLS[0] % 2
                                else (x, w)))

    @staticmethod
    def backward(ctx, grad):
        saved = ctx.saved_tensors
        x, w = saved if len(saved) == 2 else saved[0]
        return grad * w, grad * x


def test_checkpoint_refusing_the_recomputation_is_an_error_at_forward():
    report = verify(_SavesOneOrTwo, spec=PAIR, checks=["gradcheck", "checkpoint"])
    assert _row(report, "gradcheck").status == Status.PASS
    (finding,) = _row(report, "checkpoint").findings
    assert finding.code == "GV392" and finding.severity == Severity.ERROR
    assert "recomputed forward saved other tensors" in finding.message
    assert finding.location is not None and finding.location.line > 0


class _ReadsSavedTwice(Function):
    @staticmethod
    def forward(x):
        return x.sin()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.saved_tensors[0].cos() + 0 * ctx.saved_tensors[0]


def test_reading_saved_tensors_twice_is_a_warning_that_says_to_read_once():
    report = verify(_ReadsSavedTwice, spec=zoo.VEC, checks=["checkpoint"])
    (finding,) = _row(report, "checkpoint").findings
    assert finding.code == "GV392" and finding.severity == Severity.WARNING
    assert "more than once" in finding.message and "once" in finding.hint


class _KeptOnCtx(Function):
    @staticmethod
    def forward(x):
        return x.exp()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.y = output

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.y


def test_a_tensor_kept_on_ctx_is_saved_tensors_finding_not_saved_hooks():
    report = verify(_KeptOnCtx, spec=zoo.VEC, checks=["saved_tensors", "saved_hooks"])
    hooks = _row(report, "saved_hooks")
    assert hooks.status == Status.PASS and not hooks.findings
    assert hooks.summary.startswith("0 saved tensor(s) went through")
    assert "GV211" in {f.code for f in _row(report, "saved_tensors").findings}


class _NoisyBackward(Function):
    """backward adds noise from torch's generator: every backward gives another gradient."""

    @staticmethod
    def forward(x):
        return x.sin()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.cos() + 1e-3 * torch.rand_like(x)


def test_a_nondeterministic_backward_is_said_once():
    report = verify(_NoisyBackward, spec=zoo.VEC,
                    checks=["determinism", "checkpoint", "saved_hooks"])
    assert "GV241" in {f.code for f in _row(report, "determinism").findings}
    for cell in ("checkpoint", "saved_hooks"):
        followed = _row(report, cell).findings
        assert followed and all(f.consequence_of and "GV241" in f.consequence_of
                                for f in followed), cell


QUANTISED = '''
    import torch
    from torch.autograd import Function
    from torch.autograd.function import once_differentiable


    class QuantisedMul(Function):
        @staticmethod
        def forward(x, w):
            return x * w

        @staticmethod
        def setup_context(ctx, inputs, output):
            x, w = inputs
            scale = w.detach().abs().max()
            q = w.detach() / scale
            q.scale = scale
            ctx.save_for_backward(x, q)

        @staticmethod
        @once_differentiable
        def backward(ctx, grad):
            x, q = ctx.saved_tensors
            return grad * q * q.scale, grad * x
'''


def test_the_cli_names_the_cell_and_the_fix(project):
    from conftest import run_cli

    project.write("quant.py", QUANTISED)
    result = run_cli("check", "quant:QuantisedMul")
    assert result.code == 1, result.output
    assert "saved_hooks" in result.stdout and "[GV272 saved_hooks]" in result.stdout
    assert "AttributeError" in result.stdout and "save_for_backward" in result.stdout
    kept = "\n".join(line for line in QUANTISED.splitlines() if "q.scale =" not in line)
    fixed = kept.replace(
        "ctx.save_for_backward(x, q)", "ctx.save_for_backward(x, q, scale)").replace(
        "x, q = ctx.saved_tensors", "x, q, scale = ctx.saved_tensors").replace(
        "q * q.scale", "q * scale")
    project.write("quant_fixed.py", fixed)
    result = run_cli("check", "quant_fixed:QuantisedMul")
    assert result.code == 0, result.output
