"""gradgradcheck: second-order gradients (double backward) against finite differences.

A backward decorated ``@once_differentiable`` declares double backward unsupported: that is a
skip with the reason, not the "Jacobian mismatch" torch's gradgradcheck would report.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gradverify.checks.base import Option, Outcome
from gradverify.checks.gradcheck import MODES, mismatch_message, prepare, resolve_mode
from gradverify.report.model import Finding, Severity

if TYPE_CHECKING:
    from gradverify.context import CheckContext

_HINT = ("write backward with differentiable torch ops on ctx.saved_tensors; avoid .data, "
         ".detach(), numpy and intermediates computed in forward but not saved with "
         "save_for_backward (or mark backward @once_differentiable if double backward is "
         "unsupported)")


class GradgradcheckCheck:
    name = "gradgradcheck"
    default = True
    summary = "second-order gradients (double backward) match finite differences (float64)"
    codes = ("GV141", "GV142", "GV143")
    options = (Option("mode", str, "auto, slow or fast (overrides --fast/--slow)", MODES),)
    requires = ("contract", "gradcheck")

    def run(self, ctx: CheckContext) -> Outcome:
        import torch
        from torch.autograd.gradcheck import GradcheckError

        from gradverify.checks import _autograd as ag

        if ctx.info.once_differentiable:
            return Outcome.skip(
                "backward is @once_differentiable: double backward is unsupported",
                Finding("GV143", Severity.INFO,
                        "backward is decorated @once_differentiable, so double backward raises; "
                        "torch.autograd.grad(..., create_graph=True) through it gives first-order "
                        "gradients that silently carry no graph", location=ctx.location))
        first = ctx.results.get("gradcheck")
        if first is not None and any(f.code == "GV122" for f in first.findings):
            return Outcome.skip("skipped: the inputs sit on a non-differentiable point "
                                "(see gradcheck)")
        prepared = prepare(ctx)
        if isinstance(prepared, Outcome):
            return prepared
        fn, inputs, names, outs = prepared
        entries = ag.jacobian_entries(inputs, outs) * max(1, len(inputs))
        mode = resolve_mode(ctx.options.get("mode") or ctx.mode, entries)
        outcome = Outcome(mode=mode)
        tol = ctx.tolerance
        generator = ctx.generator("gradgradcheck")
        grad_outputs = [ag.randn_like(o, generator) for o in outs]
        try:
            with ag.no_slow_rerun():
                torch.autograd.gradgradcheck(fn, inputs, grad_outputs, eps=tol.eps, atol=tol.atol,
                                             rtol=tol.rtol, nondet_tol=tol.nondet_tol,
                                             check_undefined_grad=False, fast_mode=mode == "fast",
                                             raise_exception=True)
            outcome.summary = f"second-order gradients match ({mode} mode)"
            return outcome
        except GradcheckError as exc:
            failure = str(exc)
        except Exception as exc:  # noqa: BLE001 -- backward raised under create_graph=True
            outcome.add(Finding(
                "GV141", Severity.ERROR,
                f"double backward raised {ag.describe_exception(exc)}",
                location=ag.user_location(exc, ctx.info) or ctx.location, hint=_HINT))
            outcome.summary = "double backward raised"
            return outcome
        outcome.summary = f"second-order mismatch ({mode} mode)"
        broken = self._graph_breaks(fn, inputs, grad_outputs, names, outcome, ctx)
        first_order = _first_order(fn, grad_outputs)
        blocks = ag.diagnose(first_order, inputs, atol=tol.atol, rtol=tol.rtol, eps=tol.eps,
                             generator=ctx.generator("gradgradcheck-diagnose"))
        for block in blocks:
            if block.output in broken:
                continue
            of, wrt = names[block.output], names[block.input]
            outcome.add(Finding(
                "GV141", Severity.ERROR,
                mismatch_message(block, f"second derivative d(grad {of!r})/d({wrt!r}) is wrong",
                                 wrt, f"grad {of!r}"),
                input=wrt, location=ctx.location, hint=_HINT,
                data={**block.data, "of": of, "pattern": block.pattern}))
        if not outcome.findings:
            first = failure.strip().splitlines()[0] if failure.strip() else "mismatch"
            outcome.add(Finding("GV141", Severity.ERROR, f"gradgradcheck failed: {first}",
                                location=ctx.location, hint=_HINT,
                                data={"torch_message": failure[:2000]}))
        return outcome

    @staticmethod
    def _graph_breaks(fn: Any, inputs: list[Any], grad_outputs: list[Any], names: list[str],
                      outcome: Outcome, ctx: CheckContext) -> set[int]:
        import torch

        leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
        v = [g.detach().clone().requires_grad_(True) for g in grad_outputs]
        try:
            grads = torch.autograd.grad(fn(*leaves), leaves, v, create_graph=True,
                                        allow_unused=True)
        except Exception:  # noqa: BLE001 -- reported by the caller
            return set()
        broken = set()
        for i, g in enumerate(grads):
            if g is not None and not g.requires_grad:
                broken.add(i)
                outcome.add(Finding(
                    "GV142", Severity.ERROR,
                    f"backward's gradient for {names[i]!r} has no grad_fn under "
                    "create_graph=True: backward breaks the graph, so its second derivatives are "
                    "silently zero", input=names[i], location=ctx.location, hint=_HINT))
        return broken


def _first_order(fn: Any, grad_outputs: list[Any]) -> Any:
    """x -> backward's gradients for every input at x (for a fixed incoming gradient)."""
    import torch

    def first(*xs: Any) -> tuple[Any, ...]:
        with torch.enable_grad():
            leaves = [x if x.requires_grad else x.detach().requires_grad_(True) for x in xs]
            grads = torch.autograd.grad(fn(*leaves), leaves, grad_outputs, create_graph=True,
                                        allow_unused=True)
        return tuple(g if g is not None else torch.zeros_like(x) for g, x in zip(grads, xs))

    return first


CHECK = GradgradcheckCheck()
