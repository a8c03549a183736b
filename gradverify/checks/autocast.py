"""autocast (opt-in, a composition: ``--compose``): trained under ``torch.autocast`` (CPU
bfloat16; CUDA float16 on a CUDA run), as mixed-precision training calls it, the Function's
forward and backward run, and its outputs and gradients stay within what the low-precision
dtype allows of the float64 ones.

Inside autocast, the ops of forward compute in the low dtype, so backward gets a low-precision
incoming gradient while tensors saved before a cast stay float32: a backward that combines
them raises (GV371), which ``torch.amp.custom_fwd``/``custom_bwd`` exist to prevent. Outputs
and gradients are measured against float64 on the same float32 inputs, ‖autocast - float64‖ /
‖float64‖: above what the dtype allows (a fifth for bfloat16, a tenth for float16, where
fewer than two digits are right) or non-finite where float64 is finite, it fails (GV372).

Opt-in because few Functions are trained under autocast: ``--compose`` (every composition
check), ``checks: {autocast: true}`` in a spec, or ``--only autocast``.
"""
from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from gradverify.checks.base import Check, Outcome, Trait
from gradverify.codes import Code
from gradverify.results import Finding, Severity
from gradverify.targets.model import Capability

if TYPE_CHECKING:
    from gradverify.case.context import CheckContext

CODES = (
    Code("GV371", "autocast-raised",
         "Under torch.autocast, forward or backward raises (a backward that multiplies the "
         "low-precision incoming gradient with a float32 saved tensor).",
         "Mixed-precision training crashes on this Function.",
         "def backward(ctx, g):\n    x, w = ctx.saved_tensors\n    return g @ w.t(), x.t() @ g",
         "Decorate forward with @torch.amp.custom_fwd(device_type=..., cast_inputs=torch.float32) "
         "and backward with @torch.amp.custom_bwd(device_type=...), or cast in backward."),
    Code("GV372", "autocast-mismatch",
         "Under torch.autocast, an output or gradient is further from float64 than the "
         "low-precision dtype allows, or non-finite where float64 is finite.",
         "Mixed-precision training trains on wrong numbers.", "",
         "Compute the sensitive part in float32 (@torch.amp.custom_fwd(cast_inputs="
         "torch.float32)), or keep what loses precision out of the autocast region."),
)

_LOW = {"cpu": "bfloat16", "cuda": "float16"}
_ALLOWED = {"bfloat16": 2e-1, "float16": 1e-1}
"""The relative error (‖autocast - float64‖ / ‖float64‖) above which fewer than two digits are
right: the failure thresholds of the ``precision`` check."""


class AutocastCheck(Check):
    name = "autocast"
    default = False
    composition = True
    needs = MappingProxyType({Capability.CLASS_SOURCE: ""})
    summary = "under torch.autocast it runs, and its outputs and gradients stay within the dtype"
    codes = CODES
    traits = frozenset({Trait.CALLS_BACKWARD, Trait.COMPARES_RUNS})

    def run(self, ctx: CheckContext) -> Outcome:
        import torch

        from gradverify.checks import _calls as calls
        from gradverify.checks import _compare as cmp

        device = torch.device(ctx.device).type
        low = _LOW.get(device)
        if low is None:
            return Outcome.skip(f"no autocast dtype for device {device}")
        reference_args = ctx.args("double")
        diff = reference_args.diff_positions
        probe = calls.apply(ctx.info, reference_args)
        grads = (calls.random_grads(probe, ctx.generator("autocast")) if probe.differentiable
                 else None)
        reference = calls.outputs_and_gradients(probe, grads, diff)
        try:
            ours = _under_autocast(ctx, device, getattr(torch, low), grads, diff)
        except Exception as exc:  # noqa: BLE001 -- user code under autocast
            return Outcome(summary=f"raises under autocast({low})", findings=[Finding(
                "GV371", Severity.ERROR,
                f"under torch.autocast({device!r}, dtype=torch.{low}) it raises "
                f"{calls.describe_exception(exc)} (on float32 inputs; it runs without autocast)",
                location=calls.user_location(exc, ctx.info) or ctx.location,
                hint=CODES[0].fix)])
        names = [reference_args.names[i] for i in diff]
        outcome = Outcome(summary=f"runs under autocast({low}); within {low}'s precision")
        for mismatch in cmp.measure_runs(ours, reference, names):
            error = mismatch.data.get("relative_error", 0.0)
            if mismatch.non_finite or error > _ALLOWED[low]:
                outcome.add(Finding(
                    "GV372", Severity.ERROR,
                    f"under torch.autocast(dtype=torch.{low}): {mismatch.describe()}",
                    input=mismatch.input, output=mismatch.output, location=ctx.location,
                    data=dict(mismatch.data), hint=CODES[1].fix))
        if outcome.findings:
            outcome.summary = f"under autocast({low}) it is further from float64 than {low} allows"
        return outcome


def _under_autocast(ctx: CheckContext, device: str, low: Any, grads: list[Any] | None,
                    diff: list[int]) -> tuple[list[Any], list[Any]]:
    """Outputs and gradients of float32 inputs, forward under autocast and backward after it,
    as a training step runs them (``loss.backward()`` outside the autocast region)."""
    import torch

    from gradverify.checks import _calls as calls

    args = ctx.args("double")
    values = [v.detach().float().requires_grad_(v.requires_grad)
              if isinstance(v, torch.Tensor) and v.is_floating_point() else v
              for v in args.values]
    single = dataclasses.replace(args, values=values)
    with torch.autocast(device_type=device, dtype=low):
        applied = calls.apply(ctx.info, single)
    outputs, got = calls.outputs_and_gradients(applied, grads, diff)
    return ([o.double() if isinstance(o, torch.Tensor) and o.is_floating_point() else o
             for o in outputs],
            [g.double() if isinstance(g, torch.Tensor) else g for g in got])


CHECK = AutocastCheck()
