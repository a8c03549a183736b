"""What an exception means, for the report: forward raising on a case's inputs (every check of
the case an error, with a hint from running forward again), and an exception that escaped a
check: out of memory, the Function's own error, or a bug of gradverify's (exit 4)."""
from __future__ import annotations

import traceback

from gradverify import frames
from gradverify.checks.base import Outcome
from gradverify.context import CheckContext
from gradverify.results import Finding, Severity
from gradverify.run import casenotes
from gradverify.targets import Capability, Target


def forward_error(ctx: CheckContext) -> Finding | None:
    """Call forward once on the float64 inputs; a raise makes every check of the case an error."""
    from gradverify.checks import _calls as calls

    try:
        calls.apply(ctx.info, ctx.args("double"))
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 -- user code, sys.exit() included
        shapes = ", ".join(f"{i.name}: {list(i.shape or ())} {i.dtype}" if i.kind == "tensor"
                           else f"{i.name}: {i.kind}" for i in ctx.args("double").info())
        if ctx.spec.inferred:
            hint = (f"the inputs were inferred (every parameter a float tensor of shape [3, 4]); "
                    f"write a spec: gradverify init {ctx.info.target} -o specs/"
                    + (" --import MODULE (the module that registers the op)"
                       if ctx.info.has(Capability.SCHEMA) else ""))
        elif _runs_in_working_dtype(ctx):
            hint = ("forward runs on the working-dtype inputs but not on their float64 copies: "
                    "a kernel without float64 support; gradient checks need float64, so verify "
                    "it through a plain-PyTorch `reference: mod:fn` in the spec, which compares "
                    "in the working dtype")
        else:
            hint = "check the spec's shapes, dtypes and argument order against forward"
        return Finding("GV008", Severity.ERROR,
                       f"forward raised {calls.describe_exception(exc)} on the inputs of case "
                       f"{ctx.case.name!r} ({shapes})",
                       location=calls.user_location(exc, ctx.info) or ctx.forward_location,
                       hint=hint)
    return None


def _runs_in_working_dtype(ctx: CheckContext) -> bool:
    from gradverify.checks import _calls as calls

    working = ctx.args("working")
    if [i.dtype for i in working.info()] == [i.dtype for i in ctx.args("double").info()]:
        return False
    try:
        calls.apply(ctx.info, working)
    except KeyboardInterrupt:
        raise
    except BaseException:  # noqa: BLE001 -- user code, sys.exit() included
        return False
    return True


def classify(exc: BaseException, check: str, info: Target) -> tuple[Outcome, str | None]:
    """An exception that escaped a check: out of memory (GV016), the Function's (status
    error, exit 1) when it was raised outside gradverify's own code, else a gradverify bug
    (exit 4)."""
    from gradverify.checks import _calls as calls

    if casenotes.out_of_memory(exc):
        return Outcome(findings=[Finding(
            "GV016", Severity.ERROR, f"out of memory during {check}: "
            f"{calls.describe_exception(exc)}",
            hint="use smaller shapes: gradient bugs show on a few elements per dim")],
            summary="out of memory"), None

    if not frames.raised_in_gradverify(exc, info.source_file):
        finding = Finding("GV008", Severity.ERROR,
                          f"the Function raised {calls.describe_exception(exc)} during {check}",
                          location=calls.user_location(exc, info) or info.backward_location,
                          hint="this check calls the Function with other inputs or gradients; "
                               "see the location")
        return Outcome(findings=[finding], summary="the Function raised"), None
    text = "".join(traceback.format_exception(exc))
    finding = Finding("GV011", Severity.ERROR,
                      f"internal error in check {check}: {calls.describe_exception(exc)}",
                      hint="this is a bug in gradverify; please report it with the traceback",
                      data={"traceback": text})
    return Outcome(findings=[finding], summary="internal error"), text
