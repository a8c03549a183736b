"""needs_input_grad: backward must work when only some inputs require grad.

For each subset of the differentiable inputs (every subset up to 4 of them; else each alone,
each left out, and all), forward runs with only that subset requiring grad and backward is
called directly on its ctx. It must not raise, must return a gradient for every input that
needs one, equal to the one computed with every input requiring grad. A gradient returned for
an input that does not need one is wasted work (a warning). forward must also run with no input
requiring grad and under ``torch.no_grad()``, and give the same outputs.
"""
from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from gradverify.checks.base import Check, Outcome, Trait
from gradverify.codes import Code, Symptom
from gradverify.results import CheckResult, Finding, Location, Severity
from gradverify.targets.model import Capability
from gradverify.targets.op_calls import needs_input_grad_index

if TYPE_CHECKING:
    from gradverify.case.context import CheckContext
    from gradverify.case.inputs import Args

EXHAUSTIVE_MAX = 4
"""Up to this many differentiable inputs, every subset is tried (at most 15 runs)."""


def subsets(positions: list[int]) -> list[tuple[int, ...]]:
    """The requires-grad subsets to try, the full set first."""
    n = len(positions)
    full = tuple(positions)
    if n <= EXHAUSTIVE_MAX:
        chosen = [c for r in range(n, 0, -1) for c in itertools.combinations(positions, r)]
    else:
        alone = [(p,) for p in positions]
        left_out = [tuple(q for q in positions if q != p) for p in positions]
        chosen = [full, *alone, *left_out]
    return chosen


CODES = (
    Code("GV201", "backward-raises-with-partial-grad",
         "backward raised when only some inputs require grad.",
         "Fine-tuning with frozen layers, or any input that does not require grad, crashes "
         "training: usually a variable assigned only inside `if ctx.needs_input_grad[i]:` and "
         "used for another input.",
         "if ctx.needs_input_grad[0]:\n    gx = grad @ w.t()\nif ctx.needs_input_grad[1]:\n"
         "    gw = x.t() @ grad\nreturn gx, gw   # UnboundLocalError when only w requires grad",
         "Initialise every gradient to None first, and compute what each needs in its own branch."),
    Code("GV202", "gradient-missing",
         "backward returned None for an input that requires grad.",
         "That input silently gets no gradient: its parameters never train. Usually a wrong "
         "index into ctx.needs_input_grad.",
         "if ctx.needs_input_grad[0]:   # should be [1] for weight\n    grad_weight = ...",
         "Use the position of the input in forward's signature (after ctx).",
         # "None for an input that needs a gradient": a Function declared not to return the
         # gradient (a relevance rule) returns None on purpose
         reports=frozenset({Symptom.ASSUMES_GRADIENT})),
    Code("GV203", "gradient-depends-on-requires-grad",
         "An input's gradient changes depending on which other inputs require grad.",
         "Gradients must not depend on what else is being trained; this usually means the "
         "needs_input_grad branches compute shared terms differently.",
         "gx = grad * w if ctx.needs_input_grad[1] else grad",
         "Compute each gradient from the saved tensors alone."),
    Code("GV204", "gradient-not-needed",
         "backward computed a gradient for an input that does not require grad.",
         "Autograd throws it away: wasted compute and memory on every step.",
         "return grad @ w.t(), x.t() @ grad   # w is frozen",
         "Guard each gradient with `if ctx.needs_input_grad[i]:`."),
    Code("GV205", "forward-fails-without-grad",
         "forward raised when no input requires grad.",
         "Inference calls forward on tensors that do not require grad.",
         "ctx.save_for_backward(x.grad_fn.next_functions)",
         "Do not depend on requires_grad or grad_fn in forward."),
    Code("GV206", "forward-fails-under-no-grad",
         "forward raised under torch.no_grad().",
         "Evaluation loops run under torch.no_grad() or torch.inference_mode().",
         "", "Do not depend on grad mode in forward."),
    Code("GV207", "output-depends-on-grad-mode",
         "forward computed different outputs when no input requires grad.",
         "Training and inference would disagree.",
         "", "Compute the same values whatever requires grad."),
)


UNNEEDED = "unneeded_gradients"
"""Data key of a row: the inputs backward computed a gradient for while they needed none."""


