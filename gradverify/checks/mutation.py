"""mutation: in-place writes that autograd does not know about.

forward may write into an input only if it declares it with ``ctx.mark_dirty``; it must not
change a tensor after passing it to ``save_for_backward`` (autograd records versions only when
forward returns, so backward silently reads the changed value: reported when the gradient is
wrong because of it and right with the value saved); backward may write neither into a saved
tensor (a second backward, or another use of that tensor, would see the new values) nor into its
incoming gradient (autograd may hand the same tensor to other branches of the graph, whose
gradients would then be wrong). Detected with version counters and value snapshots.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from gradverify.case.inputs import Args
from gradverify.checks.base import Check, Consequence, Effect, Outcome, Trait
from gradverify.codes import Code, Symptom
from gradverify.results import Finding, Severity
from gradverify.targets.model import Capability, Schema

if TYPE_CHECKING:
    from gradverify.case.context import CheckContext
    from gradverify.checks._calls import Applied
    from gradverify.checks._tensors import Snapshot
    from gradverify.results import Location


CODES = (
    Code("GV221", "input-mutated-without-mark-dirty",
         "forward wrote into an input in place without ctx.mark_dirty.",
         "The caller's tensor changes behind autograd's back: other uses of it compute with the "
         "new values and its gradient is wrong.",
         "def forward(ctx, x):\n    return x.clamp_(min=0)",
         "Work on a copy, or call ctx.mark_dirty(x) and return x."),
    Code("GV222", "saved-tensor-mutated-in-backward",
         "backward wrote into a saved tensor in place.",
         "A second backward (retain_graph=True, gradient penalties) or the caller, when the "
         "tensor is an input or output, sees the changed values. Where neither shows (a "
         "kernel rewrites an intermediate with the same values each time) it is a note.",
         "x, = ctx.saved_tensors\nreturn grad * x.mul_(2)",
         "Use out-of-place ops: grad * (x * 2)."),
    Code("GV224", "saved-tensor-changed-in-forward",
         "forward changed a tensor in place after passing it to save_for_backward, and the "
         "gradient is wrong because of it: with the value it had when saved, it is right.",
         "autograd records saved tensors' versions only when forward returns, so it cannot "
         "see the change: backward silently reads the changed value, not the one saved. The "
         "formula looks right and gradcheck only says it does not match.",
         "t = torch.tanh(x)\nctx.save_for_backward(t)\nt.mul_(a)   # backward reads tanh(x) * a"
         "\nreturn t.clone()",
         "Save the tensor after the last in-place change, save a clone, or change a copy "
         "(t = t * a) instead of the saved tensor."),
    Code("GV223", "incoming-gradient-mutated",
         "backward wrote into its incoming gradient in place.",
         "Autograd may hand the same gradient tensor to other branches (an add passes one "
         "tensor to both of its inputs): their gradients silently change.",
         "return grad.mul_(2)",
         "Use out-of-place ops: return grad * 2."),
)


class MutationCheck(Check):
    name = "mutation"
    needs = MappingProxyType({
        Capability.OWN_AUTOGRAD: "autograd records the in-place operations of plain code itself"})
    default = True
    summary = "no in-place writes to inputs (without mark_dirty), saved tensors or gradients"
    codes = CODES
    traits = frozenset({Trait.CALLS_BACKWARD, Trait.DIFFERENTIATES, Trait.REUSES_INPUTS})
    consequences = (
        # A forward that writes into its input changes what every later run starts from:
        # the comparisons of these checks would blame layouts or precision for it.
        Consequence(Effect.SKIPS, frozenset({"GV221"}), frozenset({Trait.COMPARES_RUNS})),
        # gradcheck and gradgradcheck call forward and backward again on the tensors the
        # Function wrote into (liger-kernel's SwiGLU backward writes its gradients into the
        # saved inputs: gradcheck then saw "squares the incoming gradient").
        Consequence(Effect.MARKS, frozenset({"GV221", "GV222", "GV223"}), frozenset({
            Trait.JUDGES_GRADIENT, Trait.SECOND_ORDER, Trait.REUSES_INPUTS,
            Trait.COMPARES_RUNS}), earlier_too=True),
        # A backward that writes into a saved tensor or its incoming gradient makes the next
        # backward on the same graph (gradcheck's, determinism's) fail autograd's version
        # check.
        Consequence(Effect.MARKS, frozenset({"GV222", "GV223"}), symptom=Symptom.REFUSED_WRITE,
                    earlier_too=True))

    def run(self, ctx: CheckContext) -> Outcome:
        import torch

        from gradverify.checks import _calls as calls
        from gradverify.checks import _tensors as tk

        outcome = Outcome()
        args = ctx.args("double")
        # Non-leaf clones, so a Function may legally write into them (with mark_dirty).
        values = [v.clone() if isinstance(v, torch.Tensor) and v.requires_grad else v
                  for v in args.values]
        tensors = {i: v for i, v in enumerate(values) if isinstance(v, torch.Tensor)}
        before = tk.Snapshot.of(list(tensors.values()))
        with tk.record_saved() as saved:
            applied = calls.apply(ctx.info, Args(args.names, values, args.differentiable),
                                  protect_inputs=False)
        _inputs_written(ctx, applied, before, list(tensors), outcome)
        if applied.node is None or calls.no_own_backward(ctx.info, applied):
            outcome.summary = "forward checked; no differentiable output for backward"
            return outcome
        changed_after_save = _saved_then_changed(ctx, outcome)
        stored, grad_tensors = _backward_writes(ctx, applied, saved.tensors, outcome)
        outcome.summary = (f"{len(tensors)} input tensor(s), {stored} saved, "
                           f"{grad_tensors} incoming gradient(s) unchanged"
                           + (f"; {changed_after_save} saved tensor(s) changed after saving, "
                              "without effect on the gradient" if changed_after_save else "")
                           if not _what_failed(outcome) else _what_failed(outcome))
        return outcome


def _inputs_written(ctx: CheckContext, applied: Applied, before: Snapshot,
                    positions: list[int], outcome: Outcome) -> None:
    """GV221: the input tensors (at ``positions``, snapshot ``before`` the call) that forward
    changed without declaring them with ctx.mark_dirty."""
    # mark_dirty rebases the input's history onto this Function: the input comes back as
    # an output whose grad_fn is the Function's ctx (ctx.dirty_tensors is cleared by then).
    dirty = {id(o) for _, o in applied.tensors
             if applied.node is not None and o.grad_fn is applied.node}
    for k in before.changed():
        pos = positions[k]
        if id(applied.args.values[pos]) in dirty:
            continue
        name = applied.args.names[pos]
        if ctx.info.has(Capability.SCHEMA):
            if name not in ctx.info.need(Schema).mutates:
                outcome.add(_undeclared(ctx, name))
            continue
        outcome.add(Finding(
            "GV221", Severity.ERROR,
            f"forward writes into input {name!r} in place without ctx.mark_dirty: the "
            "caller's tensor changes behind autograd's back", input=name,
            location=ctx.forward_location,
            hint=f"work on a copy ({name}.clone()), or call ctx.mark_dirty({name}) and return "
                 "it as an output"))


def _undeclared(ctx: CheckContext, name: str) -> Finding:
    """GV221 for a custom op: a write its schema does not declare."""
    return Finding(
        "GV221", Severity.ERROR,
        f"the op writes into its argument {name!r} in place, but its schema does not declare "
        "it: torch.compile and functionalization assume the argument is unchanged",
        input=name, location=ctx.forward_location,
        hint=f"declare it (@custom_op(..., mutates_args=({name!r},)), i.e. `Tensor(a!) {name}` "
             f"in the schema), or work on a copy ({name}.clone())")


def _backward_writes(ctx: CheckContext, applied: Applied, saved: list[Any],
                     outcome: Outcome) -> tuple[int, int]:
    """Run backward once with snapshots of what it must not write into: the saved tensors
    (save_for_backward and ctx attributes; GV222) and its incoming gradients (GV223).
    Returns how many saved tensors and incoming gradients were watched."""
    import torch

    from gradverify.checks import _calls as calls
    from gradverify.checks import _saved_changes as saved_changes
    from gradverify.checks import _tensors as tk

    stored = [t for t in saved if isinstance(t, torch.Tensor)]
    stored += [t for _, t in tk.ctx_tensors(applied.node)]
    saved_snapshot = tk.Snapshot.of(stored)
    grads = calls.random_grads(applied, ctx.generator("mutation"))
    grad_tensors = [g for g in grads if isinstance(g, torch.Tensor)]
    grad_snapshot = tk.Snapshot.of(grad_tensors)
    # where each watched tensor was first written: the line of the in-place op in backward
    written = saved_changes.writes_during(ctx.info, [*stored, *grad_tensors],
                                   lambda: calls.raw_backward(ctx.info, applied, grads))
    names = _names(stored, applied.args.values, applied.args.names, applied)
    changed = saved_snapshot.changed()
    second = _second_backward(ctx) if changed else None
    for k in changed:
        outcome.add(_saved_written(ctx, names[k], second, written[k]))
    outputs = [j for j, g in enumerate(grads) if isinstance(g, torch.Tensor)]
    for k in grad_snapshot.changed():
        outcome.add(Finding(
            "GV223", Severity.ERROR,
            f"backward writes into its incoming gradient for output {outputs[k]} in place: "
            "autograd may hand that same tensor to other branches, whose gradients then "
            "change", output=outputs[k], location=written[len(stored) + k] or ctx.location,
            hint="use out-of-place ops on the incoming gradient (grad * 2, not grad.mul_(2))"))
    return len(stored), len(grad_tensors)


def _second_backward(ctx: CheckContext) -> str | None:
    """What a second backward on the same graph (``retain_graph=True``) shows after the first
    one wrote into a saved tensor: its gradients differ, or it raises; None when it gives the
    same gradients (the write is the same each time)."""
    from gradverify.checks import _calls as calls
    from gradverify.checks import _compare as cmp

    args = ctx.args("double")
    diff = args.diff_positions
    run = calls.apply(ctx.info, args)
    grads = calls.random_grads(run, ctx.generator("mutation-second"))
    try:
        first = calls.engine_grads(run, grads, diff)
        again = calls.engine_grads(run, grads, diff)
    except Exception as exc:  # noqa: BLE001 -- user code, or autograd's version check
        return f"a second backward (retain_graph=True) raises {calls.describe_exception(exc)}"
    wrong = [args.names[diff[k]] for k, (a, b) in enumerate(zip(first, again, strict=False))
             if not cmp.grads_close(a, b, atol=max(1e-10, ctx.tolerance.nondet_tol))]
    if not wrong:
        return None
    return (f"a second backward (retain_graph=True) gives another gradient for {wrong[0]!r}")


def _saved_written(ctx: CheckContext, name: str, second: str | None,
                   where: Location | None) -> Finding:
    """GV222 for a saved tensor backward wrote into (``name``, as ``_names`` gives it): an
    error where a consequence is shown (the caller's input or output changed, or a second
    backward differs), else a note: the write repeats itself and the tensor is not exposed."""
    caller = name.startswith(("input", "output"))
    hint = "use out-of-place ops on saved tensors (x * y, not x.mul_(y))"
    located = where or ctx.location
    if caller:
        return Finding(
            "GV222", Severity.ERROR,
            f"backward writes into the saved tensor {name} in place: the caller's tensor "
            "changes" + (f", and {second}" if second else ""),
            input=name.split("'")[1] if name.startswith("input") else None,
            location=located, hint=hint)
    if second:
        return Finding("GV222", Severity.ERROR,
                       f"backward writes into the saved tensor {name} in place: {second}",
                       location=located, hint=hint)
    return Finding(
        "GV222", Severity.INFO,
        f"backward writes into the saved tensor {name} in place; the tensor is not the "
        "caller's and a second backward gives the same gradients, so nothing shows the write: "
        "it becomes a bug if backward's writes ever depend on what the tensor held",
        location=located, hint=hint)


def _what_failed(outcome: Outcome) -> str:
    what = {"GV221": "forward writes into an input", "GV224": "forward changes a saved tensor",
            "GV222": "backward writes into a saved tensor",
            "GV223": "backward writes into its incoming gradient"}
    return "; ".join(dict.fromkeys(what[f.code] for f in outcome.findings
                                   if f.code in what and f.severity is Severity.ERROR))


def _saved_then_changed(ctx: CheckContext, outcome: Outcome) -> int:
    """GV224: tensors forward changes after save_for_backward, when that makes the gradient
    wrong. Proven by saving them frozen (cloned at the call) and checking both gradients
    against a finite difference along a random direction: an error only when the frozen
    gradient is right and the real one is not. Returns how many changed without effect."""
    from gradverify.checks import _calls as calls
    from gradverify.checks import _saved_changes as saved_changes

    # an output saved and then changed is read back as forward returns it: by design
    found = [f for f in saved_changes.saved_then_changed(ctx.info, ctx.args("double"))
             if not f.label.startswith("output")]
    if not found:
        return 0
    args = ctx.args("double")
    diff = args.diff_positions
    applied = calls.apply(ctx.info, args)
    grads = calls.random_grads(applied, ctx.generator("mutation-saved"))
    actual = calls.engine_grads(applied, grads, diff)
    with saved_changes.frozen_saves(ctx.info, found):
        frozen_run = calls.apply(ctx.info, ctx.args("double"))
    frozen = calls.engine_grads(frozen_run, grads, diff)
    from gradverify.checks import _compare as cmp

    affected = [args.names[diff[k]] for k, (a, b) in enumerate(zip(actual, frozen, strict=False))
                if not cmp.grads_close(a, b)]
    if not affected:
        return len(found)
    numeric, directions = saved_changes.directional_difference(
        ctx.info, ctx.args("double"), grads, ctx.generator("mutation-direction"),
        ctx.tolerance.eps)
    right_frozen = saved_changes.agrees(frozen, directions, numeric)
    right_actual = saved_changes.agrees(actual, directions, numeric)
    if right_actual or not right_frozen:
        # written for the changed value; or wrong either way: gradcheck reports the gradient,
        # and nothing shows that the change is its cause
        return len(found)
    first = found[0]
    inputs = ", ".join(repr(n) for n in affected)
    outcome.add(Finding(
        "GV224", Severity.ERROR,
        f"{first.describe()}; the gradient for {inputs} is wrong because of it: with the value "
        "it had when saved, the gradient is right",
        input=affected[0] if len(affected) == 1 else None,
        location=first.changed_at or first.saved_at or ctx.forward_location,
        hint=first.hint(),
        data={"saved_at": _text(first.saved_at), "changed_at": _text(first.changed_at),
              "tensor": first.label}))
    return 0


def _text(location: Location | None) -> str | None:
    """A place as a finding's (JSON-safe) data holds it: ``file:line``."""
    return str(location) if location else None


def _names(stored: list, values: list, arg_names: list[str], applied: Applied) -> list[str]:
    from gradverify.checks import _tensors as tk

    inputs = {n: v for n, v in zip(arg_names, values, strict=False) if tk.is_tensor(v)}
    outputs = dict(applied.tensors)
    labels = {"input": "input {!r}", "output": "output {}", "intermediate": "(an intermediate)"}
    return [labels[kind].format(name)
            for kind, name in (tk.classify(t, inputs, outputs, same_shape=False) for t in stored)]


CHECK = MutationCheck()
