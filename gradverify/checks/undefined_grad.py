"""undefined_grad: outputs whose gradient is undefined, because the caller does not use them.

Autograd then passes zeros for those outputs' gradients, or None when forward called
``ctx.set_materialize_grads(False)``. backward must neither raise nor change the gradient.
Two situations: every output's gradient undefined (torch's own gradcheck tests this for every
Function), and, for a Function with several outputs, only one of them used.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING

from gradverify import torchcompat
from gradverify.checks.base import Check, Outcome, Trait
from gradverify.codes import Code
from gradverify.results import Finding, Severity
from gradverify.targets.model import Capability

if TYPE_CHECKING:
    from gradverify.case.context import CheckContext


CODES = (
    Code("GV231", "unused-output-crashes-backward",
         "With only one output of a multi-output Function used, backward raised.",
         "Callers often use one output (values but not indices); with "
         "ctx.set_materialize_grads(False) the unused outputs' gradients arrive as None, and "
         "`None * x` raises TypeError.",
         "ctx.set_materialize_grads(False)\n...\nreturn grad_a * 2 + grad_b * 3",
         "Check `if grad_b is not None` before using it, or keep materialized gradients."),
    Code("GV232", "unused-output-wrong-gradient",
         "With only one output used, backward gave a different gradient than with zero "
         "gradients for the other outputs.",
         "An unused output's gradient is zero by definition.",
         "if grad_b is None:\n    return None", "Treat a None gradient as zeros."),
)


class UndefinedGradCheck(Check):
    name = "undefined_grad"
    needs = MappingProxyType({
        Capability.OWN_AUTOGRAD: "it has no backward of its own (check the Functions it calls)"})
    default = True
    summary = "using only some outputs of a multi-output Function works and gives right gradients"
    codes = CODES
    traits = frozenset({Trait.CALLS_BACKWARD, Trait.DIFFERENTIATES, Trait.REUSES_INPUTS})

    def run(self, ctx: CheckContext) -> Outcome:
        import torch

        from gradverify.checks import _calls as calls
        from gradverify.checks import _compare as cmp

        applied = calls.differentiable_call(ctx)
        if isinstance(applied, calls.NothingToDifferentiate):
            return applied.skip()
        args, diff = applied.args, applied.args.diff_positions
        used = applied.differentiable
        if ctx.info.has(Capability.SCHEMA) and len(used) < 2:
            return Outcome.skip("one differentiable output: torch hands the op's backward zeros "
                                "for an undefined gradient, and there is no other output to "
                                "leave undefined")
        outcome = Outcome()
        materialize = self._all_undefined(ctx, used, outcome)
        if len(used) < 2:
            outcome.summary = ("backward handles undefined gradients for every output"
                               if not outcome.findings else "backward mishandles undefined "
                               "gradients")
            return outcome
        grads = calls.random_grads(applied, ctx.generator("undefined_grad"))
        for j in used:
            only = [g if k == j else (torch.zeros_like(g) if isinstance(g, torch.Tensor) else g)
                    for k, g in enumerate(grads)]
            run = calls.apply(ctx.info, ctx.args("double"))
            expected = calls.engine_grads(run, only, diff)
            fresh = calls.apply(ctx.info, ctx.args("double"))
            try:
                got = torch.autograd.grad([fresh.outputs[j]], [fresh.args.values[i] for i in diff],
                                          [grads[j]], allow_unused=True)
            except Exception as exc:  # noqa: BLE001 -- user code
                outcome.add(_raised_alone(ctx, exc, j, used, materialize))
                continue
            for pos, (a, b) in enumerate(zip(got, expected)):
                a = a if a is not None else (torch.zeros_like(b) if b is not None else None)
                b = b if b is not None else (torch.zeros_like(a) if a is not None else None)
                if not cmp.grads_close(a, b):
                    name = args.names[diff[pos]]
                    outcome.add(Finding(
                        "GV232", Severity.ERROR,
                        f"using only output {j}, the gradient for {name!r} is wrong (it differs "
                        "from passing zeros for the other outputs)", input=name, output=j,
                        location=ctx.location,
                        hint="an unused output's gradient must count as zero"))
        outcome.summary = (f"each of {len(used)} outputs used alone"
                           f"{'' if materialize else ' (grads not materialized)'}")
        return outcome


    @staticmethod
    def _all_undefined(ctx: CheckContext, used: list[int], outcome: Outcome) -> bool:
        """Every output's gradient undefined: backward must not raise, and must give zeros.
        Returns whether undefined gradients reach backward materialized (as zeros), as seen
        by backward itself (forward may have called set_materialize_grads(False))."""
        import torch

        from gradverify.checks import _calls as calls
        from gradverify.checks import _probes as probes
        from gradverify.checks import _tensors as tk

        undefined = torchcompat.undefined_grad()
        if undefined is None or ctx.info.has(Capability.SCHEMA):
            return True  # an op's generated Function materializes them (zeros)
        fresh = calls.apply(ctx.info, ctx.args("double"))
        diff = fresh.args.diff_positions
        outs = [undefined(fresh.outputs[j]) for j in used]
        error: Exception | None = None
        with probes.observed_backward(ctx.info) as received:
            try:
                got = torch.autograd.grad(outs, [fresh.args.values[i] for i in diff],
                                          [torch.zeros_like(o) for o in outs], allow_unused=True)
            except Exception as exc:  # noqa: BLE001 -- user code
                error = exc
        # a non-tensor output's gradient is always None: only tensor outputs' say it
        tensors = [isinstance(o, torch.Tensor) for o in fresh.outputs]
        materialize = not any(g is None for grads in received
                              for g, tensor in zip(grads, tensors) if tensor)
        note = (" (forward called set_materialize_grads(False), so they arrive as None)"
                if not materialize else " (they arrive as zeros)")
        if error is not None:
            outcome.add(Finding(
                "GV231", Severity.ERROR,
                f"with every output's gradient undefined{note}, backward raised "
                f"{calls.describe_exception(error)}{_plain(error)}",
                location=calls.user_location(error, ctx.info) or ctx.location,
                hint="return None (or zeros) for every input when every incoming gradient is "
                     "None: `if grad is None: return None`" if not materialize else
                     "backward must accept zero incoming gradients"))
            return materialize
        if materialize:
            return materialize  # zeros in, non-zeros out: gradcheck's linearity probe
            # reports that (a term that does not depend on the incoming gradient)
        for pos, g in zip(diff, got):
            if g is not None and bool(tk.dense(g).ne(0).any()):
                name = fresh.args.names[pos]
                outcome.add(Finding(
                    "GV232", Severity.ERROR,
                    f"with every output's gradient undefined{note}, the gradient for {name!r} "
                    "is not zero", input=name, location=ctx.location,
                    hint="an unused output's gradient counts as zero: the input's gradient must "
                         "then be zero (or None)"))
        return materialize


def _plain(exc: BaseException) -> str:
    text = str(exc)
    if isinstance(exc, TypeError) and "NoneType" in text:
        return ": backward received None for an unused output's gradient and used it as a tensor"
    if isinstance(exc, AttributeError) and "NoneType" in text:
        return ": backward called a method on None, the gradient of an unused output"
    return ""



def _raised_alone(ctx: CheckContext, exc: Exception, j: int, used: list[int],
                  materialize: bool) -> Finding:
    """GV231: backward raised when only output ``j`` was used."""
    from gradverify.checks import _calls as calls

    others = [str(k) for k in used if k != j]
    unused = (f"output {others[0]} unused" if len(others) == 1 else
              f"outputs {', '.join(others)} unused")
    arrives = "its gradient arrives" if len(others) == 1 else "their gradients arrive"
    none_note = ("; forward called set_materialize_grads(False), so "
                 f"{arrives} as None" if not materialize else "")
    return Finding(
        "GV231", Severity.ERROR,
        f"using only output {j} ({unused}{none_note}), backward "
        f"raised {calls.describe_exception(exc)}{_plain(exc)}", output=j,
        location=calls.user_location(exc, ctx.info) or ctx.location,
        hint="check `if grad is not None` before using the gradient of an output "
             "that may be unused, or keep materialized (zero) gradients")


CHECK = UndefinedGradCheck()
