"""checkpoint: under ``torch.utils.checkpoint.checkpoint(f, *inputs, use_reentrant=False)``, as
activation checkpointing calls it, the Function's outputs and gradients are eager's.

Checkpointing runs forward without keeping what it saves, then runs it again during backward
to recompute those tensors: a forward that saves other tensors on the second run (hidden state
that changes between calls) makes torch raise, and one that computes other values makes the
gradients silently wrong. The Function is called inside the checkpointed function on
intermediates (``leaf.clone()``) of its inputs, an input it writes into (``mark_dirty``) on a
copy made inside, as users call it; outputs and the leaves' gradients are compared with an
eager call on the same inputs and incoming gradients (GV391). Raising under checkpoint where
eager runs is GV392: an error when torch's recomputation check refused what forward saved, a
warning when backward reads ``ctx.saved_tensors`` twice (checkpoint refuses a second unpack) or
the user's code raised, and a note when torch itself cannot do it.
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
    Code("GV391", "checkpoint-mismatch",
         "Under torch.utils.checkpoint (non-reentrant), an output or gradient differs from "
         "eager on the same inputs.",
         "Training with activation checkpointing silently trains on other gradients than "
         "eager: the recomputed forward saved other values than the first.",
         "def forward(ctx, x):\n    _CALLS[0] += 1\n    ctx.save_for_backward(x * _CALLS[0])",
         "Make forward a function of its inputs only: no state that changes between calls "
         "(counters, caches filled on the first call, a random generator of its own).",
         reports=frozenset({Symptom.RUNS_DIFFER})),
    Code("GV392", "checkpoint-raised",
         "Under torch.utils.checkpoint (non-reentrant), forward or backward raises where "
         "eager runs.",
         "Training with activation checkpointing crashes on this Function.", "",
         "When torch says the recomputation saved other tensors, make forward save the same "
         "tensors (shapes, dtypes) on every call of the same inputs; read ctx.saved_tensors "
         "once in backward (checkpoint refuses a second unpack)."),
)


_UNPACKED_TWICE = "already unpacked once"
"""Words of torch's CheckpointError when backward reads ``ctx.saved_tensors`` twice: a
pattern of the user's code that checkpoint refuses (not a recomputation that saved other
tensors)."""


class CheckpointCheck(Check):
    name = "checkpoint"
    needs = MappingProxyType({Capability.OWN_AUTOGRAD: ""})
    summary = "under torch.utils.checkpoint, outputs and gradients equal eager's"
    codes = CODES
    traits = frozenset({Trait.CALLS_BACKWARD, Trait.COMPARES_RUNS})

    def run(self, ctx: CheckContext) -> Outcome:
        from gradverify.checks import _calls as calls

        args = ctx.args("double")
        diff = args.diff_positions
        probe = calls.apply(ctx.info, args)
        if not diff or not probe.differentiable:
            return Outcome.skip("no differentiable input or output: nothing to recompute")
        grads = calls.random_grads(probe, ctx.generator("checkpoint"))
        eager = (calls.outputs_and_gradients(probe, None, [])[0],
                 calls.leaf_gradients(probe, grads, [args.values[i] for i in diff]))
        wanted = [j for j, _ in probe.tensors]
        outcome = Outcome()
        try:
            got = _checkpointed(ctx, grads, wanted)
        except Exception as exc:  # noqa: BLE001 -- torch's refusal or user code
            outcome.add(_raised(ctx, exc))
            outcome.summary = "raises under checkpoint"
            return outcome
        _against_eager(ctx, got, ([eager[0][j] for j in wanted], eager[1]),
                       [args.names[i] for i in diff], outcome)
        if not outcome.findings:
            outcome.summary = "outputs and gradients under checkpoint equal eager's"
        return outcome


def _checkpointed(ctx: CheckContext, grads: list[Any], wanted: list[int]
                  ) -> tuple[list[Any], list[Any]]:
    """Outputs (at ``wanted``) and the leaves' gradients of a checkpointed call on
    intermediates of fresh leaves."""
    import torch
    from torch.utils.checkpoint import checkpoint

    from gradverify.checks import _calls as calls

    args = ctx.args("double")
    diff = args.diff_positions
    leaves = [args.values[i] for i in diff]
    # tensor_function calls on copies made inside: an input written in place stays intact
    fn = calls.tensor_function(ctx.info, args, diff, wanted)
    out = checkpoint(fn, *[leaf.clone() for leaf in leaves], use_reentrant=False)
    pairs = [(o, grads[j]) for o, j in zip(out, wanted)
             if isinstance(o, torch.Tensor) and o.requires_grad]
    gradients = torch.autograd.grad([o for o, _ in pairs],
                                    leaves, [g.detach().clone() for _, g in pairs],
                                    allow_unused=True)
    return [o.detach() for o in out], list(gradients)


def _raised(ctx: CheckContext, exc: BaseException) -> Finding:
    import torch.utils.checkpoint

    from gradverify.checks import _calls as calls

    said = calls.describe_exception(exc)
    # (torch's check of the recomputation raises CheckpointError; a torch without it, none)
    refused = isinstance(exc, getattr(torch.utils.checkpoint, "CheckpointError", ()))
    if refused and _UNPACKED_TWICE in str(exc):
        return Finding(
            "GV392", Severity.WARNING,
            f"under checkpoint, backward reads ctx.saved_tensors more than once, which "
            f"checkpoint refuses: {said}", location=ctx.location,
            hint="Unpack the saved tensors once at the top of backward: x, w = "
                 "ctx.saved_tensors (every read of ctx.saved_tensors unpacks them again).")
    if refused:
        return Finding(
            "GV392", Severity.ERROR,
            f"under checkpoint, the recomputed forward saved other tensors than the first "
            f"run: {said}", location=ctx.info.forward_location or ctx.location,
            hint=CODES[1].fix + " " + CODES[0].fix)
    where = calls.user_location(exc, ctx.info)
    if where is None:
        return Finding(
            "GV392", Severity.INFO,
            f"torch {torch.__version__} cannot run it under checkpoint: {said}",
            location=ctx.location,
            hint="a limit of torch, not of the Function: leave it out of checkpointed regions")
    return Finding("GV392", Severity.WARNING, f"under checkpoint, it raises {said}",
                   location=where, hint=CODES[0].fix)


def _against_eager(ctx: CheckContext, got: tuple[list[Any], list[Any]],
                   eager: tuple[list[Any], list[Any]], names: list[str],
                   outcome: Outcome) -> None:
    from gradverify.checks import _compare as cmp

    for finding in cmp.against_eager(got, eager, names, "GV391", "under checkpoint",
                                     ctx.location, CODES[0].fix):
        outcome.add(finding)
    if outcome.findings:
        outcome.summary = "checkpoint's recomputation changes the result"


CHECK = CheckpointCheck()
