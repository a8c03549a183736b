"""What an exception means, for the report: forward raising on a case's inputs (every check of
the case an error, with a hint from running forward again), and an exception that escaped a
check: out of memory, the Function's own error, or a bug of gradverify's (exit 4)."""
from __future__ import annotations

import traceback

from gradverify import frames
from gradverify.case.context import CheckContext
from gradverify.checks.base import Outcome
from gradverify.results import Evidence, Finding, Severity
from gradverify.run import casenotes
from gradverify.targets import Capability, Target, triton_launches


def forward_error(ctx: CheckContext) -> Finding | None:
    """Call forward once on the float64 inputs. A raise (GV008) makes every check of the case
    an error; an output that is not finite (GV023) means the inputs lie outside forward's
    domain: the case's value comparisons are skipped, pointing at it."""
    from gradverify.checks import _calls as calls

    try:
        applied = calls.apply(ctx.info, ctx.args("double"))
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 -- user code, sys.exit() included
        limit = _interpreter_limit(ctx, exc)
        if limit is not None:
            return limit
        shapes = ", ".join(f"{i.name}: {list(i.shape or ())} {i.dtype}" if i.kind == "tensor"
                           else f"{i.name}: {i.kind}" for i in ctx.args("double").info())
        refuses = False
        if ctx.spec.inferred:
            hint = (f"the inputs were inferred (every parameter a float tensor of shape [3, 4]); "
                    f"write a spec: gradverify init {ctx.info.target} -o specs/"
                    + (" --import MODULE (the module that registers the op)"
                       if ctx.info.has(Capability.SCHEMA) else ""))
        elif refuses := calls.runs_in_working_dtype(ctx):
            hint = ("forward runs on the working-dtype inputs but not on their float64 copies: "
                    "a kernel without float64 support; gradient checks need float64, so verify "
                    "it through a plain-PyTorch `reference: mod:fn` in the spec, which compares "
                    "in the working dtype")
        else:
            hint = "check the spec's shapes, dtypes and argument order against forward"
        said = f"forward raised {calls.describe_exception(exc)}"
        return Finding("GV008", Severity.ERROR,
                       f"{said} on the inputs of case "
                       f"{ctx.case.name!r} ({shapes})",
                       location=calls.user_location(exc, ctx.info) or ctx.forward_location,
                       hint=hint, refuses_float64=said if refuses else None)
    for shift in (0.0, ctx.tolerance.eps, -ctx.tolerance.eps):
        outputs = list(applied.outputs) if not shift else _outputs_moved(ctx, shift)
        found = _not_finite(ctx, outputs, shift) if outputs is not None else None
        if outputs is None or found is None:
            continue
        # the domain's edge only where it reproduces: a forward that returns memory it never
        # wrote (NaN by chance of the heap, elsewhere each call) is judged by the checks
        again = _outputs_moved(ctx, shift)
        return found if again is not None and _same(outputs, again) else None
    return None


def backward_refusal(ctx: CheckContext) -> Finding | None:
    """Once forward ran: GV026 when backward, through the engine on random gradients, raises
    on the float64 inputs but runs on the working-dtype ones (a kernel without float64
    support), which every float64 check would report as the Function's failure."""
    from gradverify.checks import _calls as calls

    try:
        applied = calls.differentiable_call(ctx)
        if isinstance(applied, calls.NothingToDifferentiate):
            return None  # no gradient: the checks say so themselves
        calls.engine_grads(applied, calls.random_grads(applied, ctx.generator("float64")),
                           applied.args.diff_positions)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 -- user code, sys.exit() included
        if not calls.runs_in_working_dtype(ctx, backward=True):
            return None  # raises in every dtype: a defect the checks report
        said = f"backward raised {calls.describe_exception(exc)}"
        return Finding("GV026", Severity.ERROR,
                       f"{said} on float64 copies of the inputs of case {ctx.case.name!r} "
                       "but runs on the inputs in their own dtype: a kernel without float64 "
                       "support, whose gradient no float64 check can judge",
                       location=calls.user_location(exc, ctx.info) or ctx.location,
                       hint="name a plain-PyTorch `reference: mod:fn` in the spec (the same "
                            "math as forward): the reference check judges outputs and "
                            "gradients in the working dtype",
                       refuses_float64=said)
    return None


