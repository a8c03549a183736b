"""device: with ``--device cuda``, outputs and gradients on CUDA against the same case on CPU.

Both runs use the float64 copies of the same inputs, so differences beyond round-off are the
kernel's. Skipped when CUDA is unavailable (``--device cuda`` itself is refused then).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from gradverify.case.inputs import InputMaker
from gradverify.checks.base import Check, Outcome, Trait
from gradverify.codes import Code
from gradverify.results import Finding, Severity

if TYPE_CHECKING:
    from gradverify.case.context import CheckContext


CODES = (
    Code("GV341", "device-mismatch",
         "Outputs or gradients on CUDA differ from the CPU run on the same inputs.",
         "The device kernel is wrong while the CPU path is right (or the reverse).", "",
         "Look for indexing, stride and race bugs in the device kernel."),
    Code("GV342", "device-raised",
         "The Function raised on CUDA but not on the CPU.",
         "Tensors created on the wrong device, or a kernel missing for CUDA.",
         "torch.zeros(n)   # on the CPU, inside a CUDA backward",
         "Create tensors with the input's device (x.new_zeros, torch.zeros_like)."),
)


class DeviceCheck(Check):
    name = "device"
    default = True
    summary = "outputs and gradients on CUDA match CPU"
    codes = CODES
    traits = frozenset({Trait.CALLS_BACKWARD, Trait.DIFFERENTIATES, Trait.COMPARES_RUNS})
    needs_accelerator = True
    """Selected only when the run's device is not the CPU."""

    def run(self, ctx: CheckContext) -> Outcome:
        import torch

        from gradverify.checks import _calls as calls
        from gradverify.checks import _compare as cmp

        if ctx.device == "cpu":
            return Outcome.skip("the run is on the CPU (use --device cuda)")
        if ctx.device.startswith("cuda") and not torch.cuda.is_available():
            return Outcome.skip("CUDA is unavailable")
        accelerated = ctx.args("double")
        cpu_maker = InputMaker(ctx.case, ctx.maker.bound, ctx.info, ctx.maker.seed, "cpu")
        on_cpu = cpu_maker.args("double")
        diff = on_cpu.diff_positions
        try:
            probe = calls.apply(ctx.info, on_cpu)
            grads = (calls.random_grads(probe, ctx.generator("device")) if probe.differentiable
                     else None)
            reference = calls.outputs_and_gradients(probe, grads, diff)
        except Exception as exc:  # noqa: BLE001 -- user code: a kernel made for the device only
            return Outcome.skip(f"the Function raised on the CPU "
                                f"({calls.describe_exception(exc)}): no CPU run to compare "
                                f"{ctx.device} against")
        outcome = Outcome(summary=f"{ctx.device} matches cpu")
        try:
            ours = calls.forward_backward(
                ctx.info, accelerated,
                [g.to(ctx.device) if isinstance(g, torch.Tensor) else g for g in grads or []]
                if grads is not None else None, diff)
        except Exception as exc:  # noqa: BLE001 -- user code
            outcome.add(Finding("GV342", Severity.ERROR,
                                f"on {ctx.device} the Function raised "
                                f"{calls.describe_exception(exc)}",
                                location=calls.user_location(exc, ctx.info) or ctx.location,
                                hint="the same inputs work on the CPU"))
            return outcome
        rtol, atol = cmp.tolerance_for(torch.float64)
        names = [on_cpu.names[i] for i in diff]
        for mismatch in cmp.compare_runs(ours, reference, names, max(rtol, 1e-6), max(atol, 1e-8)):
            outcome.add(Finding(
                "GV341", Severity.ERROR, f"on {ctx.device}, {mismatch.describe()} (against cpu)",
                input=mismatch.input, output=mismatch.output,
                location=ctx.forward_location if mismatch.output is not None
                else ctx.location,
                hint="the device kernel computes something else than the CPU path (indexing, "
                     "strides, uninitialised memory, a race)", data=mismatch.data))
        return outcome


CHECK = DeviceCheck()
