"""placement: forward and backward as if the inputs lived on a GPU, on a machine without one.

Each input claims another device than the CPU while holding real data (``_elsewhere``), so a
tensor made without ``device=`` that meets the inputs in an op, or an output or gradient that
comes back on the CPU, shows on a CPU-only machine, where CPU tests never see it. What cannot be
judged without running on a device (a ``.numpy()`` of an input, a kernel that reads memory
directly) is a note. docs/checks.md, "placement: as if on a GPU".
"""
from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from gradverify.case.inputs import Args
from gradverify.checks import _devices
from gradverify.checks.base import Check, Outcome, Trait
from gradverify.codes import Code
from gradverify.results import Finding, Severity
from gradverify.targets.model import Capability

if TYPE_CHECKING:
    from gradverify.case.context import CheckContext
    from gradverify.checks import _elsewhere


CODES = (
    Code("GV441", "made-on-cpu",
         "A tensor made on the CPU (a factory call without device=) meets the inputs in an op, "
         "as if the inputs lived on a GPU.",
         "On a GPU, forward or backward raises 'Expected all tensors to be on the same device'; "
         "tests on a CPU-only machine never see it. Backward runs on another thread, so even "
         "`with torch.device(...)` around the call does not move it.",
         "buf = torch.zeros(n, dtype=grad.dtype)   # on the CPU, whatever grad's device\n"
         "buf.index_add_(0, index, grad)",
         _devices.HINT),
    Code("GV442", "result-on-cpu",
         "An output or a gradient comes back on the CPU for inputs on another device.",
         "Autograd raises for a gradient on another device than its input; an output on the "
         "CPU moves the user's data off the GPU at every call.",
         "g = grad.cpu().numpy() * 2\nreturn torch.from_numpy(g)",
         "Return it on its input's device: compute it there, or `.to(x.device)` at the end."),
    Code("GV443", "placement-not-judged",
         "The Function could not run as if its inputs lived on another device: it converts an "
         "input to numpy, or needs what only device memory has, such as a data pointer "
         "(a note).",
         "Nothing about placement is known: such code runs on the CPU only, or needs a GPU "
         "run (`--device cuda`) to be judged.", "",
         "If the Function is meant for GPU tensors too, run `gradverify check --device cuda` "
         "on a machine with one."),
)