def _interpreter_limit(ctx: CheckContext, exc: BaseException) -> Finding | None:
    """GV025 when forward raised inside Triton's interpreter (``TRITON_INTERPRET=1``), which
    runs a kernel's scalars as Python numbers and lacks parts of the language a GPU compiles:
    a limit of the interpreter until CUDA says otherwise, never the kernel's failure."""
    from gradverify.checks import _calls as calls
    chain: list[BaseException] = []
    while exc is not None and exc not in chain:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    interpreted = any(type(e).__name__ == "InterpreterError"
                      and type(e).__module__.startswith("triton") for e in chain)
    if not (interpreted and triton_launches.interpreted()):
        return None
    return Finding("GV025", Severity.INFO,
                   f"Triton's interpreter (TRITON_INTERPRET=1) cannot run what forward "
                   f"launches: {calls.describe_exception(chain[-1])}; the case is not checked",
                   location=calls.user_location(chain[0], ctx.info) or ctx.forward_location,
                   hint="run it on a machine with CUDA, without TRITON_INTERPRET: the "
                        "interpreter runs a kernel's scalar arguments as Python numbers (a "
                        "float has no .to) and leaves out parts of the language; if CUDA "
                        "raises too, the kernel is wrong")


def _outputs_moved(ctx: CheckContext, shift: float) -> list[object] | None:
    """Forward's outputs on the inputs moved by ``shift`` (every differentiable entry at
    once), where finite differences evaluate it: sqrt or log at 0, acos at 1; None where
    nothing moves or forward raises there (its own checks on moved inputs: not this
    probe's)."""
    import torch

    from gradverify.checks import _calls as calls
    from gradverify.checks._tensors import is_inexact, is_strided

    args = ctx.args("double").clone()
    moved = False
    for i in args.diff_positions:
        value = args.values[i]
        if isinstance(value, torch.Tensor) and is_strided(value) and is_inexact(value) \
                and type(value) is torch.Tensor:
            with torch.no_grad():
                value.add_(shift)
            moved = True
    if shift and not moved:
        return None
    try:
        return list(calls.apply(ctx.info, args).outputs)
    except Exception:  # noqa: BLE001 -- forward's own checks on moved inputs: not this probe's
        return None


def _same(first: list[object], second: list[object]) -> bool:
    """Whether two calls' outputs are not finite at the same places (a random forward's
    values may differ; a domain's edge is where they are NaN or inf in every call)."""
    import torch

    from gradverify.checks._tensors import is_strided

    tensors = [(a, b) for a, b in zip(first, second)
               if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
               and is_strided(a) and is_strided(b)]
    return len(first) == len(second) and all(
        a.shape == b.shape and bool((torch.isfinite(a) == torch.isfinite(b)).all())
        for a, b in tensors)


def _not_finite(ctx: CheckContext, outputs: list[object], shift: float) -> Finding | None:
    """GV023 for the first floating output holding NaN or inf on the case's inputs, moved by
    ``shift``."""
    from gradverify.checks import _tensors as tensors

    for j, out in enumerate(outputs):
        where = tensors.first_not_finite(out)
        if where is None:
            continue
        value, index = where
        at = f"output {j}" + (f"[{', '.join(map(str, index))}]" if index else "")
        inputs = (f"the inputs of case {ctx.case.name!r}" if not shift else
                  f"the inputs of case {ctx.case.name!r} moved by {shift:+g} (where finite "
                  "differences evaluate it)")
        return Finding(
            "GV023", Severity.WARNING,
            f"forward returned {value} at {at} on {inputs}: the inputs lie "
            f"{'on the edge of' if shift else 'outside'} forward's domain (a zero vector "
            "normalised, a sqrt or log at 0, a 0/0 on a self-loop), so no value is compared "
            "on them",
            output=j, location=ctx.forward_location,
            hint="choose inputs forward is defined on, away from its edges (an `init` such as "
                 "`positive` or `uniform` with low: 0.1, a factory that avoids the singular "
                 "point); if they are in its domain, forward is wrong there",
            data={"value": value, "index": list(index), "shift": shift})
    return None


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
                      evidence=Evidence(traceback=text))
    return Outcome(findings=[finding], summary="internal error"), text
