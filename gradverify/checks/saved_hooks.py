"""saved_hooks: under ``torch.autograd.graph.saved_tensors_hooks(pack, unpack)`` whose pack
makes a copy, as activation offloading (``save_on_cpu``) and compression call it, the
Function's outputs and gradients are eager's.

Under such hooks, every tensor saved with ``save_for_backward`` reaches backward as another
tensor with the same values: not the object forward saved, so Python attributes set on it
(a scale on a quantised tensor, ``weight.main_grad``) and its storage are gone. The Function
is called on intermediates (``leaf.clone()``) of its inputs with pack copying each tensor;
its outputs and the leaves' gradients are compared with an eager call on the same inputs and
incoming gradients (GV271), and backward must not raise under the hooks where it runs in eager
(GV272). The summary says how many tensors went through the hooks. A tensor kept on a ctx
attribute never does (offloading cannot move it): saved_tensors reports that (GV211, GV212).
"""
from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from gradverify.checks.base import Check, Outcome, Trait
from gradverify.codes import Code, Symptom
from gradverify.results import Finding, Severity
from gradverify.targets.model import Capability

if TYPE_CHECKING:
    from gradverify.case.context import CheckContext

CODES = (
    Code("GV271", "saved-tensor-hooks-mismatch",
         "Under saved_tensors_hooks whose pack copies each saved tensor, an output or gradient "
         "differs from eager.",
         "Activation offloading (torch.autograd.graph.save_on_cpu) and compression hand "
         "backward a copy of what forward saved: a backward that relies on the object or its "
         "storage computes another gradient.",
         "def backward(ctx, g):\n    y, = ctx.saved_tensors\n    "
         "return g * (2 if y.data_ptr() == ctx.ptr else 1)",
         "Compute gradients from the saved tensors' values only.",
         reports=frozenset({Symptom.RUNS_DIFFER})),
    Code("GV272", "saved-tensor-hooks-raised",
         "Under saved_tensors_hooks whose pack copies each saved tensor, forward or backward "
         "raises where eager runs (a backward reading an attribute set on a saved tensor).",
         "Training with activation offloading crashes on this Function.",
         "q.scale = s\nctx.save_for_backward(q)   # backward: q * q.scale",
         "Save what backward needs with save_for_backward (ctx.save_for_backward(q, s)), not "
         "as attributes of a saved tensor: hooks hand backward a copy without them."),
)


class SavedHooksCheck(Check):
    name = "saved_hooks"
    needs = MappingProxyType({Capability.OWN_CTX: ""})
    summary = "under copying saved_tensors_hooks, outputs and gradients equal eager's"
    codes = CODES
    traits = frozenset({Trait.CALLS_BACKWARD, Trait.COMPARES_RUNS})

    def run(self, ctx: CheckContext) -> Outcome:
        from gradverify.checks import _calls as calls

        args = ctx.args("double")
        diff = args.diff_positions
        probe = calls.apply(ctx.info, args)
        if not diff or not probe.differentiable:
            return Outcome.skip("no differentiable input or output: backward reads nothing")
        grads = calls.random_grads(probe, ctx.generator("saved_hooks"))
        eager = (calls.outputs_and_gradients(probe, None, [])[0],
                 calls.leaf_gradients(probe, grads, [args.values[i] for i in diff]))
        counts = {"packed": 0, "unpacked": 0}
        outcome = Outcome(data=counts)
        try:
            got = _hooked(ctx, grads, counts)
        except Exception as exc:  # noqa: BLE001 -- user code, or torch's refusal
            outcome.add(_raised(ctx, exc))
            outcome.summary = "raises under saved_tensors_hooks"
            return outcome
        _against_eager(ctx, got, eager, [args.names[i] for i in diff], outcome)
        if not outcome.findings:
            outcome.summary = (f"{counts['packed']} saved tensor(s) went through copying "
                               "hooks; outputs and gradients equal eager's")
        return outcome


def _hooked(ctx: CheckContext, grads: list[Any], counts: dict[str, int]
            ) -> tuple[list[Any], list[Any]]:
    """Outputs and the leaves' gradients of a call on intermediates of fresh leaves under
    hooks that pack a copy of each saved tensor (counted in ``counts``)."""
    import torch

    from gradverify.checks import _calls as calls

    def pack(t: torch.Tensor) -> torch.Tensor:
        counts["packed"] += 1
        return t.detach().clone()

    def unpack(t: torch.Tensor) -> torch.Tensor:
        counts["unpacked"] += 1
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        leaves, call = calls.apply_to_intermediates(ctx.info, ctx.args("double"))
    gradients = calls.leaf_gradients(call, grads, leaves)
    return calls.outputs_and_gradients(call, None, [])[0], gradients


def _raised(ctx: CheckContext, exc: BaseException) -> Finding:
    from gradverify.checks import _calls as calls

    said = calls.describe_exception(exc)
    where = calls.user_location(exc, ctx.info)
    if where is None:
        import torch

        return Finding(
            "GV272", Severity.INFO,
            f"torch {torch.__version__} cannot run it under saved_tensors_hooks: {said}",
            location=ctx.location, hint="a limit of torch, not of the Function")
    return Finding(
        "GV272", Severity.ERROR,
        f"under saved_tensors_hooks that hand backward a copy of each saved tensor, it raises "
        f"{said}", location=where, hint=CODES[1].fix)


def _against_eager(ctx: CheckContext, got: tuple[list[Any], list[Any]],
                   eager: tuple[list[Any], list[Any]], names: list[str],
                   outcome: Outcome) -> None:
    from gradverify.checks import _compare as cmp

    for finding in cmp.against_eager(got, eager, names, "GV271",
                                     "under copying saved_tensors_hooks", ctx.location,
                                     CODES[0].fix):
        outcome.add(finding)
    if outcome.findings:
        outcome.summary = "saved_tensors_hooks change the result"


CHECK = SavedHooksCheck()