class PlacementCheck(Check):
    name = "placement"
    needs = MappingProxyType({Capability.OWN_AUTOGRAD: ""})
    default = True
    summary = "forward and backward as if on a GPU: nothing made on, or returned to, the CPU"
    codes = CODES
    traits = frozenset({Trait.CALLS_BACKWARD})

    def run(self, ctx: CheckContext) -> Outcome:
        from gradverify.checks import _elsewhere as elsewhere

        if ctx.device.partition(":")[0] != "cpu":
            return Outcome.skip(f"the run is on {ctx.device}: the device check runs it there")
        if Capability.TRITON in ctx.info.capabilities:
            return Outcome.skip("Triton kernels read device memory directly: run with "
                                "--device cuda to judge their placement")
        args = ctx.args("double")
        odd = next(filter(None, map(elsewhere.unplaceable, args.names, args.values)), None)
        if odd:
            return Outcome.skip(odd)
        mode = elsewhere.OnAnotherDevice(ctx.info.source_file)
        outcome = Outcome(summary="nothing made on, or returned to, the CPU")
        try:
            with mode, elsewhere.FromData():
                self._run_as_elsewhere(ctx, args, mode, outcome)
        except elsewhere.Misplaced as exc:
            return self._misplaced(ctx, exc, outcome)
        except Exception as exc:  # noqa: BLE001 -- user code
            return self._not_judged(ctx, args, exc, outcome)
        return outcome

    @staticmethod
    def _run_as_elsewhere(ctx: CheckContext, args: Args, mode: _elsewhere.OnAnotherDevice,
                          outcome: Outcome) -> None:
        """Forward and backward on the inputs placed elsewhere; what comes back on the CPU is
        GV442."""
        from gradverify.checks import _calls as calls
        from gradverify.checks import _elsewhere as elsewhere

        placed = Args(list(args.names), [elsewhere.placed_all(v) for v in args.values],
                      list(args.differentiable))
        applied = calls.apply(ctx.info, placed)
        for j, out in applied.tensors:
            if elsewhere.on_cpu(out):
                outcome.add(_on_cpu(ctx, mode, out, f"output {j}", None))
        if outcome.findings or not applied.differentiable or not placed.diff_positions:
            return  # after an output on the CPU, backward's gradients would be on it too
        grads = calls.random_grads(applied, ctx.generator("placement"))
        if calls.no_own_backward(ctx.info, applied):
            calls.engine_grads(applied, grads, placed.diff_positions)
            return
        raw = calls.raw_backward(ctx.info, applied, grads)
        for pos, grad in enumerate(raw[:len(args.values)]):
            if elsewhere.on_cpu(grad) and elsewhere.on_device(placed.values[pos]):
                name = args.names[pos]
                outcome.add(_on_cpu(ctx, mode, grad, f"the gradient for {name!r}", name))

    @staticmethod
    def _misplaced(ctx: CheckContext, exc: _elsewhere.Misplaced, outcome: Outcome) -> Outcome:
        from gradverify.checks import _calls as calls

        made = exc.made.location() if exc.made is not None else None
        met = calls.user_location(exc, ctx.info)
        where = f"; the op is at {met}" if met is not None and met != made else ""
        # a tensor kept from an earlier call (a cache, a global) was made before this run could
        # see how: without device=, or for the CPU by gradverify's own CPU runs of the case
        kept = exc.made is None or exc.made.from_before
        said = ("; this shows on a GPU whenever one process calls it on another device first "
                "(the CPU, another GPU), and on every call if it was made without device="
                ) if kept else ""
        outcome.add(Finding(
            "GV441", Severity.WARNING if kept else Severity.ERROR,
            f"as if on a GPU: {exc}{where}{said}",
            location=made or met or ctx.location,
            hint=f"{_devices.HINT}; keep a tensor kept across calls per device (a cache keyed "
                 "by device, or `.to(x.device)` where it is used)" if kept else _devices.HINT,
            data={"op": exc.op, "shape": list(exc.shape), "met_at": str(met) if met else None}))
        outcome.summary = ("a tensor kept on the CPU meets the device's" if kept
                           else "a tensor made on the CPU meets the device's")
        return outcome

    @staticmethod
    def _not_judged(ctx: CheckContext, args: Args, exc: Exception, outcome: Outcome) -> Outcome:
        """An exception other than a misplaced tensor: the CPU's own failure (for the other
        checks to report), or what this check cannot judge (GV443, a note)."""
        from gradverify.checks import _calls as calls
        from gradverify.checks import _elsewhere as elsewhere

        if _devices.two_devices(exc) and elsewhere.CLAIMED in str(exc):
            outcome.add(Finding(
                "GV441", Severity.ERROR,
                f"as if on a GPU: {calls.describe_exception(exc)}: a CPU tensor meets the "
                "inputs' device inside this op (the inputs claim the meta device here)",
                location=calls.user_location(exc, ctx.info) or ctx.location,
                hint=_devices.HINT))
            outcome.summary = "a tensor made on the CPU meets the device's"
            return outcome
        if not isinstance(exc, elsewhere.ToNumpy):
            try:
                applied = calls.apply(ctx.info, args.clone())
                if applied.differentiable:
                    calls.engine_grads(applied, calls.random_grads(
                        applied, ctx.generator("placement")), applied.args.diff_positions)
            except Exception as on_cpu:  # noqa: BLE001 -- user code
                return Outcome.skip(f"the Function raises on the CPU too "
                                    f"({calls.describe_exception(on_cpu)})")
        said = (f"not judged: {calls.describe_exception(exc)} when its inputs claim another "
                "device; run `--device cuda` on a GPU machine to judge placement")
        outcome.add(Finding("GV443", Severity.INFO, said,
                            location=calls.user_location(exc, ctx.info) or ctx.location,
                            hint="a Function meant for GPU tensors must not need .numpy() or "
                                 "data pointers of its inputs"))
        outcome.summary = "placement not judged"
        return outcome


def _on_cpu(ctx: CheckContext, mode: _elsewhere.OnAnotherDevice, value: Any, what: str,
            name: str | None) -> Finding:
    made = mode.origin(value)
    origin = f", {made.describe()}" if made is not None else ""
    return Finding(
        "GV442", Severity.ERROR,
        f"as if on a GPU: {what} comes back on the CPU{origin}; on a GPU autograd raises "
        f"\"expected device cuda:0 but got cpu\" for a gradient, and an output leaves the GPU",
        input=name, location=(made.location() if made is not None else None) or ctx.location,
        hint="return it on its input's device: compute it there, or `.to(x.device)`")


CHECK = PlacementCheck()
