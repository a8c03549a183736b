"""gradgradcheck: second-order gradients (double backward) against finite differences.

Both blocks are checked, as torch's own gradgradcheck does: the derivative of backward's result
with respect to the inputs and with respect to the incoming gradient. It runs whatever gradcheck
said: gradgradcheck differentiates backward as written, whatever its relation to forward, so a
wrong first derivative (or a declared surrogate gradient) and a broken double backward are two
defects, both shown in one run, as bare gradgradcheck shows the second. A backward decorated
``@once_differentiable`` declares double backward unsupported: that is a skip with the reason,
not the "Jacobian mismatch" torch's gradgradcheck would report.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gradverify.checks import _computes as computes
from gradverify.checks._modes import MODES, resolve_mode
from gradverify.checks.base import Check, CheckOption, Outcome, Trait
from gradverify.codes import Code, Symptom
from gradverify.results import Evidence, Finding, Severity

if TYPE_CHECKING:
    from gradverify.case.context import CheckContext
    from gradverify.checks._calls import DifferentiableView
    from gradverify.specmodel import ResolvedTolerance

_HINT = ("write backward with differentiable torch ops on ctx.saved_tensors; avoid .data, "
         ".detach(), numpy and intermediates computed in forward but not saved with "
         "save_for_backward (or mark backward @once_differentiable if double backward is "
         "unsupported)")


def _hint(ctx: CheckContext) -> str:
    """The hint for a second-order mismatch: when forward saved a tensor it computed (not an
    input or output), that is the likely cause, whether or not it went through
    save_for_backward: it carries no graph back to the inputs."""
    from gradverify.checks import _calls as calls
    from gradverify.checks import _tensors as tk

    try:
        args = ctx.args("double")
        with tk.record_saved() as saved:
            applied = calls.apply(ctx.info, args)
        inputs = {n: v for n, v in zip(args.names, args.values, strict=False)
                  if tk.is_tensor(v)}
        built = [t for t in saved.tensors if tk.is_tensor(t) and tk.classify(
            t, inputs, dict(applied.tensors), same_shape=False)[0] == "intermediate"
            and tk.is_inexact(t)]
    except Exception:  # noqa: BLE001 -- a hint only
        return _HINT
    if not built:
        return _HINT
    what = (f"a {tk.kind(built[0])} tensor built" if tk.is_sparse(built[0]) else
            "a tensor computed")
    return (f"backward reads {what} in forward (shape {list(built[0].shape)}), saved with "
            "save_for_backward: saving it keeps it, not its graph back to the inputs, so "
            "double backward through it is zero. Build it in backward from the saved inputs "
            "(save indices and values, not the matrix), or mark backward @once_differentiable")


CODES = (
    Code("GV141", "second-order-mismatch",
         "The derivative of backward's result (double backward) differs from finite differences.",
         "Higher-order uses (gradient penalties, Hessian-vector products, MAML) get wrong values.",
         "def backward(ctx, g):\n    x, = ctx.saved_tensors\n    return g * x.detach().cos()",
         "Write backward with differentiable torch ops on tensors from ctx.saved_tensors; avoid "
         ".data/.detach()/numpy and intermediates computed in forward without being saved."),
    Code("GV142", "backward-not-differentiable",
         "Under create_graph=True, backward's result for an input has no grad_fn: backward breaks "
         "the graph.",
         "torch.autograd.grad(..., create_graph=True) silently treats the gradient as constant, so "
         "second derivatives are zero.",
         "def backward(ctx, g):\n    return torch.from_numpy(np_grad(g.numpy()))",
         "Use torch ops on saved tensors; if double backward is truly unsupported, decorate "
         "backward with @once_differentiable so that it raises instead of being silently wrong.",
         reports=frozenset({Symptom.DETACHED})),
    Code("GV143", "once-differentiable",
         "backward is decorated @once_differentiable: double backward is unsupported (skip).",
         "Calling autograd through it with create_graph=True raises; torch.autograd.grad with "
         "create_graph=True through it silently drops its contribution in some versions.",
         "", "Nothing to fix unless you need higher-order gradients."),
    Code("GV144", "incoming-gradient-detached",
         "Under create_graph=True, backward's result for an input does not depend on the "
         "incoming gradient the way it is computed from it: backward detaches grad_output "
         "(grad.detach(), grad.data, a numpy round trip) or uses it non-linearly.",
         "Double backward differentiates backward's result with respect to the incoming "
         "gradient too (torch's gradgradcheck checks that block). A detached incoming gradient "
         "makes gradient penalties and Hessian-vector products silently wrong even for linear "
         "and piecewise-linear ops, whose second derivative with respect to the inputs is zero "
         "and so cannot reveal it.",
         "def backward(ctx, grad):\n    return grad.detach() * 3",
         "Use the incoming gradient itself: return grad * 3.",
         reports=frozenset({Symptom.DETACHED})),
)


class GradgradcheckCheck(Check):
    name = "gradgradcheck"
    default = True
    summary = "second-order gradients (double backward) match finite differences (float64)"
    codes = CODES
    traits = frozenset({Trait.CALLS_BACKWARD, Trait.DIFFERENTIATES, Trait.REUSES_INPUTS,
                        Trait.SECOND_ORDER})
    options = (CheckOption("mode", str, "auto, slow or fast (over `mode =`; --fast/--slow "
                           "override it)", MODES),)

    def run(self, ctx: CheckContext) -> Outcome:
        from gradverify.checks import _calls as calls
        skipped = _skip(ctx)
        if skipped is not None:
            return skipped
        view = calls.differentiable_view(ctx)
        if isinstance(view, calls.NothingToDifferentiate):
            return view.skip()
        mode = _mode(ctx, view)
        outcome = Outcome(mode=mode)
        tol = ctx.tolerance
        generator = ctx.generator("gradgradcheck")
        # The incoming gradients require grad, as in torch's own default: gradgradcheck then
        # differentiates backward's result with respect to them too, so a backward that
        # detaches its incoming gradient fails even where d2/dx2 is zero.
        grad_outputs = [calls.randn_like(o, generator).requires_grad_(True) for o in view.outputs]
        try:
            probed = _probe_incoming_gradient(view.fn, view.inputs, grad_outputs, view.names,
                                              outcome, ctx)
        except _CalledOnce:
            return _once_skip(ctx, CALLED_ONCE)
        try:
            failure = _torch_gradgradcheck(ctx, view, grad_outputs, mode, tol)
        except Exception as exc:  # noqa: BLE001 -- backward raised under create_graph=True
            if ONCE in str(exc):  # a Function it calls declares double backward unsupported
                return _once_skip(ctx, CALLED_ONCE)
            outcome.add(Finding(
                "GV141", Severity.ERROR,
                f"double backward raised {calls.describe_exception(exc)}",
                location=calls.user_location(exc, ctx.info) or ctx.location, hint=_HINT))
            outcome.summary = "double backward raised"
            return outcome
        if failure is None and not outcome.findings:
            outcome.summary = (f"second-order gradients match, with respect to the inputs and "
                               f"the incoming gradients ({mode} mode)"
                               + computes.tolerance_note(ctx))
            return outcome
        outcome.summary = f"second-order mismatch ({mode} mode)"
        if failure is None:
            return outcome  # the probe's findings: torch's check skips graph-broken gradients
        _report_mismatch(ctx, view, grad_outputs, probed, failure, tol, outcome)
        return outcome


def _skip(ctx: CheckContext) -> Outcome | None:
    """The skip that applies before anything is differentiated, or None: double backward is
    declared unsupported (@once_differentiable), or forward computes in float16/bfloat16
    inside (``_computes``)."""
    skipped = computes.finite_differences_skip(ctx)
    if skipped is not None:
        return skipped
    if ctx.info.once_differentiable:
        return _once_skip(ctx, "backward is decorated @once_differentiable")
    return None


ONCE = "marked with @once_differentiable"
"""torch's error for double backward through a ``@once_differentiable`` backward."""
CALLED_ONCE = "a Function that forward calls has a backward decorated @once_differentiable"
"""Whose the skip is when the target's own backward is not the decorated one."""


