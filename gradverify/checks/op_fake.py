"""op_fake: the op's fake (meta) implementation describes its real outputs.

Runs opcheck's ``test_faketensor``: the op on FakeTensors (no data, as torch.compile and export
trace it) must give outputs of the real ones' shapes, strides, dtypes and devices. Says which
output, what the fake implementation returns and what it should.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from gradverify import torchcompat
from gradverify.checks.base import Check, Consequence, Effect, Outcome, Trait
from gradverify.codes import Code
from gradverify.errors import shown_path
from gradverify.results import Finding, Location, Severity
from gradverify.targets import location_of
from gradverify.targets.model import Capability, Schema

if TYPE_CHECKING:
    from gradverify.case.context import CheckContext

CODES = (
    Code("GV421", "fake-impl-mismatch",
         "The op's fake implementation returns outputs of another shape, stride, dtype or "
         "device than the real implementation.",
         "torch.compile and export plan memory and later ops from the fake outputs: wrong "
         "shapes crash compiled code or, worse, silently compute on the wrong layout.",
         "@op.register_fake\ndef _(x):\n    return x.new_empty(x.shape[0])   # real: x.shape",
         "Return what the real op returns: `torch.empty_like(x)` for an elementwise op."),
    Code("GV422", "no-fake-impl",
         "The op has no fake (meta) implementation.",
         "torch.compile, export and FX tracing cannot run the op: they fail or graph-break.",
         "@torch.library.custom_op(\"mylib::op\", mutates_args=())\ndef op(x): ...",
         "Add one: `@op.register_fake` returning empty tensors of the output's shape."),
    Code("GV423", "fake-impl-failed",
         "Running the op on fake tensors failed for another reason.",
         "The op cannot be traced by torch.compile or export.",
         "", "Read the message; the fake implementation must use only shapes, not data."),
)

_FIELDS = {"Shapes": "shape", "Strides": "strides", "Dtypes": "dtype", "Devices": "device",
           "Storage offsets": "storage offset"}


class OpFakeCheck(Check):
    name = "op_fake"
    default = True
    summary = "the fake (meta) implementation matches the real outputs (opcheck test_faketensor)"
    codes = CODES
    made_for = Capability.SCHEMA
    traits = frozenset({Trait.DIFFERENTIATES_FAKE, Trait.TRACES})
    consequences = (
        Consequence(Effect.SKIPS, frozenset({"GV421", "GV422"}), frozenset({Trait.TRACES})),)
    """Tracing for AOT dispatch runs the fake implementation: its failure would be this one."""

    def run(self, ctx: CheckContext) -> Outcome:
        from gradverify.checks import _calls as calls
        from gradverify.checks import _opcheck

        exc = _opcheck.run_test(ctx, "test_faketensor")
        if exc is None:
            return Outcome(summary="fake outputs match the real ones")
        limit = _opcheck.interpreter_limit(ctx, "test_faketensor")
        if limit is not None:
            return limit
        text = _opcheck.messages(exc)
        location = _fake_location(ctx) or calls.user_location(exc, ctx.info)
        if "no fake impl" in text or "no abstract impl" in text.lower():
            name = ctx.info.need(Schema).short_name
            return Outcome(summary="no fake implementation", findings=[Finding(
                "GV422", Severity.ERROR,
                "the op has no fake implementation: torch.compile, export and FX tracing "
                "cannot run it", location=ctx.forward_location,
                hint=f"add one: @{name}.register_fake (or torch.library.register_fake("
                     f"{ctx.info.need(Schema).name!r})) returning empty tensors shaped like the "
                     "real outputs")])
        for label, what in _FIELDS.items():
            found = re.search(rf"{label} (.+?) and (.+?) are not equal", text)
            if found:
                real, fake = (_short(v) for v in found.groups())
                named = re.search(r"for output\[(\d+)\]", text)
                output = int(named.group(1)) if named else _output_with(ctx, what,
                                                                        found.group(1))
                where = f"output {output}" if output is not None else "an output"
                return Outcome(summary=f"fake {what} differs from the real one", findings=[
                    Finding("GV421", Severity.ERROR,
                            f"the fake implementation gives {where} {what} {fake}, the real "
                            f"op {real}{' (on float64 inputs)' if what == 'dtype' else ''}",
                            output=output, location=location,
                            hint=f"make the fake implementation return {what} {real} for "
                                 f"{where}, as the real op does{_EXAMPLES.get(what, '')}")])
        return Outcome(summary="running the op on fake tensors failed", findings=[Finding(
            "GV423", Severity.ERROR,
            f"running the op on fake tensors failed: {_opcheck.shortened(text)}",
            location=location,
            hint="the fake implementation may use shapes, dtypes and devices only, never data")])


_EXAMPLES = {"dtype": " (follow the inputs' dtype: x.new_empty(shape) or "
                      "torch.empty_like(x))",
             "shape": " (x.new_empty(shape) with the real output's sizes)",
             "strides": " (torch.empty_strided(shape, strides), or a contiguous result)"}


def _short(value: str) -> str:
    value = value.replace("torch.Size(", "").replace("torch.", "")
    return value[:-1] if value.endswith(")") and value.count("(") < value.count(")") else value


def _output_with(ctx: CheckContext, what: str, real: str) -> int | None:
    """The index of the real output whose ``what`` reads ``real`` (the first, if several)."""
    import torch

    from gradverify.checks import _calls as calls

    if what not in ("shape", "dtype"):
        return None
    try:
        with torch.no_grad():
            applied = calls.apply(ctx.info, ctx.args("double"))
    except Exception:  # noqa: BLE001 -- user code: forward's own errors are other checks'
        return None
    for j, out in applied.tensors:
        value: Any = out.shape if what == "shape" else out.dtype
        if str(value) == real.strip():
            return j
    return None


def _fake_location(ctx: CheckContext) -> Location | None:
    """The op's fake implementation: a ``CustomOpDef``'s own function, else the kernel torch's
    registry recorded (read without adding an entry for the name)."""
    opdef = torchcompat.custom_op_def(ctx.info.need(Schema).name)
    fake = getattr(opdef, "_abstract_fn", None)
    if fake is not None:
        return location_of(fake)
    source = torchcompat.fake_kernel_source(ctx.info.need(Schema).name)
    if not source:
        return None
    recorded = Location.parse(source)  # torch records a kernel's source as "file:line" text
    return Location(shown_path(recorded.file), recorded.line)


CHECK = OpFakeCheck()
