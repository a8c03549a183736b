"""partial_backward: ``torch.autograd.grad(outputs, inputs=[one input], grad_outputs=g)``, as
users ask for one gradient (a penalty on an input's gradient, a probe of one parameter), gives
the same gradient as the full backward does for that input.

The Function is called as a model calls it: each differentiable input an intermediate
(``leaf.clone()``) of a leaf of its own. One backward asks for every input's gradient, then one
per input asks for that input alone, on the same graph and with copies of the same incoming
gradients; each must equal its slice of the full one (GV381), and none may raise where the
full backward does not (GV382). A backward that raises on the full backward too is the
gradient checks' to report; a backward that writes into its incoming gradient is mutation's
(GV223): each pass here gets a fresh copy of it.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from gradverify.checks.base import Check, Outcome, Trait
from gradverify.codes import Code
from gradverify.results import Finding, Severity
from gradverify.targets.model import Capability

if TYPE_CHECKING:
    from gradverify.case.context import CheckContext

CODES = (
    Code("GV381", "partial-backward-mismatch",
         "torch.autograd.grad asked for one input's gradient gives another value than the "
         "full backward gives for that input.",
         "Code that asks for a subset of gradients (a gradient penalty, a probe of one "
         "parameter, inputs= in backward()) gets wrong numbers.",
         "def backward(ctx, g):\n    _STATE['calls'] += 1\n    return g * _STATE['calls']",
         "Make backward a function of its incoming gradients and what forward saved only: "
         "no state kept between calls."),
    Code("GV382", "partial-backward-raised",
         "torch.autograd.grad asked for one input's gradient raises where the full backward "
         "runs.",
         "Code that asks for a subset of gradients crashes.", "",
         "Make backward compute every gradient whichever inputs are asked for (gate on "
         "ctx.needs_input_grad, which is set at forward)."),
)


class PartialBackwardCheck(Check):
    name = "partial_backward"
    needs = MappingProxyType({Capability.OWN_AUTOGRAD: ""})
    summary = "autograd.grad(inputs=[one input]) gives the full backward's slice"
    codes = CODES
    traits = frozenset({Trait.CALLS_BACKWARD, Trait.COMPARES_RUNS})

    def run(self, ctx: CheckContext) -> Outcome:
        from gradverify.checks import _calls as calls

        args = ctx.args("double")
        diff = args.diff_positions
        if len(diff) < 2:
            return Outcome.skip("one differentiable input: its partial backward is the full one")
        leaves, call = calls.apply_to_intermediates(ctx.info, args)
        if not call.differentiable:
            return Outcome.skip("no differentiable output")
        grads = calls.random_grads(call, ctx.generator("partial_backward"))
        try:
            full = calls.leaf_gradients(call, grads, leaves)
        except Exception as exc:  # noqa: BLE001 -- user code; the gradient checks report it
            return Outcome.skip("the full backward on intermediate inputs raises "
                                f"({calls.describe_exception(exc)}): the gradient checks "
                                "report it")
        names = [args.names[i] for i in diff]
        outcome = Outcome()
        for k, (name, leaf) in enumerate(zip(names, leaves)):
            try:
                alone = calls.leaf_gradients(call, grads, [leaf])
            except Exception as exc:  # noqa: BLE001 -- user code
                outcome.add(_raised(ctx, name, exc))
                continue
            _against_full(ctx, name, alone[0], full[k], outcome)
        outcome.summary = (f"each of {len(leaves)} inputs' gradients alone equals the full "
                           "backward's" if not outcome.findings else
                           "a partial backward differs from the full one")
        return outcome


def _raised(ctx: CheckContext, name: str, exc: BaseException) -> Finding:
    from gradverify.checks import _calls as calls

    return Finding(
        "GV382", Severity.ERROR,
        f"torch.autograd.grad(outputs, inputs=[{name!r}]) raises "
        f"{calls.describe_exception(exc)}, where the full backward runs",
        input=name, location=calls.user_location(exc, ctx.info) or ctx.location,
        hint=CODES[1].fix)


def _against_full(ctx: CheckContext, name: str, alone: Any, full: Any, outcome: Outcome) -> None:
    from gradverify.checks import _compare as cmp

    for mismatch in cmp.compare_runs(([], [alone]), ([], [full]), [name], 1e-7, 1e-9):
        outcome.add(Finding(
            "GV381", Severity.ERROR,
            f"torch.autograd.grad(outputs, inputs=[{name!r}]): {mismatch.describe()} (against "
            "the full backward on the same graph and incoming gradients)",
            input=name, location=ctx.location, data=dict(mismatch.data), hint=CODES[0].fix))


CHECK = PartialBackwardCheck()
