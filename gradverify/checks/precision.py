"""precision: the working dtype (float32 unless declared) against float64 on the same values.

The float64 run uses the working-dtype inputs widened, so rounding of the inputs is never
blamed on the formula: a - b of nearly equal float32 inputs is exact and stays silent. An output
or gradient that is inf/NaN where float64 is finite fails (a float32 overflow that float64
hides, such as exp(x) with x > 88). Every other output and gradient is measured against its own
scale, as the relative error of the whole tensor, ||working - float64|| / ||float64||:

    working dtype        warning above   failure above
    float32, complex64   1e-4            1e-2
    float16              1e-2            1e-1
    bfloat16             4e-2            2e-1

A correct formula stays within a few hundred ulps of its dtype; a failure means fewer than two
correct digits. The spec's `checks: {precision: {dtype: bfloat16}}` checks another working dtype.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gradverify.checks.base import Check, CheckOption, Outcome, Trait
from gradverify.codes import Code
from gradverify.results import Finding, Location, Severity
from gradverify.targets import draws_random

if TYPE_CHECKING:
    import torch

    from gradverify.case.context import CheckContext
    from gradverify.case.inputs import Args
    from gradverify.checks._compare import Mismatch

DTYPES = ("float32", "float16", "bfloat16", "complex64")


CODES = (
    Code("GV321", "low-precision-overflow",
         "In the working dtype (float32/float16/bfloat16), an output or gradient is inf or NaN "
         "where float64 is finite.",
         "float64 gradient checks hide overflow: exp(89) is inf in float32, exp(12) in float16.",
         "def forward(ctx, x):\n    e = x.exp()\n"
         "    return (e / e.sum()).log()   # naive log-softmax",
         "Use a stable formula: subtract the maximum before exp, use logsumexp, log1p, expm1."),
    Code("GV322", "low-precision-error",
         "In the working dtype, an output or gradient is far from float64 computed on the same "
         "(rounded) inputs: the relative error of the whole tensor, ||working - float64|| / "
         "||float64||, exceeds the dtype's limit. Warning above 1e-4 (float32, complex64), "
         "1e-2 (float16) or 4e-2 (bfloat16); failure above 1e-2, 1e-1 or 2e-1, when fewer "
         "than two digits are right.",
         "Input rounding is not counted (float64 runs on the rounded inputs), so the error is "
         "the formula's own: catastrophic cancellation (1 - cos x, x - sin x for small x, "
         "n*x - sum(x) for data far from 0) or large unscaled sums make float32 gradients "
         "wrong by percent, which float64 gradient checks never see.",
         "def backward(ctx, g):\n    x, = ctx.saved_tensors\n    return g * (1 - x.cos())"
         "   # x ~ 1e-3: 10% off in float32",
         "Rearrange the formula to avoid the cancellation (2 * sin(x/2)**2 for 1 - cos x, "
         "x - mean(x) instead of n*x - sum(x), log1p/expm1), or compute that step in float64."),
    Code("GV323", "low-precision-unsupported",
         "The Function raised in its working dtype.",
         "The spec declares that dtype as the one the Function is used with.", "",
         "Support the dtype, or declare the dtype the Function really works in."),
)


class PrecisionCheck(Check):
    name = "precision"
    default = True
    summary = "the working dtype stays finite and close to float64"
    codes = CODES
    traits = frozenset({Trait.CALLS_BACKWARD, Trait.DIFFERENTIATES, Trait.COMPARES_RUNS})
    options = (CheckOption("dtype", str, "working dtype to check (default: the spec's)", DTYPES),)

    def run(self, ctx: CheckContext) -> Outcome:
        import torch

        from gradverify.checks import _calls as calls
        if draws_random(ctx.info):
            return Outcome.skip("forward draws random numbers (dropout, noise): a float32 and a "
                                "float64 run draw different ones, so they cannot be compared")

        if ctx.computes_in is not None:
            return Outcome.skip(f"forward computes in {ctx.computes_in} inside: its float64 "
                                "run is no float64 reference ("
                                + ("the reference check judges it against "
                                   f"{ctx.spec.reference})" if ctx.spec.reference else
                                   "a plain-PyTorch `reference:` would judge it)"))
        working = self._working_args(ctx)
        dtype = _working_dtype(working)
        if dtype is None:
            return Outcome.skip("no floating-point input")
        if dtype in (torch.float64, torch.complex128):
            return Outcome.skip("the working dtype is float64")
        # The float64 run sees exactly the working-dtype values (widened).
        double = _widened(ctx.args("widened"), working)
        diff = double.diff_positions
        reference, grads = self._reference_run(ctx, double)
        label = str(dtype).removeprefix("torch.")
        try:
            ours = calls.forward_backward(ctx.info, working, grads, diff)
        except Exception as exc:  # noqa: BLE001 -- user code
            return self._unsupported(ctx, exc, label)
        names = [double.names[i] for i in diff]
        return self._measure(ctx, ours, reference, names, dtype, label)

    @staticmethod
    def _working_args(ctx: CheckContext) -> Args:
        """The arguments in the working dtype: the spec's, or the `dtype` option's for every
        floating-point tensor."""
        import torch

        working = ctx.args("working")
        override = ctx.options.get("dtype")
        if override:
            target = getattr(torch, override)
            working.values = [v.detach().to(target).requires_grad_(v.requires_grad)
                              if isinstance(v, torch.Tensor) and v.is_floating_point() else v
                              for v in working.values]
        return working

    @staticmethod
    def _reference_run(ctx: CheckContext, double: Args
                       ) -> tuple[tuple[list[Any], list[Any]], list[torch.Tensor | None] | None]:
        """The float64 run, and the incoming gradients both runs use (None when no output is
        differentiable)."""
        from gradverify.checks import _calls as calls

        reference_run = calls.apply(ctx.info, double.clone())  # fresh: one call per copy
        grads = calls.random_grads(reference_run, ctx.generator("precision")) \
            if reference_run.differentiable else None
        reference = calls.forward_backward(ctx.info, double, grads, double.diff_positions)
        return reference, grads

    @staticmethod
    def _unsupported(ctx: CheckContext, exc: Exception, label: str) -> Outcome:
        """The Function raised in its working dtype: GV323, and nothing left to compare."""
        from gradverify.checks import _calls as calls

        outcome = Outcome()
        outcome.add(Finding(
            "GV323", Severity.ERROR, f"the Function raised {calls.describe_exception(exc)} in "
            f"{label}",
            location=calls.user_location(exc, ctx.info) or ctx.forward_location,
            hint=f"support {label} inputs, or declare the dtype the Function works in"))
        return outcome

    @staticmethod
    def _measure(ctx: CheckContext, ours: tuple[list[Any], list[Any]],
                 reference: tuple[list[Any], list[Any]], names: list[str],
                 dtype: torch.dtype, label: str) -> Outcome:
        """Every output and gradient against float64: inf/NaN is an overflow (GV321), a relative
        error past the dtype's limits a loss of precision (GV322)."""
        from gradverify.checks import _compare as cmp

        warn, fail = cmp.precision_limits(dtype)
        outcome = Outcome()
        worst = 0.0
        largest_gradient = _largest(reference[1])
        for mismatch in cmp.measure_runs(ours, reference, names):
            where = ctx.forward_location if mismatch.output is not None else ctx.location
            if mismatch.non_finite or mismatch.data.get("reason") != "error":
                outcome.add(_overflow(mismatch, label, where))
                continue
            if mismatch.output is None:
                _against_run(mismatch, largest_gradient)
            worst = max(worst, mismatch.data["relative_error"])
            loss = _precision_loss(mismatch, label, warn, fail, where)
            if loss is not None:
                outcome.add(loss)
        outcome.data["worst_relative_error"] = worst
        outcome.summary = _summary(outcome.findings, label, warn)
        return outcome