def _once_skip(ctx: CheckContext, whose: str) -> Outcome:
    """Double backward declared unsupported (by the target's backward, or by that of a
    Function its forward calls): a skip, whatever a probe of it found."""
    return Outcome.skip(
        "@once_differentiable: double backward is unsupported",
        Finding("GV143", Severity.INFO,
                f"{whose}, so double backward raises; torch.autograd.grad(..., "
                "create_graph=True) through it gives first-order gradients that silently "
                "carry no graph", location=ctx.location))


def _mode(ctx: CheckContext, view: DifferentiableView) -> str:
    """Slow or fast mode: the check's option or the run's, else chosen by the size of the
    second-order Jacobian (first-order entries times the number of inputs)."""
    from gradverify.checks import _jacobian as jac

    entries = jac.jacobian_entries(view.inputs, view.outputs) * max(1, len(view.inputs))
    return resolve_mode(ctx.mode, entries)


def _torch_gradgradcheck(ctx: CheckContext, view: DifferentiableView, grad_outputs: list[Any],
                         mode: str, tol: ResolvedTolerance) -> str | None:
    """torch's gradgradcheck on the view, and, for a Function that writes into its inputs, as
    bare torch calls it, on the same tensors every call (``_calls.on_the_same_tensors``): None
    when it passes, else its failure message. Any other exception (backward raised under
    create_graph=True) propagates."""
    import torch
    from torch.autograd.gradcheck import GradcheckError

    from gradverify.checks import _calls as calls
    from gradverify.checks import _jacobian as jac

    runs = [(view.fn, view.inputs)]
    same = calls.on_the_same_tensors(ctx.info, ctx.args("double"),
                                     view.applied.args.diff_positions, view.applied.differentiable)
    if same is not None:
        runs.append((same, [t.detach().clone().requires_grad_(True) for t in view.inputs]))
    try:
        for fn, inputs in runs:
            with jac.no_slow_rerun():
                torch.autograd.gradgradcheck(fn, inputs, grad_outputs, eps=tol.eps,
                                             atol=tol.atol, rtol=tol.rtol,
                                             nondet_tol=tol.nondet_tol,
                                             fast_mode=mode == "fast", raise_exception=True)
    except GradcheckError as exc:
        return str(exc)
    return None


