"""compile (opt-in): under ``torch.compile(fullgraph=True, backend="aot_eager")`` outputs and
gradients match eager, and Dynamo traces the Function without a graph break.

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
         "torch.compile(fullgraph=True) cannot trace the Function (a graph break).",
         "With fullgraph=False it silently falls back to eager around the Function.",
         "def forward(ctx, x):\n    return torch.from_numpy(np.exp(x.numpy()))",
         "The finding gives Dynamo's reason; remove the construct it names."),
    Code("GV352", "compile-mismatch",
         "Compiled outputs or gradients differ from eager.",
         "The compiled model trains on different numbers than the eager one.",
         "", "Avoid Python state and data-dependent control flow in forward/backward."),
    Code("GV353", "compile-failed",
         "torch.compile failed for another reason than a graph break.",
         "The model cannot be compiled with this Function in it.", "",
         "Read the message; run TORCH_LOGS=+dynamo for details."),
)


class CompileCheck(Check):
    name = "compile"
    default = False
    summary = "torch.compile(fullgraph=True, backend='aot_eager') traces it and matches eager"
    codes = CODES
    traits = frozenset({Trait.CALLS_BACKWARD, Trait.DIFFERENTIATES, Trait.COMPARES_RUNS})

    def run(self, ctx: CheckContext) -> Outcome:
        from gradverify.checks import _calls as calls

        args = ctx.args("double")
        diff = args.diff_positions
        probe = calls.apply(ctx.info, args)
        grads = (calls.random_grads(probe, ctx.generator("compile")) if probe.differentiable
                 else None)
        eager = calls.forward_backward(ctx.info, ctx.args("double"), grads, diff)
        outcome = Outcome()
        # A mark_dirty Function writes into its input, so users call it on a non-leaf: one made
        # inside the compiled region, or one handed in from outside it. Both must match eager.
        formula = ctx.info.detail(Formula)
        ways = ["inside", "outside"] if formula and formula.uses_mark_dirty else ["leaf"]
        for way in ways:
            if not self._one_way(ctx, way, grads, eager, outcome):
                break
        if not outcome.findings:
            outcome.summary = ("traced with fullgraph=True; matches eager"
                               + (" (input made inside and outside the compiled region)"
                                  if len(ways) > 1 else ""))
        return outcome

    @staticmethod
    def _one_way(ctx: CheckContext, way: str, grads: list[Any] | None, eager: Any,
                 outcome: Outcome) -> bool:
        """Compile and run one way of calling; findings go to ``outcome``. False when compiling
        failed (the other ways would fail alike)."""
        import torch

        torchcompat.dynamo_reset()
        run = ctx.args("double")
        diff = run.diff_positions
        compiled = torch.compile(_Call(ctx.info.function, tuple(diff) if way == "inside" else ()),
                                 fullgraph=True, backend="aot_eager")
        given = [v.clone() if way == "outside" and isinstance(v, torch.Tensor) and v.requires_grad
                 else v for v in run.values]
        try:
            out = compiled(*given)
        except Exception as exc:  # noqa: BLE001 -- Dynamo or user code
            _compile_failed(ctx, way, exc, outcome)
            return False
        outs = list(out) if isinstance(out, tuple) else [out]
        got_grads = _gradients(outs, grads, [run.values[i] for i in diff])
        ours = ([o.detach() if isinstance(o, torch.Tensor) else o for o in outs], got_grads)
        _against_eager(ctx, way, ours, eager, [run.names[i] for i in diff], outcome)
        if outcome.findings:
            outcome.summary = f"compiled{_WAYS[way]}: differs from eager"
        return True


def _compile_failed(ctx: CheckContext, way: str, exc: Exception, outcome: Outcome) -> None:
    """Calling the compiled Function raised: a graph break (GV351) or another failure (GV353)."""
    # Dynamo's Unsupported is a graph break; its UserError is one too under fullgraph
    # (a guard on a data-dependent value such as `.item()` in control flow).
    unsupported = torchcompat.is_graph_break(exc)
    outcome.add(Finding(
        "GV351" if unsupported else "GV353", Severity.ERROR,
        f"torch.compile(fullgraph=True) {'breaks the graph' if unsupported else 'fails'}"
        f"{_WAYS[way]}: {_reason(exc)}", location=ctx.forward_location, hint=_hint(exc)))
    outcome.summary = "graph break" if unsupported else "compile failed"


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
