"""func: under ``torch.func.vjp`` and ``torch.func.grad`` (per-sample gradients, functional
training steps, ``jacrev``) the Function's gradients are autograd's.

torch.func can use an autograd.Function only in setup_context style (forward without ctx,
plus a ``setup_context`` staticmethod): an old-style Function (``forward(ctx, ...)``) makes
every torch.func transform raise, and so does a backward that recomputes forward with
``requires_grad_()`` and ``torch.autograd.grad`` (torch.func refuses both inside a function
it transforms, ``@once_differentiable`` or not). Either is GV363, with torch's reason (what
torch.func requires of an old-style Function; ``torch.func.vjp``'s message for a recomputing
backward) and the fix, at the severity of the ``unsupported`` option: by default
a warning (the Function is legal everywhere else), an error where the spec asks for func
(``checks: {func: true}``). In setup_context style, the gradients of the outputs weighted by
random incoming gradients, through ``vjp`` and through ``grad``, must equal autograd's on the
same inputs (GV361: a backward that reads grad mode, or other state that torch.func sets
differently). A backward that cannot run under a transform (torch.func wraps tensors: numpy
or ``.data`` in an ``@once_differentiable`` backward) is a note when it declares so, a warning
otherwise (GV362).
"""
from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from gradverify.checks.base import Check, CheckOption, Outcome, Trait
from gradverify.codes import Code
from gradverify.results import Finding, Severity
from gradverify.targets.model import Capability, Formula

if TYPE_CHECKING:
    from gradverify.case.context import CheckContext


CODES = (
    Code("GV361", "func-gradient-mismatch",
         "torch.func.vjp or torch.func.grad gives another gradient than autograd.",
         "Per-sample gradients and functional training steps train on wrong numbers.",
         "def backward(ctx, g):\n    return g * (2 if torch.is_grad_enabled() else 1)",
         "backward must compute the same values whatever the grad mode or the caller."),
    Code("GV362", "func-raised",
         "torch.func.vjp or torch.func.grad raises on a Function that torch.func can use.",
         "torch.func callers crash on it.",
         "def backward(ctx, g):\n    return torch.from_numpy(g.numpy() * 2)",
         "Write backward with torch ops (torch.func wraps tensors), or mark it "
         "@once_differentiable to declare it does not support this."),
    Code("GV363", "func-unsupported",
         "torch.func cannot run this Function: forward takes ctx (an old-style Function), or "
         "backward recomputes forward with requires_grad_() and torch.autograd.grad.",
         "torch.func.grad, vjp, jacrev and vmap raise on it: per-sample gradients, functional "
         "training steps and libraries built on torch.func crash. It is legal everywhere else, "
         "so this is a warning unless the spec asks for func (`checks: {func: true}`) or sets "
         "`checks: {func: {unsupported: error}}`.",
         "@staticmethod\ndef forward(ctx, x):\n    ctx.save_for_backward(x)\n    return x.exp()",
         "Use setup_context style: forward(x) without ctx, and a setup_context(ctx, inputs, "
         "output) staticmethod that saves what backward needs; compute a recomputing "
         "backward's derivative with torch ops instead of torch.autograd.grad."),
)
SEVERITIES = {"note": Severity.INFO, "warning": Severity.WARNING, "error": Severity.ERROR}
"""The ``unsupported`` option's values."""

_TRANSFORMS = ("vjp", "grad")
_RECOMPUTES = "attempting to call Tensor.requires_grad_()"
"""torch.func's refusal of a backward that recomputes forward with autograd (functorch's
message: "You are attempting to call Tensor.requires_grad_() (or perhaps using
torch.autograd.functional.* APIs) inside of a function being transformed...")."""



class FuncCheck(Check):
    name = "func"
    needs = MappingProxyType({Capability.CLASS_SOURCE: ""})
    summary = "torch.func.vjp and torch.func.grad give autograd's gradients"
    codes = CODES
    traits = frozenset({Trait.CALLS_BACKWARD, Trait.COMPARES_RUNS})
    options = (CheckOption("unsupported", str, "how a Function torch.func cannot run is "
                                               "reported (GV363): note, warning or error "
                                               "(default: warning; error where the spec "
                                               "asks for func)", tuple(SEVERITIES)),)

    def run(self, ctx: CheckContext) -> Outcome:
        from gradverify.checks import _calls as calls

        if calls.old_style(ctx.info) and not ctx.first:
            return Outcome.skip("torch.func cannot run an old-style Function (GV363, said on "
                                "the target's first case)")
        args = ctx.args("double")
        diff = args.diff_positions
        probe = calls.apply(ctx.info, args)
        if not diff or not probe.differentiable:
            return Outcome.skip("no differentiable input or output: nothing for torch.func")
        grads = calls.random_grads(probe, ctx.generator("func"))
        eager = calls.outputs_and_gradients(probe, grads, diff)[1]
        names = [args.names[i] for i in diff]
        outcome = Outcome()
        # torch.func differentiates the differentiable outputs only (no integer cotangents)
        weights = [g if j in probe.differentiable else None for j, g in enumerate(grads)]
        for transform in _TRANSFORMS:
            got = _transformed(ctx, transform, weights, outcome)
            if got is None:
                break
            _against_autograd(ctx, transform, got, eager, names, outcome)
        if any(f.code == "GV363" for f in outcome.findings):
            outcome.summary = "torch.func cannot run it"
        elif not outcome.findings:
            outcome.summary = "torch.func.vjp and torch.func.grad match autograd"
        elif not outcome.summary:
            outcome.summary = "matches autograd where torch.func can run it"
        return outcome


