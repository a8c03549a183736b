"""reference: the Function against a plain-PyTorch implementation of the same math.

``reference: mod:fn`` in a spec names a function taking forward's arguments. In a low precision
(the working dtype, or the dtype a kernel computes in inside, ``_computes``), the Function's
outputs and gradients are judged by the error-baseline rule (``_baseline``): their error
against autograd through the reference in float64 may be at most twice the error of the
reference itself run in that dtype, plus a few ulps, on each of several seeds; past that, an
element within ten times what the rounding of the inputs alone moves it by is another correct
algorithm's rounding (``_condition``). In float64, or
when the reference cannot run in the low dtype, they must match within the dtype's tolerance.
This is how to verify kernels that cannot run in float64 at all.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from gradverify.checks import _baseline as rule
from gradverify.checks.base import Check, CheckOption, Outcome, Trait
from gradverify.codes import Code
from gradverify.results import Finding, Severity

if TYPE_CHECKING:
    from gradverify.case.context import CheckContext


CODES = (
    Code("GV331", "reference-output-mismatch",
         "An output differs from the spec's plain-PyTorch reference.",
         "The kernel computes something else than the math it implements.",
         "reference: mypkg.ops:linear_reference", "Fix the kernel (or the reference)."),
    Code("GV332", "reference-gradient-mismatch",
         "A gradient differs from autograd through the reference.",
         "backward is wrong; for kernels that cannot run in float64, this is the gradient check.",
         "", "Fix backward's formula for the input named."),
    Code("GV333", "reference-raised",
         "The reference function raised.",
         "It must take forward's arguments and return the same outputs.", "",
         "Make the reference take the same arguments as forward."),
)


class ReferenceCheck(Check):
    name = "reference"
    default = True
    summary = "outputs and gradients match a plain-PyTorch reference (spec `reference:`)"
    codes = CODES
    traits = frozenset({Trait.CALLS_BACKWARD, Trait.DIFFERENTIATES, Trait.COMPARES_RUNS})
    needs_reference = True
    """Selected only for specs that name a reference."""
    judges_in_working_dtype = True
    options = (CheckOption("seeds", int, "seeds the error-baseline rule runs on (default 3)"),
               CheckOption("k", float, "how many times the reference's own error in the low "
                                       "dtype the target may be off (default 2)"),
               CheckOption("condition", float, "how many times the rounding its inputs' own "
                                               "rounding causes an element may be off, past "
                                               "that (default 10)"))

    def run(self, ctx: CheckContext) -> Outcome:
        low = rule.low_dtype(ctx)
        if low is not None and ctx.reference is not None:
            outcome = rule.judge(ctx, low)
            if outcome is not None:
                return outcome
        return self._within_tolerance(ctx)

    def _within_tolerance(self, ctx: CheckContext) -> Outcome:
        import torch

        from gradverify.checks import _calls as calls
        from gradverify.checks import _compare as cmp

        if ctx.reference is None:
            return Outcome.skip("the spec names no reference")
        working = ctx.args("working")
        double = ctx.args("double")
        diff = double.diff_positions
        run = calls.apply(ctx.info, ctx.args("working"))
        grads = calls.random_grads(run, ctx.generator("reference")) if run.differentiable else None
        ours = calls.forward_backward(ctx.info, working, grads, diff)
        try:
            theirs = rule.reference_run(ctx, double.values, grads, diff)
        except Exception as exc:  # noqa: BLE001 -- user code
            outcome = Outcome()
            outcome.add(Finding(
                "GV333", Severity.ERROR,
                f"the reference {ctx.spec.reference} raised {calls.describe_exception(exc)}",
                hint="the reference takes forward's arguments (float64 tensors) and returns "
                     "the same outputs, computed with plain differentiable torch ops"))
            return outcome
        floating = [v for v in working.values if isinstance(v, torch.Tensor)
                    and (v.is_floating_point() or v.is_complex())]
        dtype = floating[0].dtype if floating else torch.float32
        rtol, atol = cmp.tolerance_for(dtype)
        label = str(dtype).removeprefix("torch.")
        outcome = Outcome(summary=f"matches {ctx.spec.reference} in {label} "
                                  f"(rtol {rtol:g}, atol {atol:g})")
        names = [double.names[i] for i in diff]
        for mismatch in cmp.compare_runs(ours, theirs, names, rtol, atol):
            is_output = mismatch.output is not None
            outcome.add(Finding(
                "GV331" if is_output else "GV332", Severity.ERROR,
                f"{mismatch.describe()} against the reference (Function in {label}, reference "
                "in float64)", input=mismatch.input, output=mismatch.output,
                location=ctx.forward_location if is_output else ctx.location,
                hint="the kernel computes something else than the reference"
                     + ("" if is_output else "; its backward formula for this input is wrong"),
                data=mismatch.data))
        return outcome


CHECK = ReferenceCheck()
