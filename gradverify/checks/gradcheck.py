"""gradcheck: first-order Jacobians from backward against finite differences, in float64, and
backward's linearity in its incoming gradient.

The verdict on the Jacobian is ``torch.autograd.gradcheck``'s; on failure gradverify computes
the mismatching (output, input) blocks itself to name the input, the worst element and the
pattern. torch's gradcheck only ever feeds backward non-negative incoming gradients, so a
backward that drops, clamps or squares negative ones passes it: gradverify also probes backward
with a signed incoming gradient (GV127).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gradverify.checks import _computes as computes
from gradverify.checks import _gradcheck_failure as failed
from gradverify.checks import _strength as strength
from gradverify.checks._gradcheck_failure import IGNORES_INCOMING
from gradverify.checks._modes import (
    MODES,
    SLOW_MODE_MAX_ENTRIES,
    SMALLEST_SLOW_MAX_ENTRIES,
    resolve_mode,
)
from gradverify.checks.base import Check, CheckOption, Consequence, Effect, Outcome, Trait
from gradverify.codes import Code, Symptom
from gradverify.results import CheckResult, Finding, Severity
from gradverify.targets.model import Schema

if TYPE_CHECKING:
    from gradverify.case.context import CheckContext
    from gradverify.checks._calls import DifferentiableView


CODES = (
    Code("GV121", "jacobian-mismatch",
         "The analytical Jacobian (from backward) differs from the numerical one (finite "
         "differences in float64) for one (output, input) pair.",
         "The gradient is wrong: training follows a wrong direction, usually without any error.",
         "def backward(ctx, g):\n    x, = ctx.saved_tensors\n"
         "    return -g * x.cos()   # d sin = +cos",
         "The finding names the input, the worst element and a recognised pattern (sign flipped, "
         "constant factor, zero, not multiplied by the incoming gradient, transposed, only some "
         "rows); fix the formula for that input."),
    Code("GV122", "non-differentiable-point",
         "The mismatch is where the left and right finite differences disagree: the inputs sit "
         "on a kink or a tie (relu at 0, max with equal values, abs at 0).",
         "Finite differences are meaningless at such points, so this is a problem of the spec's "
         "inputs, not of backward.",
         "args: [{shape: [4], init: zeros}]   # relu at exactly 0",
         "Choose an `init` that avoids the kink (e.g. `uniform` with low 0.1, or `randn`), or "
         "distinct values for max/sort-like ops."),
    Code("GV123", "fast-mode-used",
         "gradcheck ran in fast mode, which compares random projections of the Jacobian.",
         "Fast mode can miss an error confined to a few elements.",
         "", "Add a small case (a few elements per dim) so that slow mode runs, or pass --slow."),
    Code("GV124", "no-slow-mode-case",
         "No case of this spec is small enough for slow-mode gradcheck.",
         "Every case ran in fast mode, so errors confined to a few elements can go unseen.",
         "", "Add a case with small shapes of distinct sizes, with batch 1 and batch > 1."),
    Code("GV125", "square-shapes",
         "Every tensor dimension in this case has the same size.",
         "Square shapes hide transpose bugs: grad.t() has the right shape by accident.",
         "args: [{shape: [3, 3]}, {shape: [3, 3]}]",
         "Use distinct sizes, e.g. [2, 3] and [3, 4]."),
    Code("GV126", "gradient-in-wrong-dtype",
         "Gradients were not computed in float64 although the inputs were float64.",
         "gradcheck then compares float64 finite differences with float32 results, so it fails "
         "or passes for the wrong reason.",
         "", "Support float64, or use `reference:`, which checks the working dtype directly."),
    Code("GV128", "input-held-constant",
         "An input that requires no grad cannot become float64 (a frozen tensor subclass, such "
         "as a quantized weight kept in bfloat16): gradient checks hold it as it is, a "
         "constant of the case, and differentiate the other inputs.",
         "Gradient checks need float64; a frozen input that cannot be converted is verified "
         "around rather than refused, and the report says so.",
         "def make_inputs(dtype):\n    return torch.randn(3, 4, dtype=dtype), QuantWeight(w)",
         "Nothing to fix; give a plain float copy of the weight to also check its gradient."),
    Code("GV127", "gradient-not-linear-in-incoming-gradient",
         "backward's result for an input is not linear in the incoming gradient: "
         "backward(-2 * g) differs from -2 * backward(g) for a signed random g. A backward "
         "must return a vector-Jacobian product, grad_output times the local derivative.",
         "torch's gradcheck only ever passes backward non-negative incoming gradients (one-hot "
         "+1 in slow mode, torch.rand in fast mode), so a backward that drops, clamps, masks or "
         "squares negative incoming gradients passes it, yet gives wrong gradients wherever a "
         "later layer sends a negative one: almost always in training.",
         "def backward(ctx, grad):\n    x, = ctx.saved_tensors\n"
         "    return grad * (x > 0) * (grad > 0)   # guided backprop: drops negative grads",
         "Return grad * (local derivative) and apply nothing to grad itself. Gradient-shaping "
         "tricks (guided backprop, clipping) are not gradients: if one is intended, declare it "
         "under `expect: {gradcheck: \"why\"}`."),
    *strength.CODES,
)


class GradcheckCheck(Check):
    name = "gradcheck"
    default = True
    summary = "first-order gradients match finite differences (float64), linear in grad_output"
    codes = CODES
    traits = frozenset({Trait.CALLS_BACKWARD, Trait.DIFFERENTIATES, Trait.JUDGES_GRADIENT})
    consequences = (  # no second derivative on a non-differentiable point; a backward that
        # ignores its incoming gradient detaches it too; a spec saying backward is not the
        # gradient explains what assumes it is
        Consequence(Effect.SKIPS, frozenset({"GV122"}), frozenset({Trait.SECOND_ORDER})),
        Consequence(Effect.MARKS, frozenset({"GV121"}), pattern=IGNORES_INCOMING,
                    symptom=Symptom.DETACHED, same_input=True),
        Consequence(Effect.MARKS, symptom=Symptom.ASSUMES_GRADIENT, same_input=True, declared=True))
    options = (CheckOption("mode", str, "auto, slow or fast (over `mode =`; --fast/--slow "
                           "override it)", MODES),)

    def across_cases(self, results: Sequence[CheckResult]) -> list[Finding]:
        """GV129/GV130 when the cases leave an input's gradient unexercised or an input
        constant (``_strength``); GV124 when no case of the spec ran in slow mode."""
        found = strength.across_cases(results)
        modes = [r.mode for r in results if r.mode]
        if not modes or any("slow" in m for m in modes):
            return found
        return [*found, Finding("GV124", Severity.INFO,
                        "no case of this spec is small enough for slow-mode gradcheck, so errors "
                        "confined to a few elements can go unseen",
                        hint="add a case with small shapes of distinct sizes (batch 1 and "
                             "batch > 1)")]

    def run(self, ctx: CheckContext) -> Outcome:

        from gradverify.checks import _calls as calls
        from gradverify.checks import _jacobian as jac
        from gradverify.checks import _probes as probes

        skipped = computes.finite_differences_skip(ctx)
        if skipped is not None:
            return skipped
        view = calls.differentiable_view(ctx)
        if isinstance(view, calls.NothingToDifferentiate):
            # gradcheck speaks for the case: with nothing to differentiate it verified nothing
            schema = ctx.info.detail(Schema)
            if schema and schema.mutates:  # torch allows no autograd formula for a mutating op
                return Outcome.skip(f"{view.reason} (the op writes into "
                                    f"{', '.join(schema.mutates)}: torch allows it no "
                                    "autograd formula)")
            return Outcome.skip(view.reason, nothing_verified=view.verifies_nothing)
        entries = jac.jacobian_entries(view.inputs, view.outputs)
        outcome = Outcome(data={"jacobian_entries": entries})
        zero = [n for n in strength.zero_gradients(view.outputs, view.leaves, view.names,
                                                   ctx.generator("gradcheck-exercised"))
                if n not in ctx.spec.zero_grad]
        # On the graph of the view's own call, before gradcheck perturbs anything.
        nonlinear = probes.linearity(view.outputs, view.leaves, ctx.generator("gradcheck-linear"),
                                     nondet_tol=ctx.tolerance.nondet_tol)
        failure = self._torch_gradcheck(ctx, view, entries, outcome)
        if outcome.findings:
            return outcome  # the Function raised inside gradcheck
        self._notes(ctx, entries, outcome)
        # a mismatch exercised the gradient: what was zero counts only on a passing case
        outcome.data.update(strength.row_data(
            zero if failure is None else [],
            strength.constant_inputs(ctx.args("working"), exclude=ctx.info.parameters),
            ctx.location))
        if failure is None:
            for item in nonlinear:
                outcome.add(failed.nonlinear_finding(item, view.names, ctx))
            outcome.summary = (
                "gradients are not linear in the incoming gradient" if nonlinear else
                f"{entries:,} Jacobian entries match (slow mode)" if outcome.mode == "slow" else
                f"random projections of {entries:,} Jacobian entries match ({outcome.mode} mode)"
            ) + computes.tolerance_note(ctx)
            return outcome
        failed.mismatch(ctx, view, failure, nonlinear, outcome)
        return outcome

    @staticmethod
    def _torch_gradcheck(ctx: CheckContext, view: DifferentiableView, entries: int,
                         outcome: Outcome) -> str | None:
        """torch's verdict, in the mode(s) chosen: its failure message, or None. When the
        Function raised inside it, the finding is added to ``outcome`` (and None returned)."""
        import torch
        from torch.autograd.gradcheck import GradcheckError

        from gradverify.checks import _calls as calls
        from gradverify.checks import _jacobian as jac

        mode = resolve_mode(ctx.mode, entries)
        outcome.mode = mode
        modes = [mode]
        if mode == "fast" and ctx.smallest and ctx.mode == "auto" \
                and entries <= SMALLEST_SLOW_MAX_ENTRIES:
            modes.append("slow")
            outcome.mode = "fast+slow"
        tol = ctx.tolerance
        runs = [(view.fn, view.inputs, run_mode, False) for run_mode in modes]
        # a forward that writes into its input is also called as bare torch calls it, on the
        # same tensors every time: never a pass where bare gradcheck fails or raises
        same = calls.on_the_same_tensors(ctx.info, ctx.args("double"),
                                         view.applied.args.diff_positions,
                                         view.applied.differentiable)
        if same is not None:
            runs.append((same, [t.detach().clone().requires_grad_(True) for t in view.inputs],
                         modes[0], True))
        current = runs[0]
        try:
            for current in runs:
                fn, inputs, run_mode, _ = current
                with jac.no_slow_rerun():
                    torch.autograd.gradcheck(fn, inputs, eps=tol.eps, atol=tol.atol,
                                             rtol=tol.rtol, nondet_tol=tol.nondet_tol,
                                             check_undefined_grad=False,
                                             fast_mode=run_mode == "fast", raise_exception=True)
        except GradcheckError as exc:
            return (failed.AS_TORCH_CALLS_IT if current[3] else "") + str(exc)
        except Exception as exc:  # noqa: BLE001 -- forward or backward raised inside gradcheck
            outcome.add(failed.raised(exc, ctx, len(view.outputs), rerun=current[3]))
            outcome.summary = "the Function raised during gradcheck"
        return None

    @staticmethod
    def _notes(ctx: CheckContext, entries: int, outcome: Outcome) -> None:
        for name, what in ctx.maker.constants.items():
            outcome.add(Finding(
                "GV128", Severity.INFO,
                f"{name!r} ({what}, requires no grad) cannot become float64: held as a "
                "constant of the case; the other inputs' gradients are verified", input=name,
                hint="give a plain float copy of it in another case to check its gradient too"))
        if outcome.mode == "fast":
            outcome.add(Finding(
                "GV123", Severity.INFO,
                f"fast mode ran ({entries:,} Jacobian entries > {SLOW_MODE_MAX_ENTRIES:,}): it "
                "compares random projections and can miss an error confined to a few elements",
                hint="add a small case so that slow mode runs, or pass --slow"))
        square = _square_shapes(ctx.args("double"))
        if square:
            outcome.add(Finding(
                "GV125", Severity.INFO,
                f"every tensor dimension in this case is {square}: square shapes hide transpose "
                "bugs", hint="use distinct sizes, e.g. [2, 3] and [3, 4]"))

def _square_shapes(args: Any) -> int | None:
    import torch

    tensors = [v for v in args.values if isinstance(v, torch.Tensor)]
    sizes = {s for t in tensors for s in t.shape}
    if len(sizes) == 1 and any(t.dim() >= 2 for t in tensors) and sizes != {1}:
        return sizes.pop()
    return None


CHECK = GradcheckCheck()