def _transformed(ctx: CheckContext, transform: str, grads: list[Any],
                 outcome: Outcome) -> list[Any] | None:
    """The gradients of the differentiable inputs through ``torch.func.<transform>``, or None
    when it raised (said in ``outcome``)."""
    import torch

    run = ctx.args("double")
    diff = run.diff_positions
    inputs = [run.values[i].detach() for i in diff]

    writes = ctx.info.writes_inputs

    def outputs(*tensors: Any) -> tuple[Any, ...]:
        called = list(run.values)
        for position, tensor in zip(diff, tensors):  # written in place: on a copy, as users do
            called[position] = tensor.clone() if writes else tensor
        out = ctx.info.function.apply(*called)
        return tuple(o for o, g in zip(out if isinstance(out, tuple) else (out,), grads)
                     if isinstance(g, torch.Tensor))

    cotangents = tuple(g for g in grads if isinstance(g, torch.Tensor))
    try:
        if transform == "vjp":
            pullback = torch.func.vjp(outputs, *inputs)[1]
            return list(pullback(cotangents))
        # real(o * conj(c)): autograd's vector-Jacobian product for complex outputs too
        loss = lambda *t: sum(torch.real(o * c.conj()).sum()  # noqa: E731
                              for o, c in zip(outputs(*t), cotangents))
        return list(torch.func.grad(loss, argnums=tuple(range(len(inputs))))(*inputs))
    except Exception as exc:  # noqa: BLE001 -- torch's refusal or user code
        outcome.add(_raised(ctx, transform, exc))
        return None


def _raised(ctx: CheckContext, transform: str, exc: BaseException) -> Finding:
    """Why ``torch.func.<transform>`` raised, for a Function torch.func can use: a backward
    that declares it supports no transform (a note), or a failure (GV362)."""
    from gradverify.checks import _calls as calls

    formula = ctx.info.need(Formula)
    said = calls.describe_exception(exc)
    if calls.old_style(ctx.info) and "setup_context" in str(exc):
        return Finding("GV363", _unsupported(ctx),
                       f"torch.func cannot run it: forward takes ctx (an old-style Function); "
                       f"torch.func.{transform} requires a setup_context staticmethod",
                       location=ctx.forward_location,
                       hint="use setup_context style: forward(x) without ctx, plus a "
                            "setup_context(ctx, inputs, output) staticmethod that saves what "
                            "backward needs (ctx.save_for_backward(x)); backward is "
                            "unchanged; see "
                            "https://pytorch.org/docs/stable/notes/extending.func.html")
    if _RECOMPUTES in str(exc):  # not a tensor torch.func wraps: what @once_differentiable says
        return Finding("GV363", _unsupported(ctx),
                       f"torch.func cannot run it: backward recomputes forward with "
                       f"requires_grad_() and torch.autograd.grad; torch.func.{transform} "
                       f"raises {said}",
                       location=calls.user_location(exc, ctx.info) or ctx.location,
                       hint="torch.func refuses requires_grad_() and torch.autograd.grad inside "
                            "a function it transforms, @once_differentiable or not: compute "
                            "backward's derivative with torch ops (its closed form, or "
                            "torch.func.vjp of the forward computation) instead of recomputing "
                            "forward under torch.enable_grad()")
    if formula.once_differentiable:
        return Finding(
            "GV362", Severity.INFO,
            f"torch.func.{transform} cannot run its @once_differentiable backward: {said}",
            location=ctx.location,
            hint="torch.func wraps tensors, which numpy and .data cannot read; it is declared")
    return Finding("GV362", Severity.WARNING, f"torch.func.{transform} raises {said}",
                   location=calls.user_location(exc, ctx.info) or ctx.location,
                   hint=CODES[1].fix)


def _unsupported(ctx: CheckContext) -> Severity:
    """GV363's severity: the ``unsupported`` option's, else an error where the spec (or the
    case) asks for func, else a warning."""
    given = ctx.options.get("unsupported")
    if given in SEVERITIES:
        return SEVERITIES[given]
    asked = any(setting.enabled for level in (ctx.spec.checks, ctx.case.checks)
                for name, setting in level.items() if name == "func")
    return Severity.ERROR if asked else Severity.WARNING


def _against_autograd(ctx: CheckContext, transform: str, got: list[Any], eager: list[Any],
                      names: list[str], outcome: Outcome) -> None:
    from gradverify.checks import _compare as cmp

    for mismatch in cmp.compare_runs(([], got), ([], eager), names, 1e-7, 1e-9):
        outcome.add(Finding(
            "GV361", Severity.ERROR,
            f"torch.func.{transform}: {mismatch.describe()} (against autograd on the same "
            "inputs and incoming gradients)", input=mismatch.input, location=ctx.location,
            data=dict(mismatch.data), hint=CODES[0].fix))
    if any(f.code == "GV361" for f in outcome.findings):
        outcome.summary = f"torch.func.{transform} differs from autograd"


CHECK = FuncCheck()