ZERO_IN_FLOAT64 = 64 * 2.0**-52
"""A float64 gradient below this share of the run's largest gradient (a few dozen roundings of
it) is a zero that rounding left over: a gradient that cancels exactly (a bias before batch
norm). Outputs are independent results: each keeps its own scale."""


def _largest(tensors: list[Any]) -> float:
    import torch

    return max((float(torch.linalg.vector_norm(t.detach().to(torch.complex128 if t.is_complex()
                                                               else torch.float64)))
                for t in tensors if isinstance(t, torch.Tensor)
                and (t.is_floating_point() or t.is_complex())), default=0.0)


def _against_run(mismatch: Mismatch, largest: float) -> None:
    """A gradient that float64 gives as zero (rounding) has no scale of its own: its error is
    measured against the run's largest gradient instead of against itself."""
    data = mismatch.data
    if largest <= 0 or data["scale"] >= ZERO_IN_FLOAT64 * largest:
        return
    absolute = data["relative_error"] * (data["scale"] or 1.0)
    mismatch.data = {**data, "relative_error": absolute / largest, "run_scale": largest}


def _working_dtype(working: Args) -> torch.dtype | None:
    """The dtype of the first differentiable floating-point or complex tensor input (else of
    the first one: a frozen constant keeps its own dtype); None when there is none."""
    import torch

    order = sorted(range(len(working.values)), key=lambda i: i not in working.diff_positions)
    floating = [working.values[i] for i in order if isinstance(working.values[i], torch.Tensor)
                and (working.values[i].is_floating_point() or working.values[i].is_complex())]
    return floating[0].dtype if floating else None