class NeedsInputGradCheck(Check):
    name = "needs_input_grad"
    needs = MappingProxyType({Capability.OWN_BACKWARD: ""})
    default = True
    summary = "backward handles inputs that do not require grad; forward runs without grad"
    codes = CODES
    traits = frozenset({Trait.CALLS_BACKWARD, Trait.DIFFERENTIATES, Trait.REUSES_INPUTS})

    def across_cases(self, results: Sequence[CheckResult]) -> list[Finding]:
        return wasted_work_note(results)

    def run(self, ctx: CheckContext) -> Outcome:
        outcome = Outcome()
        base = ctx.args("double")
        diff = base.diff_positions
        reference = self._no_grad_forward(ctx, outcome)
        if not diff:
            outcome.summary = "forward runs without grad (no input requires grad)"
            return outcome
        tried = subsets(diff)
        full_grads: list[Any] | None = None
        for subset in tried:
            attempt = self._backward_with(ctx, base, subset, diff, outcome)
            if attempt is None:
                continue
            if subset == tuple(diff):
                full_grads = list(attempt.raw)
            self._judge_gradients(ctx, attempt, full_grads, outcome)
        if reference is not None:
            self._same_outputs(ctx, reference, outcome)
        _one_wasted_work_finding(outcome)
        outcome.summary = (f"{len(tried)} requires-grad subset(s) of {len(diff)} differentiable "
                           "input(s); forward without grad and under no_grad")
        return outcome

    @staticmethod
    def _backward_with(ctx: CheckContext, base: Args, subset: tuple[int, ...], diff: list[int],
                       outcome: Outcome) -> _Attempt | None:
        """backward called directly with only ``subset`` requiring grad: GV201 if it raises.
        None when there is no gradient to judge (no ctx to call it on, or it raised)."""
        from gradverify.checks import _calls as calls

        args = base.clone(requires_grad=subset)
        applied = calls.apply(ctx.info, args)
        if applied.node is None or calls.no_own_backward(ctx.info, applied):
            return None
        grads = calls.random_grads(applied, ctx.generator("needs_input_grad"))
        label = _label(args.names, subset, diff)
        try:
            raw = calls.raw_backward(ctx.info, applied, grads)
        except Exception as exc:  # noqa: BLE001 -- user code
            outcome.add(Finding(
                "GV201", Severity.ERROR,
                f"with {label}, backward raised {calls.describe_exception(exc)}",
                input=args.names[subset[0]],
                location=calls.user_location(exc, ctx.info) or ctx.location,
                hint="a variable is probably set only inside `if ctx.needs_input_grad[i]:` "
                     "and used for another input; compute what each gradient needs in its "
                     "own branch", data={"requires_grad": [args.names[i] for i in subset]}))
            return None
        return _Attempt(args, subset, label, grads, raw)

    @staticmethod
    def _judge_gradients(ctx: CheckContext, attempt: _Attempt, full_grads: list[Any] | None,
                         outcome: Outcome) -> None:
        """Each input's gradient: present and unchanged where it requires grad, absent (or an
        incoming gradient passed through) where it does not."""
        for pos in range(len(attempt.args.values)):
            value = attempt.raw[pos] if pos < len(attempt.raw) else None
            if pos in attempt.subset:
                finding = _needed_gradient(ctx, attempt, pos, value, full_grads)
            else:
                finding = _unneeded_gradient(ctx, attempt, pos, value, outcome.findings)
            if finding is not None:
                outcome.add(finding)

    @staticmethod
    def _no_grad_forward(ctx: CheckContext, outcome: Outcome) -> list[Any] | None:
        """forward with no input requiring grad, and under torch.no_grad(); returns outputs."""
        import torch

        from gradverify.checks import _calls as calls

        outputs = None
        try:
            outputs = calls.apply(ctx.info, ctx.args("double").clone(requires_grad=())).outputs
        except Exception as exc:  # noqa: BLE001 -- user code
            outcome.add(Finding(
                "GV205", Severity.ERROR,
                f"forward raised {calls.describe_exception(exc)} when no input requires grad",
                location=calls.user_location(exc, ctx.info) or ctx.forward_location,
                hint="inference calls forward with no input requiring grad: do not assume "
                     "x.requires_grad or x.grad_fn in forward"))
        try:
            with torch.no_grad():
                calls.apply(ctx.info, ctx.args("double"))
        except Exception as exc:  # noqa: BLE001 -- user code
            outcome.add(Finding(
                "GV206", Severity.ERROR,
                f"forward raised {calls.describe_exception(exc)} under torch.no_grad()",
                location=calls.user_location(exc, ctx.info) or ctx.forward_location,
                hint="evaluation loops run under torch.no_grad(); forward must not depend on "
                     "grad mode"))
        return outputs

    @staticmethod
    def _same_outputs(ctx: CheckContext, reference: list[Any], outcome: Outcome) -> None:
        import torch

        from gradverify.checks import _calls as calls
        from gradverify.checks import _compare as cmp

        with_grad = calls.apply(ctx.info, ctx.args("double")).outputs
        for j, (a, b) in enumerate(zip(with_grad, reference)):
            if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and \
                    not cmp.grads_close(a, b, atol=ctx.tolerance.nondet_tol or 1e-12, rtol=1e-9):
                outcome.add(Finding(
                    "GV207", Severity.ERROR,
                    f"output {j} differs when no input requires grad", output=j,
                    location=ctx.forward_location,
                    hint="forward must compute the same values whatever requires grad"))


@dataclass
class _Attempt:
    """backward called with one requires-grad subset, and what it returned."""

    args: Args
    subset: tuple[int, ...]
    label: str
    """``only 'x' requiring grad``, for messages."""
    grads: list[Any]
    """The incoming gradients backward was called with."""
    raw: tuple[Any, ...]
    """backward's own return value."""


