"""forward_ad: forward-mode derivatives from the Function's ``jvp`` against finite differences.

Without a ``jvp`` the Function cannot be used under torch.func.jvp or jacfwd: a skip that says
so. With one, gradcheck runs with ``check_forward_ad``; and where backward supports double
backward, gradgradcheck checks forward-over-reverse (jacfwd of grad, used by Hessians).
"""
from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from gradverify.checks import _computes as computes
from gradverify.checks._modes import resolve_mode
from gradverify.checks.base import Check, Outcome, Trait
from gradverify.codes import Code
from gradverify.results import Finding, Severity
from gradverify.targets.model import Capability, Formula

if TYPE_CHECKING:
    from gradverify.case.context import CheckContext


CODES = (
    Code("GV301", "jvp-mismatch",
         "The Function's jvp (forward-mode derivative) differs from finite differences.",
         "torch.func.jvp, jacfwd and forward-mode Hessians get wrong values silently.",
         "@staticmethod\ndef jvp(ctx, x_t):\n    x, = ctx.saved_tensors\n    return -x.sin() * x_t"
         "   # d cos... but forward is sin",
         "The tangent of each output is the directional derivative along the input tangents; "
         "the finding names the input and the pattern."),
    Code("GV302", "forward-over-reverse-wrong",
         "jacfwd of the gradient (forward-over-reverse) is wrong or fails.",
         "Hessian-vector products with torch.func compose forward mode over backward.",
         "", "Write backward with ops that support forward-mode AD, or mark it "
             "@once_differentiable."),
    Code("GV303", "jvp-raised",
         "jvp raised.", "torch.func.jvp/jacfwd crash on this Function.",
         "def jvp(ctx, x_t):\n    x, = ctx.saved_tensors   # saved with save_for_backward only",
         "Save what jvp needs with ctx.save_for_forward; return one tangent per output."),
)


class ForwardADCheck(Check):
    name = "forward_ad"
    needs = MappingProxyType({Capability.FORWARD_AD: ""})
    default = True
    summary = "jvp (forward-mode AD) matches finite differences"
    codes = CODES
    traits = frozenset({Trait.CALLS_BACKWARD, Trait.COMPARES_RUNS})

    def run(self, ctx: CheckContext) -> Outcome:
        import torch
        from torch.autograd.gradcheck import GradcheckError

        from gradverify.checks import _calls as calls
        from gradverify.checks import _jacobian as jac
        if not ((formula := ctx.info.detail(Formula)) and formula.has_jvp):
            return Outcome.skip("forward-mode AD unsupported: torch.func.jvp/jacfwd will fail "
                                "(the Function defines no jvp)"
                                + (f"; and {calls.NO_TORCH_FUNC}" if calls.old_style(ctx.info)
                                   else ""))
        skipped = computes.finite_differences_skip(ctx)
        if skipped is not None:
            return skipped
        view = calls.differentiable_view(ctx)
        if isinstance(view, calls.NothingToDifferentiate):
            return view.skip()
        fn, inputs, names, outs = view.fn, view.inputs, view.names, view.outputs
        mode = resolve_mode(ctx.mode, jac.jacobian_entries(inputs, outs))
        outcome = Outcome(mode=mode)
        tol = ctx.tolerance
        common: dict[str, Any] = dict(eps=tol.eps, atol=tol.atol, rtol=tol.rtol,
                                      nondet_tol=tol.nondet_tol, check_undefined_grad=False,
                                      fast_mode=mode == "fast", raise_exception=True)
        try:
            with jac.no_slow_rerun():
                torch.autograd.gradcheck(fn, inputs, check_forward_ad=True,
                                         check_backward_ad=False, **common)
        except (GradcheckError, RuntimeError) as exc:
            self._diagnose(ctx, fn, inputs, names, exc, outcome)
            outcome.summary = "jvp is wrong"
            return outcome
        except Exception as exc:  # noqa: BLE001 -- user code in jvp
            outcome.add(Finding("GV303", Severity.ERROR,
                                f"jvp raised {calls.describe_exception(exc)}",
                                location=calls.user_location(exc, ctx.info) or ctx.location,
                                hint="jvp(ctx, *input_tangents) returns one tangent per output; "
                                     "tensors it needs must be saved with ctx.save_for_forward"))
            return outcome
        outcome.summary = f"jvp matches ({mode} mode)"
        if ctx.info.once_differentiable:
            return outcome
        try:
            with jac.no_slow_rerun():
                torch.autograd.gradgradcheck(fn, inputs, check_fwd_over_rev=True,
                                             check_rev_over_rev=False, **common)
            outcome.summary = f"jvp and forward-over-reverse match ({mode} mode)"
        except Exception as exc:  # noqa: BLE001 -- torch or user code
            outcome.add(Finding(
                "GV302", Severity.ERROR,
                f"forward-over-reverse (jacfwd of grad) is wrong or unsupported: "
                f"{calls.describe_exception(exc)}", location=ctx.location,
                hint="backward must be made of ops that support forward-mode AD; mark it "
                     "@once_differentiable if higher-order use is not supported"))
        return outcome

    @staticmethod
    def _diagnose(ctx: CheckContext, fn: Any, inputs: list[Any], names: list[str],
                  exc: BaseException, outcome: Outcome) -> None:
        """Per input: the jvp along a random tangent against the central difference."""
        import torch
        import torch.autograd.forward_ad as fwAD

        from gradverify.checks import _calls as calls
        from gradverify.checks import _compare as cmp
        from gradverify.checks import _jacobian as jac

        generator = ctx.generator("forward_ad")
        eps = ctx.tolerance.eps
        for i, name in enumerate(names):
            tangent = calls.randn_like(inputs[i], generator)
            base = [t.detach() for t in inputs]
            with torch.no_grad():
                plus = fn(*[b + eps * tangent if k == i else b for k, b in enumerate(base)])
                minus = fn(*[b - eps * tangent if k == i else b for k, b in enumerate(base)])
            with fwAD.dual_level():
                duals = [fwAD.make_dual(b, tangent) if k == i else b for k, b in enumerate(base)]
                try:
                    outs = fn(*duals)
                    analytic = [fwAD.unpack_dual(o).tangent for o in outs]
                except Exception as error:  # noqa: BLE001 -- user code
                    outcome.add(Finding("GV303", Severity.ERROR,
                                        f"jvp raised {calls.describe_exception(error)}",
                                        input=name, location=ctx.location))
                    return
            for j, (a, p, m) in enumerate(zip(analytic, plus, minus)):
                numeric = (p - m) / (2 * eps)
                a = torch.zeros_like(numeric) if a is None else a
                if torch.allclose(a, numeric, rtol=ctx.tolerance.rtol, atol=ctx.tolerance.atol):
                    continue
                pattern = jac.value_pattern(a, numeric, ctx.tolerance.atol, ctx.tolerance.rtol)
                worst, where = cmp.max_difference(a, numeric)
                outcome.add(Finding(
                    "GV301", Severity.ERROR,
                    f"jvp for {name!r} is wrong (output {j}){': ' + pattern if pattern else ''}; "
                    f"along a random tangent the worst element {jac.format_index('output', where)} "
                    f"is off by {worst:.3g}", input=name, output=j, location=ctx.location,
                    hint=jac.pattern_hint(pattern, name).replace("backward", "jvp")))
        if not outcome.findings:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            outcome.add(Finding("GV301", Severity.ERROR, f"forward-mode gradcheck failed: {first}",
                                location=ctx.location))


CHECK = ForwardADCheck()