def _report_mismatch(ctx: CheckContext, view: DifferentiableView, grad_outputs: list[Any],
                     probed: set[int], failure: str, tol: ResolvedTolerance,
                     outcome: Outcome) -> None:
    """torch's gradgradcheck failed: GV141 for each second-derivative block the sampled
    Jacobian shows wrong, except for inputs the incoming-gradient probe already reported;
    when there is no finding at all, one named from torch's message."""
    from gradverify.checks import _jacobian as jac

    names = view.names
    hint = _hint(ctx)
    fixed = [g.detach() for g in grad_outputs]
    blocks = jac.diagnose(_first_order(view.fn, fixed), view.inputs, atol=tol.atol,
                          rtol=tol.rtol, eps=tol.eps,
                          generator=ctx.generator("gradgradcheck-diagnose"))
    for block in blocks:
        if block.output in probed:
            continue
        of, wrt = names[block.output], names[block.input]
        outcome.add(Finding(
            "GV141", Severity.ERROR,
            jac.mismatch_message(block, f"second derivative d(grad {of!r})/d({wrt!r}) is wrong",
                                 wrt, f"grad {of!r}"),
            input=wrt, location=ctx.location, hint=hint,
            data={**block.data, "of": of, "pattern": block.pattern}, pattern=block.pattern,
            evidence=Evidence(blocks=(jac.evidence(block, wrt, f"grad {of!r}"),))))
    if not outcome.findings:
        outcome.add(_undiagnosed(failure, names, view.outputs, ctx, hint))


def _undiagnosed(failure: str, names: list[str], outs: list[Any], ctx: CheckContext,
                 hint: str) -> Finding:
    """torch's gradgradcheck failed where the sampled blocks did not show it: name the block
    from its message. torch differentiates a function of (inputs..., incoming gradients...),
    whose outputs are the gradients of the inputs."""
    import re

    import torch

    where = re.search(r"output (\d+) with respect to input (\d+)", failure)
    subject = "gradgradcheck failed"
    data: dict[str, Any] = {"torch_message": failure[:2000]}
    if where:
        of, wrt = int(where.group(1)), int(where.group(2))
        grad = f"grad {names[of]!r}" if of < len(names) else f"gradient {of}"
        respect = (repr(names[wrt]) if wrt < len(names) else
                   f"the incoming gradient of output {wrt - len(names)}")
        subject = f"second derivative d({grad})/d({respect}) is wrong"
        data.update(of=names[of] if of < len(names) else None, wrt=respect)
    low = [o for o in outs if o.dtype not in (torch.float64, torch.complex128)]
    if low:
        hint = (f"the Function returns {str(low[0].dtype).removeprefix('torch.')} for float64 "
                "inputs, so finite differences of backward see that precision's round-off "
                "(as for gradcheck): support float64, or verify it through `reference:` and "
                "declare gradgradcheck under `expect:`")
    return Finding("GV141", Severity.ERROR, f"{subject} (torch's gradgradcheck; the sampled "
                   "Jacobian did not show where)", location=ctx.location, hint=hint, data=data)


