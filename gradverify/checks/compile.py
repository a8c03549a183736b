"""compile (opt-in): under ``torch.compile(fullgraph=True, backend="aot_eager")`` outputs and
gradients match eager, and Dynamo traces the Function without a graph break.

Opt-in because compiling takes seconds per Function: turn it on with ``checks: {compile: true}``
in a spec, ``--only compile``, or ``checks = { compile = true }`` in pyproject.toml.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gradverify.checks.base import Option, Outcome
from gradverify.codes import Code
from gradverify.report.results import Finding, Severity

if TYPE_CHECKING:
    from gradverify.context import CheckContext


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


class CompileCheck:
    name = "compile"
    default = False
    summary = "torch.compile(fullgraph=True, backend='aot_eager') traces it and matches eager"
    codes = CODES
    options: tuple[Option, ...] = ()
    requires = ("contract",)

    def run(self, ctx: CheckContext) -> Outcome:
        import torch

        from gradverify.checks import _calls as calls
        from gradverify.checks import _compare as cmp

        args = ctx.args("double")
        diff = args.diff_positions
        probe = calls.apply(ctx.info, args)
        grads = calls.random_grads(probe, ctx.generator("compile")) if probe.differentiable else None
        eager = calls.forward_backward(ctx.info, ctx.args("double"), grads, diff)
        torch._dynamo.reset()
        compiled = torch.compile(_Call(ctx.info.cls), fullgraph=True, backend="aot_eager")
        run = ctx.args("double")
        outcome = Outcome()
        try:
            out = compiled(*run.values)
        except Exception as exc:  # noqa: BLE001 -- Dynamo or user code
            # Dynamo's Unsupported is a graph break; its UserError is one too under fullgraph
            # (a guard on a data-dependent value such as `.item()` in control flow).
            unsupported = type(exc).__module__ == "torch._dynamo.exc" and \
                type(exc).__name__ in ("Unsupported", "UserError")
            reason = _reason(exc)
            outcome.add(Finding(
                "GV351" if unsupported else "GV353", Severity.ERROR,
                f"torch.compile(fullgraph=True) {'breaks the graph' if unsupported else 'fails'}: "
                f"{reason}", location=ctx.info.forward_location,
                hint="Dynamo must trace forward and backward; see the reason, or run "
                     "TORCH_LOGS=graph_breaks for details"))
            outcome.summary = "graph break" if unsupported else "compile failed"
            return outcome
        outs = list(out) if isinstance(out, tuple) else [out]
        tensors = [(o, g) for o, g in zip(outs, grads or [])
                   if isinstance(o, torch.Tensor) and o.requires_grad and g is not None]
        got_grads = list(torch.autograd.grad([o for o, _ in tensors],
                                             [run.values[i] for i in diff],
                                             [g for _, g in tensors], allow_unused=True)) \
            if tensors else []
        ours = ([o.detach() if isinstance(o, torch.Tensor) else o for o in outs], got_grads)
        names = [args.names[i] for i in diff]
        for mismatch in cmp.compare_runs(ours, eager, names, 1e-7, 1e-9):
            outcome.add(Finding(
                "GV352", Severity.ERROR, f"compiled: {mismatch.describe()} (against eager)",
                input=mismatch.input, output=mismatch.output, location=ctx.location,
                hint="forward or backward depends on something Dynamo treats as a constant "
                     "(Python state, data-dependent control flow, .item())",
                data=mismatch.data))
        outcome.summary = outcome.summary or "traced with fullgraph=True; matches eager"
        return outcome


class _Call:
    """A named callable, so Dynamo's messages point at the Function."""

    def __init__(self, cls: Any) -> None:
        self.cls = cls

    def __call__(self, *args: Any) -> Any:
        return self.cls.apply(*args)


def _reason(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    explanation = next((line for line in lines if line.startswith("Explanation:")), None)
    head = lines[0]
    return f"{head} ({explanation.removeprefix('Explanation:').strip()})" if explanation else head


CHECK = CompileCheck()
