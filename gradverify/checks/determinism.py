"""determinism: two backward passes on the same inputs and gradients must agree.

Runs forward + backward twice on fresh copies of the inputs, and backward a second time on the
first graph. Between runs the allocator is filled with garbage, so that reading uninitialised
memory (``torch.empty``) shows. Differences beyond ``tolerance.nondet_tol`` fail.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gradverify.checks.base import Check, Consequence, Effect, Outcome, Trait
from gradverify.codes import Code, Symptom
from gradverify.results import Finding, Severity

if TYPE_CHECKING:
    from gradverify.case.context import CheckContext


CODES = (
    Code("GV241", "nondeterministic-backward",
         "Two backward passes on the same inputs and gradients gave different results.",
         "Unreproducible training; usually uninitialised memory (torch.empty) or random ops, "
         "sometimes atomics (index_add/scatter_add on CUDA).",
         "out = torch.empty_like(grad)\nout[mask] = grad[mask]   # the rest is garbage",
         "Initialise with zeros; for known atomics, set `tolerance: {nondet_tol: ...}`."),
)


class DeterminismCheck(Check):
    name = "determinism"
    default = True
    summary = "repeated forward/backward passes give identical gradients"
    codes = CODES
    traits = frozenset({Trait.CALLS_BACKWARD, Trait.DIFFERENTIATES, Trait.COMPARES_RUNS})
    consequences = (Consequence(Effect.MARKS, frozenset({"GV241"}), symptom=Symptom.RUNS_DIFFER,
                                same_input=True),)
    """A nondeterministic backward also differs between the runs that checkpoint and
    saved_hooks compare: said once, here."""

    def run(self, ctx: CheckContext) -> Outcome:
        from gradverify.checks import _calls as calls
        from gradverify.checks import _compare as cmp

        first = calls.differentiable_call(ctx)
        if isinstance(first, calls.NothingToDifferentiate):
            return first.skip()
        args, diff = first.args, first.args.diff_positions
        grads = calls.random_grads(first, ctx.generator("determinism"))
        runs: list[tuple[str, list[Any]]] = [("first pass", calls.engine_grads(first, grads, diff))]
        _poison(args.values)
        runs.append(("a second backward on the same graph", calls.engine_grads(first, grads, diff)))
        _poison(args.values)
        again = calls.apply(ctx.info, ctx.args("double"))
        runs.append(("a second forward and backward", calls.engine_grads(again, grads, diff)))
        outcome = Outcome()
        tol = ctx.tolerance.nondet_tol
        reference = runs[0][1]
        for label, got in runs[1:]:
            for pos, (a, b) in enumerate(zip(got, reference)):
                if a is None or b is None:
                    if (a is None) != (b is None):
                        self._report(outcome, args.names[diff[pos]], label, float("inf"), (), tol,
                                     ctx)
                    continue
                worst, where = cmp.max_difference(a, b)
                if worst > tol:
                    self._report(outcome, args.names[diff[pos]], label, worst, where, tol, ctx)
        outcome.summary = f"3 backward passes agree (nondet_tol {tol:g})"
        return outcome

    @staticmethod
    def _report(outcome: Outcome, name: str, label: str, worst: float, where: tuple[int, ...],
                tol: float, ctx: CheckContext) -> None:
        from gradverify.checks import _jacobian as jac

        if any(f.input == name for f in outcome.findings):
            return
        outcome.add(Finding(
            "GV241", Severity.ERROR,
            f"backward is nondeterministic: the gradient for {name!r} from {label} differs by "
            f"{worst:.3g} at {jac.format_index(name, where)} (nondet_tol {tol:g})", input=name,
            location=ctx.location,
            hint="look for uninitialised memory (torch.empty, new_empty) or random ops in "
                 "forward/backward; only for known atomics (index_add/scatter_add on CUDA) set "
                 "`tolerance: {nondet_tol: ...}` in the spec",
            data={"max_difference": worst}))


def _poison(values: list[Any]) -> None:
    """Allocate and free buffers full of NaN, so uninitialised reads see garbage."""
    import torch

    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    sizes = {v.numel() * v.element_size() for v in tensors}
    device = tensors[0].device if tensors else torch.device("cpu")  # that device's allocator
    # The sizes backward's own buffers will have (those of its inputs, and multiples): the
    # allocator hands back freed blocks of the same size class.
    for size in sorted(sizes)[-4:]:
        for multiple in (1, 2, 4):
            buffers = [torch.full((max(1, size * multiple // 8),), float("nan"),
                                  dtype=torch.float64, device=device) for _ in range(4)]
            del buffers


CHECK = DeterminismCheck()
