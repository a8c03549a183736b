"""precision: the working dtype (float32 unless declared) against the float64 reference.

Outputs and gradients that become inf/NaN where float64 is finite fail (a float32 overflow
that float64 hides, such as exp(x) with x > 88); errors far beyond the dtype's resolution warn
(see ``DTYPE_TOLERANCE``). The spec's ``checks: {precision: {dtype: bfloat16}}`` checks
another working dtype.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from gradverify.checks.base import Option, Outcome
from gradverify.codes import Code
from gradverify.report.results import Finding, Severity

if TYPE_CHECKING:
    from gradverify.context import CheckContext

DTYPES = ("float32", "float16", "bfloat16", "complex64")


CODES = (
    Code("GV321", "low-precision-overflow",
         "In the working dtype (float32/float16/bfloat16), an output or gradient is inf or NaN "
         "where float64 is finite.",
         "float64 gradient checks hide overflow: exp(89) is inf in float32, exp(12) in float16.",
         "def forward(ctx, x):\n    e = x.exp()\n    return (e / e.sum()).log()   # naive log-softmax",
         "Use a stable formula: subtract the maximum before exp, use logsumexp, log1p, expm1."),
    Code("GV322", "low-precision-error",
         "In the working dtype, an output or gradient is far from float64 (beyond the dtype's "
         "tolerance table).",
         "Catastrophic cancellation or large unscaled sums make training noisy or biased.",
         "return (x + 1e4) - 1e4", "Rearrange the formula, or accumulate in float32/float64."),
    Code("GV323", "low-precision-unsupported",
         "The Function raised in its working dtype.",
         "The spec declares that dtype as the one the Function is used with.", "",
         "Support the dtype, or declare the dtype the Function really works in."),
)


class PrecisionCheck:
    name = "precision"
    default = True
    summary = "the working dtype stays finite and close to float64"
    codes = CODES
    options = (Option("dtype", str, "working dtype to check (default: the spec's)", DTYPES),)
    requires = ("contract",)

    def run(self, ctx: CheckContext) -> Outcome:
        import torch

        from gradverify.checks import _calls as calls
        from gradverify.checks import _compare as cmp

        working = ctx.args("working")
        override = ctx.options.get("dtype")
        if override:
            target = getattr(torch, override)
            working.values = [v.detach().to(target).requires_grad_(v.requires_grad)
                              if isinstance(v, torch.Tensor) and v.is_floating_point() else v
                              for v in working.values]
        floating = [v for v in working.values if isinstance(v, torch.Tensor)
                    and (v.is_floating_point() or v.is_complex())]
        if not floating:
            return Outcome.skip("no floating-point input")
        dtype = floating[0].dtype
        if dtype in (torch.float64, torch.complex128):
            return Outcome.skip("the working dtype is float64")
        double = ctx.args("double")
        if override:  # the float64 run sees exactly the low-precision values
            double.values = [w.detach().to(d.dtype).requires_grad_(d.requires_grad)
                             if isinstance(d, torch.Tensor) and d.is_floating_point() else d
                             for w, d in zip(working.values, double.values)]
        diff = double.diff_positions
        reference_run = calls.apply(ctx.info, double)
        grads = calls.random_grads(reference_run, ctx.generator("precision")) \
            if reference_run.differentiable else None
        reference = calls.forward_backward(ctx.info, double, grads, diff)
        label = str(dtype).removeprefix("torch.")
        try:
            ours = calls.forward_backward(ctx.info, working, grads, diff)
        except Exception as exc:  # noqa: BLE001 -- user code
            outcome = Outcome()
            outcome.add(Finding(
                "GV323", Severity.ERROR, f"the Function raised {calls.describe_exception(exc)} in "
                f"{label}", location=calls.user_location(exc, ctx.info) or ctx.info.forward_location,
                hint=f"support {label} inputs, or declare the dtype the Function works in"))
            return outcome
        rtol, atol = cmp.tolerance_for(dtype)
        outcome = Outcome(summary=f"{label} outputs and gradients match float64 "
                                  f"(rtol {rtol:g}, atol {atol:g})")
        names = [double.names[i] for i in diff]
        for mismatch in cmp.compare_runs(ours, reference, names, rtol, atol):
            if mismatch.non_finite:
                outcome.add(Finding(
                    "GV321", Severity.ERROR, f"in {label}, {mismatch.describe()}",
                    input=mismatch.input, output=mismatch.output,
                    location=ctx.info.forward_location if mismatch.output is not None
                    else ctx.location,
                    hint="an intermediate overflows or underflows in low precision: use a "
                         "stable formula (subtract the max before exp, log1p/expm1, "
                         "logsumexp), or compute it in float32/float64 internally",
                    data=mismatch.data))
            else:
                outcome.add(Finding(
                    "GV322", Severity.WARNING, f"in {label}, {mismatch.describe()}",
                    input=mismatch.input, output=mismatch.output,
                    location=ctx.info.forward_location if mismatch.output is not None
                    else ctx.location,
                    hint="the formula loses precision (cancellation, large sums, a division "
                         "by a small difference); rearrange it or accumulate in higher precision",
                    data=mismatch.data))
        return outcome


CHECK = PrecisionCheck()
