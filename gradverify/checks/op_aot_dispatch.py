"""op_aot_dispatch: the op gives the same outputs and gradients under AOTAutograd (the part of
torch.compile below Dynamo) as in eager mode.

Runs opcheck's ``test_aot_dispatch_dynamic``: forward and backward are traced with dynamic
shapes and compared with eager. Catches a backward that cannot be traced (``bool()``,
``.item()`` or Python ``if`` on a tensor's value), and eager/compiled disagreement.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from gradverify.checks.base import Check, Outcome
from gradverify.codes import Code
from gradverify.kinds import CUSTOM_OP
from gradverify.results import Finding, Severity

if TYPE_CHECKING:
    from gradverify.context import CheckContext

CODES = (
    Code("GV431", "untraceable-op",
         "The op's forward or backward cannot be traced: it reads a tensor's value in Python "
         "(bool(), .item(), `if` on a tensor).",
         "Under torch.compile the value is not known while tracing: compilation fails or "
         "the op falls back to eager, and export fails.",
         "def backward(ctx, grad):\n    if (grad > 0).any():   # a tensor's value in Python\n"
         "        ...",
         "Compute without Python control flow on values: torch.where(cond, a, b)."),
    Code("GV432", "compiled-differs",
         "Outputs or gradients of the op differ between eager mode and AOTAutograd.",
         "The op gives other results under torch.compile than in eager mode.",
         "", "Make the backward (and fake implementation) traceable and consistent."),
    Code("GV433", "aot-dispatch-failed",
         "opcheck's AOT dispatch test failed for another reason.",
         "The op does not work under torch.compile.",
         "", "Read the message; try torch.compile(fullgraph=True) on a call of the op."),
)

_DATA_DEPENDENT = ("data-dependent", "GuardOnDataDependentSymNode", "DataDependentOutputException",
                   "item()", "__bool__")


class OpAotDispatchCheck(Check):
    name = "op_aot_dispatch"
    default = True
    summary = "eager and AOTAutograd agree on outputs and gradients (opcheck " \
              "test_aot_dispatch_dynamic)"
    codes = CODES
    only_for = (CUSTOM_OP,)
    requires = ()

    def run(self, ctx: CheckContext) -> Outcome:
        from gradverify.checks import _opcheck

        exc = _opcheck.run_test(ctx, "test_aot_dispatch_dynamic")
        if exc is None:
            return Outcome(summary="traced with dynamic shapes; outputs and gradients match "
                                   "eager")
        text = _opcheck.messages(exc)
        where = _opcheck.user_frame(exc)
        in_backward = where is not None and ctx.info.backward_location is not None and \
            where.split(":")[0] == ctx.info.backward_location.split(":")[0] and \
            _after(where, ctx.info.backward_location)
        if any(marker in text for marker in _DATA_DEPENDENT):
            part = "backward" if in_backward else "the op"
            return Outcome(summary=f"{part} cannot be traced", findings=[Finding(
                "GV431", Severity.ERROR,
                f"{part} reads a tensor's value in Python (bool(), .item() or `if` on a "
                f"tensor{' at ' + where if where else ''}): torch.compile cannot trace it",
                location=where or ctx.info.backward_location or ctx.info.forward_location,
                hint="compute without Python control flow on tensor values: "
                     "torch.where(cond, a, b) instead of `if cond:`")])
        if "different in eager-mode" in text or "AOTDispatcher" in text:
            return Outcome(summary="compiled results differ from eager", findings=[Finding(
                "GV432", Severity.ERROR,
                f"outputs or gradients differ between eager mode and AOTAutograd: "
                f"{_opcheck.shortened(text)}", location=where or ctx.info.backward_location,
                hint="the backward or fake implementation behaves differently when traced")])
        return Outcome(summary="AOT dispatch failed", findings=[Finding(
            "GV433", Severity.ERROR,
            f"the op fails under AOTAutograd: {_opcheck.shortened(text)}",
            location=where or ctx.info.forward_location,
            hint="try torch.compile(fullgraph=True) on a call of the op to see where")])


def _after(where: str, start: str) -> bool:
    """``file:line`` ``where`` at or after ``start`` (the def line of backward)."""
    try:
        return int(where.rsplit(":", 1)[1]) >= int(start.rsplit(":", 1)[1])
    except (ValueError, IndexError):
        return False


CHECK = OpAotDispatchCheck()
