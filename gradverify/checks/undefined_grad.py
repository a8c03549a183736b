"""undefined_grad: a Function with several outputs, of which the caller uses only one.

Autograd then passes zeros for the unused outputs' gradients, or None when forward called
``ctx.set_materialize_grads(False)``. backward must neither raise nor change the gradient.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from gradverify.checks.base import Option, Outcome
from gradverify.report.model import Finding, Severity

if TYPE_CHECKING:
    from gradverify.context import CheckContext


class UndefinedGradCheck:
    name = "undefined_grad"
    default = True
    summary = "using only some outputs of a multi-output Function works and gives right gradients"
    codes = ("GV231", "GV232")
    options: tuple[Option, ...] = ()
    requires = ("contract",)

    def run(self, ctx: CheckContext) -> Outcome:
        import torch

        from gradverify.checks import _autograd as ag

        applied = ag.differentiable_call(ctx)
        if isinstance(applied, str):
            return Outcome.skip(applied)
        args, diff = applied.args, applied.args.diff_positions
        used = applied.differentiable
        if len(used) < 2:
            return Outcome.skip("fewer than two differentiable outputs")
        outcome = Outcome()
        materialize = getattr(applied.ctx, "materialize_grads", True)
        grads = ag.random_grads(applied, ctx.generator("undefined_grad"))
        for j in used:
            only = [g if k == j else (torch.zeros_like(g) if isinstance(g, torch.Tensor) else g)
                    for k, g in enumerate(grads)]
            run = ag.apply(ctx.info, ctx.args("double"))
            expected = ag.engine_grads(run, only, diff)
            fresh = ag.apply(ctx.info, ctx.args("double"))
            try:
                got = torch.autograd.grad([fresh.outputs[j]], [fresh.args.values[i] for i in diff],
                                          [grads[j]], allow_unused=True)
            except Exception as exc:  # noqa: BLE001 -- user code
                unused = ", ".join(str(k) for k in used if k != j)
                none_note = (" (forward called set_materialize_grads(False), so their gradients "
                             "arrive as None)" if not materialize else "")
                plain = _plain(exc)
                outcome.add(Finding(
                    "GV231", Severity.ERROR,
                    f"using only output {j} (outputs {unused} unused{none_note}), backward "
                    f"raised {ag.describe_exception(exc)}{plain}", output=j,
                    location=ag.user_location(exc, ctx.info) or ctx.location,
                    hint="check `if grad is not None` before using the gradient of an output "
                         "that may be unused, or keep materialized (zero) gradients"))
                continue
            for pos, (a, b) in enumerate(zip(got, expected)):
                a = a if a is not None else (torch.zeros_like(b) if b is not None else None)
                b = b if b is not None else (torch.zeros_like(a) if a is not None else None)
                if not ag.grads_close(a, b):
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


def _plain(exc: BaseException) -> str:
    text = str(exc)
    if isinstance(exc, TypeError) and "NoneType" in text:
        return ": backward received None for an unused output's gradient and used it as a tensor"
    if isinstance(exc, AttributeError) and "NoneType" in text:
        return ": backward called a method on None, the gradient of an unused output"
    return ""


CHECK = UndefinedGradCheck()
