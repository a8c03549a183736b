"""op_aot_dispatch: the op gives the same outputs and gradients under AOTAutograd (the part of
torch.compile below Dynamo) as in eager mode.

Runs opcheck's ``test_aot_dispatch_dynamic``: forward and backward are traced with dynamic
shapes and compared with eager. Catches a backward that cannot be traced (``bool()``,
``.item()`` or Python ``if`` on a tensor's value), and eager/compiled disagreement.

The test runs with AOTAutograd's common-subexpression pass off: that pass only merges
duplicate nodes of the traced graph (it changes no result the test compares), and running it
imports torch._inductor (~0.8 s, more than the rest of the test on a whole spec).
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

from gradverify import torchcompat
from gradverify.checks.base import Check, Outcome, Trait
from gradverify.codes import Code
from gradverify.results import Finding, Location, Severity
from gradverify.targets.model import Capability, Schema

if TYPE_CHECKING:
    from gradverify.case.context import CheckContext

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
         "The op gives other results under torch.compile than in eager mode: a compiled "
         "backward replays what it saw while tracing, and a compiled forward calls the "
         "kernel again.",
         "_calls = [0]\n\ndef setup_context(ctx, inputs, output):\n    _calls[0] += 1\n"
         "    ctx.scale = 2.0 * _calls[0]   # Python state: frozen when traced",
         "Compute outputs and gradients from the op's inputs, saved tensors and arguments "
         "only; declare every input the kernel writes in mutates_args."),
    Code("GV433", "aot-dispatch-failed",
         "The op cannot run under AOTAutograd for another reason, e.g. its backward calls a "
         "kernel that needs real data (a C++/CUDA extension, data_ptr()).",
         "The op does not work under torch.compile.",
         "def backward(ctx, grad):\n    return my_extension.backward(grad, *ctx.saved_tensors)",
         "Make such a kernel a custom op of its own (with register_fake), so the compiler "
         "calls it instead of tracing into it; else run torch.compile(fullgraph=True) on a "
         "call of the op to see where it fails."),
)

_DATA_DEPENDENT = ("data-dependent", "GuardOnDataDependentSymNode", "DataDependentOutputException",
                   "item()", "__bool__", ".numpy()", "tolist")


class OpAotDispatchCheck(Check):
    name = "op_aot_dispatch"
    default = True
    summary = "eager and AOTAutograd agree on outputs and gradients (opcheck " \
              "test_aot_dispatch_dynamic)"
    codes = CODES
    made_for = Capability.SCHEMA
    traits = frozenset({Trait.DIFFERENTIATES, Trait.TRACES})

    def run(self, ctx: CheckContext) -> Outcome:
        from gradverify.checks import _calls as calls
        from gradverify.checks import _opcheck

        with torchcompat.aot_without_cse():
            exc = _opcheck.run_test(ctx, "test_aot_dispatch_dynamic")
        if exc is None:
            return Outcome(summary="traced with dynamic shapes; outputs and gradients match "
                                   "eager")
        limit = _opcheck.interpreter_limit(ctx, "test_aot_dispatch_dynamic")
        if limit is not None:
            return limit
        text = _opcheck.messages(exc)
        where = calls.user_location(exc, ctx.info)
        in_backward = where is not None and _after(where, ctx.backward_location)
        part = "backward" if in_backward else "the op"
        at = f" at {where}" if where else ""
        if any(marker in text for marker in _DATA_DEPENDENT):
            return Outcome(summary=f"{part} cannot be traced", findings=[Finding(
                "GV431", Severity.ERROR,
                f"{part} reads a tensor's value in Python (bool(), .item(), .tolist(), "
                f".numpy() or `if` on a tensor{at}): torch.compile cannot trace it",
                location=where or ctx.backward_location or ctx.forward_location,
                hint="compute without Python control flow on tensor values: "
                     "torch.where(cond, a, b) instead of `if cond:`, torch ops instead of "
                     "numpy")])
        if "different in eager-mode" in text:
            return _differs(ctx, text, where)
        if "data pointer" in text:
            return Outcome(summary=f"{part} cannot be traced", findings=[Finding(
                "GV433", Severity.ERROR,
                f"{part} calls a kernel that needs real data{at} (a C++/CUDA extension, "
                "data_ptr()): while torch.compile traces, tensors have no data",
                location=where or ctx.backward_location or ctx.forward_location,
                hint="make that kernel a custom op of its own (torch.library.custom_op with "
                     "register_fake), so the compiler calls it instead of tracing into it")])
        return Outcome(summary="AOT dispatch failed", findings=[Finding(
            "GV433", Severity.ERROR,
            f"{part} fails under AOTAutograd (torch.compile){at}: {_opcheck.shortened(text)}",
            location=where or ctx.forward_location,
            hint="try torch.compile(fullgraph=True) on a call of the op to see where")])


def _differs(ctx: CheckContext, text: str, where: Location | None) -> Outcome:
    """GV432 from opcheck's comparison: which output or gradient, by how much."""
    grads = "Gradients of the operator" in text
    item = re.search(r"failure occurred for item \[(\d+)\]", text)
    index = int(item.group(1)) if item else None
    names = _grad_names(ctx) if grads else []
    if index is None and len(names if grads else ctx.info.need(Schema).op._schema.returns) == 1:
        index = 0  # one tensor compared: opcheck names no item
    if grads:
        name = label = names[index] if index is not None and index < len(names) else None
        what = f"the gradient for {name!r}" if name else "a gradient"
    else:
        name, label = None, (f"output {index}" if index is not None else None)
        what = label or "an output"
    size = re.search(r"Greatest absolute difference: (\S+) at index (\([^)]*\)|\d+)", text)
    count = re.search(r"Mismatched elements: (\d+) / (\d+)", text)
    by = ""
    if size:
        element = size.group(2).strip("()").rstrip(",")
        by = f" by {_number(size.group(1))} at " + (f"{label}[{element}]" if label else
                                           f"index {element}")
    of = f" ({count.group(1)} of {count.group(2)} elements)" if count else ""
    if grads:
        hint = ("a compiled backward replays what it saw while tracing: it reads something "
                "frozen then (Python state such as a global or a counter, a value set on ctx "
                "from outside the inputs, a tensor made outside torch). Compute the gradient "
                "from the inputs, saved tensors and arguments only")
        location = where or ctx.backward_location
    else:
        hint = ("the compiled op calls the kernel again and gets another result: the kernel "
                "depends on Python state or random numbers without a generator, or writes "
                "into an input its schema does not declare. Make it a function of its inputs")
        location = ctx.forward_location or where
    return Outcome(summary=f"{what} differs under AOTAutograd", findings=[Finding(
        "GV432", Severity.ERROR,
        f"{what} differs between eager mode and AOTAutograd (torch.compile){by}{of}",
        input=name, output=None if grads else index, location=location, hint=hint)])


def _number(text: str) -> str:
    try:
        return f"{float(text):.3g}"
    except ValueError:
        return text


def _grad_names(ctx: CheckContext) -> list[str]:
    """Names of the tensors opcheck differentiates, in its order (tensor arguments that
    require grad, positional then keyword, list elements as name[i])."""
    import torch

    args = ctx.args("double")
    names: list[str] = []
    for name, value in zip(args.names, args.values):
        if isinstance(value, torch.Tensor):
            names += [name] if value.requires_grad else []
        elif isinstance(value, (list, tuple)):
            names += [f"{name}[{i}]" for i, v in enumerate(value)
                      if isinstance(v, torch.Tensor) and v.requires_grad]
    return names


def _after(where: Location, start: Location | None) -> bool:
    """``where`` in the file of ``start`` (the def line of backward), at or after it."""
    return start is not None and where.file == start.file and where.line is not None \
        and start.line is not None and where.line >= start.line


CHECK = OpAotDispatchCheck()