def _widened(double: Args, working: Args) -> Args:
    """``double`` with each floating-point or complex tensor replaced by its working-dtype value
    widened back, so that input rounding is never blamed on the formula."""
    import torch

    # Where the dtypes agree the rounding was exact, and a constant the case holds in its own
    # dtype (a quantized weight whose ``to`` would dequantize it) stays as it is.
    double.values = [w.detach().to(d.dtype).requires_grad_(d.requires_grad)
                     if isinstance(d, torch.Tensor) and (d.is_floating_point()
                                                         or d.is_complex())
                     and w.dtype != d.dtype else d
                     for w, d in zip(working.values, double.values, strict=False)]
    return double


def _overflow(mismatch: Mismatch, label: str, where: Location | None) -> Finding:
    """GV321: inf/NaN (or a result missing) in the working dtype where float64 has a value."""
    return Finding(
        "GV321", Severity.ERROR, f"in {label}, {mismatch.describe()}",
        input=mismatch.input, output=mismatch.output, location=where,
        hint="an intermediate overflows or underflows in low precision: use a "
             "stable formula (subtract the max before exp, log1p/expm1, "
             "logsumexp), or compute it in float32/float64 internally",
        data=mismatch.data)


def _precision_loss(mismatch: Mismatch, label: str, warn: float, fail: float,
                    where: Location | None) -> Finding | None:
    """GV322 when the relative error is past ``warn``: a warning, an error past ``fail``."""
    error = mismatch.data["relative_error"]
    if error <= warn:
        return None
    severity = Severity.ERROR if error > fail else Severity.WARNING
    limit = (f"fewer than two digits right (limit {fail:g} for {label})"
             if severity == Severity.ERROR else
             f"{label} should stay within {warn:g}")
    return Finding(
        "GV322", severity, f"in {label}, {mismatch.describe()}: {limit}",
        input=mismatch.input, output=mismatch.output, location=where,
        hint="the formula loses precision (cancellation such as 1 - cos x or "
             "n*x - sum(x), large unscaled sums, a division by a small difference); "
             "rearrange it, or compute that step in float64",
        data={**mismatch.data, "warn_limit": warn, "fail_limit": fail})


def _summary(findings: list[Finding], label: str, warn: float) -> str:
    """One line: within the limit, or which outputs and gradients overflow or lose precision."""
    if not findings:
        return f"{label} outputs and gradients within {warn:g} of float64 (relative norm)"
    overflow = [_subject(f) for f in findings if f.code == "GV321"]
    lossy = [_subject(f) for f in findings if f.code == "GV322"]
    parts = ([f"inf/NaN in {', '.join(dict.fromkeys(overflow))}"] if overflow else []) \
        + ([f"{', '.join(dict.fromkeys(lossy))} off"] if lossy else [])
    return f"{label}: {'; '.join(parts)}"


def _subject(finding: Finding) -> str:
    """What a finding is about: ``gradient for 'x'`` or ``output 0``."""
    return f"gradient for {finding.input!r}" if finding.input else f"output {finding.output}"


CHECK = PrecisionCheck()