def _needed_gradient(ctx: CheckContext, attempt: _Attempt, pos: int, value: Any,
                     full_grads: list[Any] | None) -> Finding | None:
    """For an input that requires grad: GV202 when backward returned None, GV203 when the
    gradient differs from the one computed with every input requiring grad."""
    import torch

    from gradverify.checks import _compare as cmp
    from gradverify.checks import _jacobian as jac

    name = attempt.args.names[pos]
    if value is None:
        return Finding(
            "GV202", Severity.ERROR,
            f"with {attempt.label}, backward returned None for {name!r}, which needs a "
            "gradient", input=name, location=ctx.location,
            hint=f"check the index used with ctx.needs_input_grad for {name!r} "
                 f"(position {pos} of forward's inputs)")
    if full_grads is None or pos >= len(full_grads) or not isinstance(value, torch.Tensor) \
            or cmp.grads_close(value, full_grads[pos]):
        return None
    full = full_grads[pos]
    diff_value, where = cmp.max_difference(
        value.sum_to_size(full.shape) if value.shape != full.shape else value, full)
    return Finding(
        "GV203", Severity.ERROR,
        f"with {attempt.label}, backward's gradient for {name!r} differs from the one "
        f"computed when every input requires grad (by {diff_value:.3g} at "
        f"{jac.format_index(name, where)})", input=name,
        location=ctx.location,
        hint="the gradient must not depend on which other inputs require "
             "grad; check the needs_input_grad branches")


def _unneeded_gradient(ctx: CheckContext, attempt: _Attempt, pos: int, value: Any,
                       findings: list[Finding]) -> Finding | None:
    """For a floating input that does not require grad: GV204 (once per input) when backward
    computed a gradient for it rather than None or an incoming gradient passed through."""
    import torch

    name = attempt.args.names[pos]
    x = attempt.args.values[pos]
    if value is None or not isinstance(x, torch.Tensor) \
            or not (x.is_floating_point() or x.is_complex()) \
            or _passes_through(value, attempt.grads):
        return None
    if any(f.code == "GV204" and f.input == name for f in findings):
        return None
    guard = f"if ctx.needs_input_grad{needs_input_grad_index(ctx.info, pos)}:"
    return Finding(
        "GV204", Severity.INFO,
        f"with {attempt.label}, backward computed a gradient for {name!r}, which does "
        "not require grad (autograd drops it: wasted work)", input=name,
        location=ctx.location,
        hint=f"guard it with `{guard}`", data={"position": pos, "guard": guard})


def _one_wasted_work_finding(outcome: Outcome) -> None:
    """Gradients computed for inputs that did not need them are a habit of backward (no
    needs_input_grad guards), a performance note rather than a defect: kept as the row's data,
    said once per spec by ``across_cases``, not per case."""
    wasted = sorted((f for f in outcome.findings if f.code == "GV204"),
                    key=lambda f: f.data.get("position", 0))
    outcome.findings = [f for f in outcome.findings if f.code != "GV204"]
    if wasted:
        outcome.data[UNNEEDED] = [{"input": f.input, "guard": f.data["guard"],
                                   "location": str(f.location) if f.location else None}
                                  for f in wasted]


def wasted_work_note(results: Sequence[CheckResult]) -> list[Finding]:
    """One GV204 note naming every input that got a gradient it did not need, in any case."""
    seen: dict[str, Mapping[str, Any]] = {}
    for row in results:
        for item in row.data.get(UNNEEDED, ()):
            seen.setdefault(item["input"], item)
    if not seen:
        return []
    items = list(seen.values())
    names = ", ".join(repr(i["input"]) for i in items)
    guards = ", ".join(f"`{i['guard']}`" for i in items)
    where = items[0]["location"]
    many = len(items) > 1
    return [Finding(
        "GV204", Severity.INFO,
        f"backward computes {'gradients' if many else 'a gradient'} for {names} even when "
        f"{'they do' if many else 'it does'} not require grad (autograd drops "
        f"{'them' if many else 'it'}): a performance note, wasted work on every step where "
        f"{'they are' if many else 'it is'} frozen",
        input=items[0]["input"], location=Location.parse(where) if where else None,
        hint=f"guard {'each gradient' if many else 'it'}: {guards}",
        data={"inputs": [i["input"] for i in items]})]


def _passes_through(value: Any, grads: list[Any]) -> bool:
    """backward returned an incoming gradient as it is, or a view of it: that costs nothing,
    so it is no wasted work (``return g, g`` of an in-place add)."""
    from gradverify.checks import _tensors as tk

    return any(tk.is_tensor(g) and (value is g or tk.same_storage(value, g)) for g in grads)


def _label(names: list[str], subset: tuple[int, ...], diff: list[int]) -> str:
    if len(subset) == len(diff):
        return "every input requiring grad"
    shown = ", ".join(repr(names[i]) for i in subset)
    return f"only {shown} requiring grad"


CHECK = NeedsInputGradCheck()