def _probe_incoming_gradient(fn: Any, inputs: list[Any], grad_outputs: list[Any],
                             names: list[str], outcome: Outcome, ctx: CheckContext) -> set[int]:
    """The block d(grad)/d(grad_output), exactly and without finite differences.

    backward's result g(v) for incoming gradients v is linear in v, so for any w the scalar
    s = <w, g(v)> satisfies <ds/dv, v> = s (Euler's identity for linear maps). Double backward
    computes ds/dv; when backward detaches v (``grad.detach()``, ``grad.data``, numpy), ds/dv
    is None or zero while s is not. A nonzero gradient with no grad_fn at all breaks the graph
    (GV142). Returns the positions of the inputs reported.
    """
    import torch

    from gradverify.checks import _tensors as tk

    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    v = [g.detach().clone().requires_grad_(True) for g in grad_outputs]
    try:
        grads = torch.autograd.grad(fn(*leaves), leaves, v, create_graph=True, allow_unused=True)
    except Exception:  # noqa: BLE001 -- torch's gradgradcheck reports it
        return set()
    if any(g is not None and _once_node(g.grad_fn) for g in grads):
        raise _CalledOnce
    generator = ctx.generator("gradgradcheck-incoming")
    reported: set[int] = set()
    for i, g in enumerate(grads):
        if g is None or not bool(tk.dense(g).ne(0).any()):
            continue  # a zero gradient is constant in v: nothing to differentiate
        if not g.requires_grad:
            finding: Finding | None = _graph_broken(names[i], ctx)
        else:
            finding = _not_linear(g, v, names[i], generator, ctx)
        if finding is not None:
            reported.add(i)
            outcome.add(finding)
    return reported


class _CalledOnce(Exception):
    """A first-order gradient came out of a ``@once_differentiable`` backward."""


def _once_node(node: Any) -> bool:
    """The node ``@once_differentiable`` gives what its backward returns under
    create_graph=True (torch's ``DelayedError``: differentiating through it raises)."""
    name = node.name() if node is not None and hasattr(node, "name") else ""
    return name.rsplit("::", 1)[-1] in ("Error", "DelayedError")


def _graph_broken(name: str, ctx: CheckContext) -> Finding:
    """GV142: a nonzero gradient without grad_fn under create_graph=True depends on neither
    the incoming gradient nor the inputs."""
    return Finding(
        "GV142", Severity.ERROR,
        f"backward's gradient for {name!r} has no grad_fn under create_graph=True, "
        "so it does not depend on the incoming gradient or the inputs: backward breaks "
        "the graph (.data, .detach(), numpy), and double backward through it is "
        "silently zero",
        input=name, location=ctx.location, hint=_HINT)


def _not_linear(g: Any, v: list[Any], name: str, generator: Any,
                ctx: CheckContext) -> Finding | None:
    """GV144 when backward's gradient ``g`` fails Euler's identity <ds/dv, v> = s for
    s = <w, g> along a random w: backward detaches the incoming gradients ``v`` or uses them
    non-linearly. None when the identity holds, or when double backward raised (torch's
    gradgradcheck reports that)."""
    import torch

    from gradverify.checks import _calls as calls
    from gradverify.checks import _tensors as tk

    flat = g.to_dense() if tk.is_sparse(g) else g
    w = calls.randn_like(flat, generator)
    s = (w.conj() * flat).real.sum()
    try:
        dv = torch.autograd.grad(s, v, retain_graph=True, allow_unused=True)
    except Exception:  # noqa: BLE001 -- torch's gradgradcheck reports it
        return None
    along = sum(float((d.conj() * vj.detach()).real.sum())
                for d, vj in zip(dv, v, strict=False) if d is not None)
    expected = float(s.detach())
    scale = float((w.abs() * flat.detach().abs()).sum())
    if abs(along - expected) <= 1e-7 * scale + 1e-12:
        return None
    detached = all(d is None or not bool(d.ne(0).any()) for d in dv)
    what = ("does not depend on the incoming gradient under create_graph=True (backward "
            "detaches it: grad.detach(), grad.data or a numpy round trip)" if detached else
            "is not linear in the incoming gradient under create_graph=True (its "
            "derivative with respect to grad_output does not reproduce it)")
    return Finding(
        "GV144", Severity.ERROR, f"backward's gradient for {name!r} {what}",
        input=name, location=ctx.location,
        hint="use the incoming gradient itself in backward's formulas, never a detached "
             "copy, so that double backward (gradient penalties, Hessian-vector products) "
             "differentiates through it",
        data={"directional_derivative": along, "expected": expected,
              "detached": detached})


def _first_order(fn: Any, grad_outputs: list[Any]) -> Any:
    """x -> backward's gradients for every input at x (for a fixed incoming gradient)."""
    import torch

    def first(*xs: Any) -> tuple[Any, ...]:
        with torch.enable_grad():
            leaves = [x if x.requires_grad else x.detach().requires_grad_(True) for x in xs]
            grads = torch.autograd.grad(fn(*leaves), leaves, grad_outputs, create_graph=True,
                                        allow_unused=True)
        return tuple(g if g is not None else torch.zeros_like(x)
                     for g, x in zip(grads, xs, strict=False))

    return first


CHECK = GradgradcheckCheck()
