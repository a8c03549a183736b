"""compile (opt-in): under ``torch.compile(backend="aot_eager")``, as users compile a model,
outputs and gradients match eager.

A graph break is information, not a wrong gradient: Dynamo runs the Function in eager around it
(a Function that declares a ``jvp`` is one torch cannot trace). It is found with
``fullgraph=True`` and said as a note with Dynamo's reason; the run that is compared is the one
users get, ``fullgraph=False``.

A Function that writes into its input (``ctx.mark_dirty``) is called as users call it, on a
non-leaf: one made inside the compiled region and one handed in from outside it. When only
compiled code gets it wrong (torch 2.13 returns a silently wrong gradient for the second way),
the finding says which way breaks and that torch.compile is at fault, not the formula.

Opt-in because compiling takes seconds per Function: turn it on with ``checks: {compile: true}``
in a spec, ``--only compile``, or ``checks = { compile = true }`` in pyproject.toml.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gradverify import torchcompat
from gradverify.checks.base import Check, Outcome, Trait
from gradverify.codes import Code
from gradverify.results import Finding, Severity, Status
from gradverify.targets.model import Formula

if TYPE_CHECKING:
    from gradverify.case.context import CheckContext


CODES = (
    Code("GV351", "compile-graph-break",
         "Dynamo cannot trace the Function in one graph: torch.compile runs it in eager "
         "around a graph break (a note).",
         "fullgraph=True refuses it; with the default fullgraph=False it runs, slower, and its "
         "gradients are the ones compared.",
         "def forward(ctx, x):\n    return torch.from_numpy(np.exp(x.numpy()))",
         "To compile it into the graph, remove the construct Dynamo's reason names."),
    Code("GV352", "compile-mismatch",
         "Compiled outputs or gradients differ from eager.",
         "The compiled model trains on different numbers than the eager one.",
         "", "Avoid Python state and data-dependent control flow in forward/backward."),
    Code("GV353", "compile-failed",
         "torch.compile failed for another reason than a graph break.",
         "The model cannot be compiled with this Function in it.", "",
         "Read the message; run TORCH_LOGS=+dynamo for details."),
    Code("GV354", "compile-func-grad-mismatch",
         "torch.compile(torch.func.grad(f)) gives another gradient than eager, where eager "
         "torch.func.grad and autograd agree: torch.compile is at fault, not the formula.",
         "Per-sample gradients or a functional training step, compiled, train on wrong "
         "numbers (torch 2.13 drops the custom backward of a forward that leaves torch "
         "through numpy: the gradient is zero).",
         "def forward(x):\n    return torch.from_numpy(np.exp(x.detach().numpy()))",
         "Keep the Function out of the compiled region (torch.compiler.disable), or make its "
         "forward torch code (a torch.library.custom_op for the numpy part)."),
)


class CompileCheck(Check):
    name = "compile"
    default = False
    composition = True
    summary = "under torch.compile(backend='aot_eager') it matches eager"
    codes = CODES
    traits = frozenset({Trait.CALLS_BACKWARD, Trait.DIFFERENTIATES, Trait.COMPARES_RUNS})

    def run(self, ctx: CheckContext) -> Outcome:
        from gradverify.checks import _calls as calls

        args = ctx.args("double")
        diff = args.diff_positions
        probe = calls.apply(ctx.info, args)
        grads = (calls.random_grads(probe, ctx.generator("compile")) if probe.differentiable
                 else None)
        eager = calls.outputs_and_gradients(probe, grads, diff)
        outcome = Outcome()
        # A mark_dirty Function writes into its input, so users call it on a non-leaf: one made
        # inside the compiled region, or one handed in from outside it. Both must match eager.
        formula = ctx.info.detail(Formula)
        ways = ["inside", "outside"] if formula and formula.uses_mark_dirty else ["leaf"]
        for way in ways:
            if not self._one_way(ctx, way, grads, eager, outcome):
                break
        functional = formula is not None and formula.style == "setup_context"
        if functional and grads is not None and diff and outcome.status is not Status.FAIL:
            _compiled_func_grad(ctx, grads, eager, outcome)
        if outcome.status is Status.PASS:
            broke = any(f.code == "GV351" for f in outcome.findings)
            outcome.summary = (("compiled around a graph break" if broke
                                else "traced with fullgraph=True") + "; matches eager"
                               + (" (input made inside and outside the compiled region)"
                                  if len(ways) > 1 else ""))
        return outcome

    @staticmethod
    def _one_way(ctx: CheckContext, way: str, grads: list[Any] | None, eager: Any,
                 outcome: Outcome) -> bool:
        """Compile and run one way of calling; findings go to ``outcome``. False when compiling
        failed (the other ways would fail alike)."""
        import torch

        run = ctx.args("double")
        diff = run.diff_positions
        call = _Call(ctx.info.function, tuple(diff) if way == "inside" else ())
        given = [v.clone() if way == "outside" and isinstance(v, torch.Tensor) and v.requires_grad
                 else v for v in run.values]
        try:
            out = _compiled_call(ctx, way, call, given, outcome)
        except Exception as exc:  # noqa: BLE001 -- Dynamo or user code
            _compile_failed(ctx, way, exc, outcome)
            return False
        outs = list(out) if isinstance(out, tuple) else [out]
        got_grads = _gradients(outs, grads, [run.values[i] for i in diff])
        ours = ([o.detach() if isinstance(o, torch.Tensor) else o for o in outs], got_grads)
        _against_eager(ctx, way, ours, eager, [run.names[i] for i in diff], outcome)
        if outcome.status is Status.FAIL:
            outcome.summary = f"compiled{_WAYS[way]}: differs from eager"
        return True


def _compiled_call(ctx: CheckContext, way: str, call: _Call, given: list[Any],
                   outcome: Outcome) -> Any:
    """The compiled call's outputs, as users get them. Compiled with ``fullgraph=True`` first:
    a graph break there is a note (GV351, with Dynamo's reason), and the call is compiled again
    as users compile it (``fullgraph=False``: Dynamo runs the Function in eager around the
    break). Raises what the call users get raises."""
    import torch

    torchcompat.dynamo_reset()
    try:
        return torch.compile(call, fullgraph=True, backend="aot_eager")(*given)
    except Exception as exc:
        # Dynamo's Unsupported is a graph break; its UserError is one too under fullgraph
        # (a guard on a data-dependent value such as `.item()` in control flow).
        if not torchcompat.is_graph_break(exc):
            raise
        outcome.add(Finding(
            "GV351", Severity.INFO,
            f"Dynamo cannot trace it in one graph{_WAYS[way]}: {_reason(exc)}; torch.compile "
            "runs it in eager around a graph break (fullgraph=True refuses it)",
            location=ctx.forward_location, hint=_hint(exc)))
    torchcompat.dynamo_reset()
    return torch.compile(call, backend="aot_eager")(*given)


def _compiled_func_grad(ctx: CheckContext, grads: list[Any], eager: Any,
                        outcome: Outcome) -> None:
    """``torch.compile(torch.func.grad(loss))``, as a compiled functional training step calls
    it, on the inputs themselves and on intermediates made of them (``x * 1``: torch 2.13 gets
    only the first wrong for a numpy forward), against eager autograd's gradients (``loss``:
    the outputs weighted by the same incoming gradients). A difference is the compiler's
    (GV354) only where eager ``torch.func.grad`` agrees with autograd; a ``torch.func.grad``
    that cannot run the Function (a numpy backward) leaves nothing to compare."""
    import torch

    from gradverify.checks import _compare as cmp

    run = ctx.args("double")
    diff = run.diff_positions
    names = [run.names[i] for i in diff]
    inputs = [run.values[i].detach() for i in diff]
    argnums = tuple(range(len(inputs)))
    for intermediate in (False, True):
        loss = _weighted_loss(ctx.info.function, list(run.values), diff, grads, intermediate)
        try:
            functional = list(torch.func.grad(loss, argnums=argnums)(*inputs))
        except Exception:  # noqa: BLE001 -- torch.func cannot run it: nothing to compare
            return
        if cmp.compare_runs(([], functional), ([], eager[1]), names, 1e-7, 1e-9):
            return  # eager torch.func.grad already differs: not the compiler's doing
        torchcompat.dynamo_reset()
        way = " (inputs made inside it)" if intermediate else ""
        try:
            compiled = list(torch.compile(torch.func.grad(loss, argnums=argnums),
                                          backend="aot_eager")(*inputs))
        except Exception as exc:  # noqa: BLE001 -- this torch cannot compile it: not compared
            outcome.add(Finding(
                "GV353", Severity.INFO,
                f"torch.compile(torch.func.grad(f)){way} fails on this torch, so it is not "
                f"compared: {_reason(exc)}", location=ctx.forward_location, hint=_hint(exc)))
            return
        for mismatch in cmp.compare_runs(([], compiled), ([], eager[1]), names, 1e-7, 1e-9):
            outcome.add(Finding(
                "GV354", Severity.ERROR,
                f"torch.compile(torch.func.grad(f)){way}: {mismatch.describe()} (against "
                "eager, where autograd and torch.func.grad agree): torch.compile is at fault, "
                "not the formula", input=mismatch.input, location=ctx.location,
                data=dict(mismatch.data), hint=CODES[-1].fix))
        if outcome.status is Status.FAIL:
            outcome.summary = "compiled torch.func.grad differs from eager"
            return


def _weighted_loss(function: Any, values: list[Any], diff: list[int], grads: list[Any],
                   intermediate: bool) -> Any:
    """``loss(*tensors)``: the sum of the outputs weighted by ``grads``, with the tensors at
    ``diff`` passed in as they are or as intermediates (``t * 1``, as a model hands them on)."""
    import torch

    def loss(*tensors: Any) -> Any:
        called = list(values)
        for position, tensor in zip(diff, tensors):
            called[position] = tensor * 1 if intermediate else tensor
        out = function.apply(*called)
        outs = out if isinstance(out, tuple) else (out,)
        terms = [(o * g.to(o.dtype)).sum() for o, g in zip(outs, grads)
                 if isinstance(o, torch.Tensor) and isinstance(g, torch.Tensor)]
        return torch.stack(terms).sum()

    return loss


def _compile_failed(ctx: CheckContext, way: str, exc: Exception, outcome: Outcome) -> None:
    """Calling the compiled Function raised, even around a graph break (GV353)."""
    outcome.add(Finding(
        "GV353", Severity.ERROR, f"torch.compile fails{_WAYS[way]}: {_reason(exc)}",
        location=ctx.forward_location, hint=_hint(exc)))
    outcome.summary = "compile failed"


def _gradients(outs: list[Any], grads: list[Any] | None, leaves: list[Any]) -> list[Any]:
    """The compiled run's gradients for the differentiable inputs ``leaves``, through
    autograd as a user gets them; empty when no output carries a gradient."""
    import torch

    tensors = [(o, g) for o, g in zip(outs, grads or [], strict=False)
               if isinstance(o, torch.Tensor) and o.requires_grad and g is not None]
    if not tensors:
        return []
    return list(torch.autograd.grad([o for o, _ in tensors], leaves, [g for _, g in tensors],
                                    allow_unused=True))


def _against_eager(ctx: CheckContext, way: str, ours: Any, eager: Any, names: list[str],
                   outcome: Outcome) -> None:
    """GV352 for each output or gradient of the compiled run that differs from eager. For a
    mark_dirty Function the finding blames torch.compile, not the formula."""
    from gradverify.checks import _compare as cmp

    eager_right = ctx.verdict(Trait.JUDGES_GRADIENT) is Status.PASS
    for mismatch in cmp.compare_runs(ours, eager, names, 1e-7, 1e-9):
        if way == "leaf":
            message = f"compiled: {mismatch.describe()} (against eager)"
            hint = ("forward or backward depends on something Dynamo treats as a constant "
                    "(Python state, data-dependent control flow, .item())")
        else:
            message = (f"compiled{_WAYS[way]}: {mismatch.describe()} (against eager"
                       f"{', which gradcheck verified' if eager_right else ''}): "
                       "torch.compile mishandles this in-place (mark_dirty) Function, not "
                       "its formula")
            hint = ("a known class of torch.compile bugs with mark_dirty (pytorch issues "
                    "133491, 184113): under compile, call it on a tensor made inside the "
                    "compiled region (clone it there), or keep it out of the region with "
                    "torch.compiler.disable")
        outcome.add(Finding("GV352", Severity.ERROR, message, input=mismatch.input,
                            output=mismatch.output, location=ctx.location, hint=hint,
                            data={**mismatch.data, "way": way}))


_WAYS = {"leaf": "", "inside": " (input made inside the compiled region)",
         "outside": " (input made outside the compiled region)"}


class _Call:
    """A named callable, so Dynamo's messages point at the Function; the arguments at
    ``clone`` (those that require grad) are cloned first, inside the compiled region. Which
    they are is decided outside it: Dynamo before torch 2.5 cannot trace
    ``getattr(tensor, "requires_grad")`` and would report a graph break that is gradverify's."""

    def __init__(self, cls: Any, clone: tuple[int, ...] = ()) -> None:
        self.cls = cls
        self.clone = clone

    def __call__(self, *args: Any) -> Any:
        args = tuple(a.clone() if i in self.clone else a for i, a in enumerate(args))
        return self.cls.apply(*args)


def _reason(exc: BaseException) -> str:
    """The first line of torch's message, with the line it introduces (``backend='aot_eager'
    raised:`` is followed by the error itself) and Dynamo's explanation, if any."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    explanation = next((line for line in lines if line.startswith("Explanation:")), None)
    head = f"{lines[0]} {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]
    return f"{head} ({explanation.removeprefix('Explanation:').strip()})" if explanation else head


LOCALE_HINT = ("torch.compile reads its own source files in the locale's encoding, and this "
               "locale's is not UTF-8 (as under LC_ALL=C): run under a UTF-8 locale "
               "(LC_ALL=C.UTF-8) or with PYTHONUTF8=1")
"""The hint of a failure that is the locale's, not the Function's (torch's inductor opens its
templates without an encoding)."""


def _hint(exc: BaseException) -> str:
    if "UnicodeDecodeError" in str(exc) or isinstance(exc.__cause__, UnicodeDecodeError):
        return LOCALE_HINT
    return "Dynamo must trace forward and backward; see the reason, or run " \
           "TORCH_LOGS=graph_breaks for details"


CHECK = CompileCheck()
