"""op_autograd_registration: gradients flow through a custom op by a formula registered where
autograd looks for it.

Runs opcheck's ``test_autograd_registration``: outputs that require grad although the op has no
kernel at an autograd key (an autograd.Function called inside a CPU/CUDA kernel, which torch
.compile and other dispatch layers bypass). Also says when the op has no autograd formula at
all while its inputs require grad: a ``custom_op`` without ``register_autograd`` (backward
raises), or a ``torch.library`` op whose outputs come back without a gradient.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gradverify import torchcompat
from gradverify.checks.base import Check, Consequence, Effect, Outcome, Trait
from gradverify.codes import Code
from gradverify.results import Finding, Severity
from gradverify.targets.model import Capability, Schema

if TYPE_CHECKING:
    from gradverify.case.context import CheckContext

CODES = (
    Code("GV411", "autograd-at-backend-key",
         "The op's outputs require grad, but no autograd kernel is registered for it: the "
         "gradient comes from an autograd.Function called inside a backend (CPU/CUDA) kernel.",
         "Layers below autograd (torch.compile, functionalization, vmap) call the backend "
         "kernel directly, so the gradient silently disappears or goes wrong there.",
         "@torch.library.impl(\"mylib::op\", \"CPU\")\ndef _(x):\n    return MyFunction.apply(x)",
         "Register the formula at the autograd key: torch.library.register_autograd("
         "\"mylib::op\", backward, setup_context=...), with a kernel of plain tensor code."),
    Code("GV412", "no-autograd-formula",
         "Inputs of the op require grad, but it has no autograd formula.",
         "Backward through the op raises (custom_op), or its outputs come back without a "
         "gradient: training stops, or the op's inputs silently get no gradient.",
         "@torch.library.custom_op(\"mylib::op\", mutates_args=())\ndef op(x): ...\n"
         "# no op.register_autograd(...)",
         "Register one: op.register_autograd(backward, setup_context=setup_context)."),
    Code("GV413", "autograd-registration-test-failed",
         "opcheck's autograd registration test failed for another reason than the two above.",
         "The op's autograd may not work under torch.compile or other dispatch layers.", "",
         "Read the message; register the backward with torch.library.register_autograd."),
)

class OpAutogradRegistrationCheck(Check):
    name = "op_autograd_registration"
    default = True
    summary = "the op's autograd formula is registered at the autograd key"
    codes = CODES
    made_for = Capability.SCHEMA
    traits = frozenset()
    consequences = (
        Consequence(Effect.SKIPS, frozenset({"GV411"}),
                    frozenset({Trait.DIFFERENTIATES, Trait.DIFFERENTIATES_FAKE})),
        Consequence(Effect.SKIPS, frozenset({"GV412"}), frozenset({Trait.DIFFERENTIATES})))
    """Every check that differentiates through the op would fail for the same reason (and
    with autograd inside a backend kernel, so does running it on fake tensors)."""

    def run(self, ctx: CheckContext) -> Outcome:
        from gradverify.checks import _calls as calls
        from gradverify.checks import _opcheck

        args = ctx.args("double")
        if not args.diff_positions:
            return Outcome.skip("no input requires grad")
        first = args.names[args.diff_positions[0]]  # findings name an input needing a gradient
        try:
            applied = calls.apply(ctx.info, args)
        except Exception:  # noqa: BLE001 -- user code: the forward's own error is reported once
            return Outcome.skip("calling the op raised")
        floating = [j for j, o in applied.tensors if o.is_floating_point() or o.is_complex()]
        if not floating:
            return Outcome.skip("the op has no floating-point output: nothing to differentiate")
        missing = _no_formula(ctx, first, applied, floating)
        if missing is not None:
            return Outcome(findings=[missing], summary="the op has no autograd formula")
        exc = _opcheck.run_test(ctx, "test_autograd_registration")
        if exc is None:
            return Outcome(summary="autograd formula registered at the autograd key")
        text = _opcheck.messages(exc)
        if "autograd kernel defined at an autograd key" in text:
            return Outcome(summary="autograd registered at a backend key", findings=[Finding(
                "GV411", Severity.ERROR,
                "the op's outputs require grad, but its autograd comes from inside a backend "
                "kernel (an autograd.Function called in the CPU/CUDA implementation), not "
                "from the autograd key: torch.compile and other layers below autograd lose "
                f"the gradient of {first!r}", input=first,
                location=ctx.forward_location or calls.user_location(exc, ctx.info),
                hint="make the kernel plain tensor code and register the Function's backward "
                     "with torch.library.register_autograd("
                     f"{ctx.info.need(Schema).name!r}, backward, "
                     "setup_context=...)")])
        return Outcome(summary="opcheck's autograd registration test failed", findings=[Finding(
            "GV413", Severity.ERROR,
            f"opcheck's autograd registration test failed: {_opcheck.shortened(text)}",
            input=first,
            location=calls.user_location(exc, ctx.info) or ctx.forward_location,
            hint="register the op's backward with torch.library.register_autograd")])


def _no_formula(ctx: CheckContext, first: str, applied: Any,
                floating: list[int]) -> Finding | None:
    """GV412 when the inputs require grad but the op has no formula: a custom_op without
    register_autograd (backward raises), a ``torch.library`` op without an autograd kernel
    (torch's fallback gives its outputs a node that only warns), or outputs that come back
    without a gradient."""

    name = ctx.info.need(Schema).name
    hint = (f"register one: {ctx.info.need(Schema).short_name}.register_autograd(backward, "
            "setup_context=setup_context), or torch.library.register_autograd("
            f"{name!r}, backward, setup_context=...)")
    opdef = torchcompat.custom_op_def(name)
    if opdef is not None and getattr(opdef, "_backward_fn", 0) is None:
        return Finding("GV412", Severity.ERROR,
                       f"{first!r} requires grad, but the op has no autograd formula: "
                       "backward through it raises", input=first,
                       location=ctx.forward_location, hint=hint)
    outputs = dict(applied.tensors)
    nodes = [outputs[j].grad_fn for j in floating if outputs[j].grad_fn is not None]
    if nodes and all("NotImplemented" in node.name() for node in nodes):
        return Finding("GV412", Severity.ERROR,
                       f"{first!r} requires grad, but the op has no autograd kernel: torch's "
                       "fallback gives its outputs a node that warns and gives no gradient",
                       input=first, location=ctx.forward_location, hint=hint)
    if not applied.differentiable:
        return Finding("GV412", Severity.ERROR,
                       f"{first!r} requires grad, but output {floating[0]} comes back "
                       "without a gradient: the op has no autograd formula", input=first,
                       output=floating[0], location=ctx.forward_location, hint=hint)
    return None


CHECK = OpAutogradRegistrationCheck()
