"""What a failed gradcheck says: a finding per wrong gradient (the mismatching Jacobian blocks
gradverify computes itself, at the line of backward that returns each, with its pattern and
evidence), what torch's message names where the blocks show nothing, what the Function raised
inside gradcheck, and a backward that is not linear in its incoming gradient. Imports torch
inside (a helper module: gradcheck imports it in ``run``)."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

from gradverify.checks import _defect as defect
from gradverify.checks.base import Outcome
from gradverify.results import Evidence, Finding, Severity

if TYPE_CHECKING:
    from gradverify.case.context import CheckContext
    from gradverify.checks._calls import DifferentiableView
    from gradverify.checks._jacobian import Block
    from gradverify.checks._probes import Nonlinear

IGNORES_INCOMING = "not multiplied by the incoming gradient"  # a pattern of gradcheck's GV121
AS_TORCH_CALLS_IT = "as torch's gradcheck calls it, forward again on the same input tensors: "
"""Before torch's message where only that call failed (``_calls.on_the_same_tensors``)."""


def mismatch(ctx: CheckContext, view: DifferentiableView, failure: str,
              nonlinear: list[Nonlinear], outcome: Outcome) -> None:
    """torch's gradcheck failed: a finding per wrong gradient, at the line of backward
    that returns it, and the dtype of the outputs when that is the cause."""
    import torch

    from gradverify.checks import _jacobian as jac

    blocks = jac.diagnose(view.fn, view.inputs, atol=ctx.tolerance.atol,
                          rtol=ctx.tolerance.rtol, eps=ctx.tolerance.eps,
                          generator=ctx.generator("gradcheck-diagnose"))
    hint = defect.saved_then_changed_hint(ctx)
    _blocks(ctx, view, blocks, nonlinear, hint, outcome)
    if not blocks:
        _undiagnosed(ctx, view, failure, nonlinear, hint, outcome)
    defect.at_return_lines(ctx, outcome)  # each wrong gradient at the line returning it
    low = [o for o in view.outputs if o.dtype not in (torch.float64, torch.complex128)]
    if low:
        outcome.add(Finding(
            "GV126", Severity.ERROR,
            f"the Function returned {str(low[0].dtype)[6:]} for float64 inputs, so the "
            "comparison is against that precision's round-off",
            location=ctx.forward_location,
            hint="support float64, or verify the kernel through a plain-PyTorch "
                 "`reference: mod:fn` in the spec"))
    outcome.summary = (f"Jacobian mismatch ({outcome.mode} mode): "
                       f"{_failed_inputs(outcome)}")

def _blocks(ctx: CheckContext, view: DifferentiableView, blocks: list[Block],
            nonlinear: list[Nonlinear], hint: str | None, outcome: Outcome) -> None:
    """A finding per mismatching block; inputs whose gradient is also not linear in the
    incoming gradient get that as their pattern (one root cause, said once)."""
    from gradverify.checks import _jacobian as jac

    by_input = {item.input: item for item in nonlinear}
    reported = set()
    for block in blocks:
        out = view.applied.differentiable[block.output]  # the output's own index
        name = view.names[block.input]
        if block.only_kinks or block.undefined_nearby:
            why = ("forward is not finite within eps of the inputs (its finite differences "
                   "are NaN or inf)" if block.undefined_nearby else
                   "left and right differences disagree")
            outcome.add(Finding(
                "GV122", Severity.WARNING,
                jac.mismatch_message(block, f"the inputs sit on a non-differentiable point "
                                     f"for {name!r} ({why})", name, f"output {out}"),
                input=name, output=out, location=ctx.location,
                hint="choose an `init` in the spec that keeps inputs away from kinks and ties "
                     "(e.g. uniform with low: 0.1, or distinct values)",
                data=dict(block.data), evidence=_evidence(block, name, f"output {out}")))
            continue
        if block.input in by_input:
            kind = by_input[block.input].kind
            block.pattern = (IGNORES_INCOMING
                             if "does not depend" in kind or "does not scale" in kind
                             else f"not linear in the incoming gradient: {kind}")
        reported.add(block.input)
        outcome.add(Finding(
            "GV121", Severity.ERROR,
            jac.mismatch_message(block, f"gradient for {name!r} (output {out}) is "
                                 "wrong", name, f"output {out}"),
            input=name, output=out, location=ctx.location,
            hint=hint or jac.pattern_hint(block.pattern, name),
            data={**block.data, "pattern": block.pattern}, pattern=block.pattern,
            evidence=_evidence(block, name, f"output {out}")))
    for item in nonlinear:
        if item.input not in reported:
            outcome.add(nonlinear_finding(item, view.names, ctx))

def _undiagnosed(ctx: CheckContext, view: DifferentiableView, failure: str,
                 nonlinear: list[Nonlinear], hint: str | None, outcome: Outcome) -> None:
    """torch failed but the sampled Jacobian did not show where: name the input from
    torch's message, else by checking each input alone. (Inputs whose gradient is not
    linear in the incoming gradient are reported already: that is the cause.)"""
    if nonlinear:
        return
    from gradverify.checks import _jacobian as jac

    first = failure.strip().splitlines()[0] if failure.strip() else "mismatch"
    # torch names inputs by index among the differentiable ones: give the name.
    where = re.search(r"output (\d+) with respect to input (\d+)", failure)
    index = int(where.group(2)) if where else jac.failing_input(view.fn, view.inputs,
                                                                 ctx.tolerance)
    name = view.names[index] if index is not None and index < len(view.names) else None
    output = int(where.group(1)) if where else None
    complex_case = any(t.is_complex() for t in [*view.inputs, *view.outputs])
    subject = (f"gradient for {name!r}{f' (output {output})' if output is not None else ''} "
               "is wrong" if name else "gradcheck failed")
    outcome.add(Finding(
        "GV121", Severity.ERROR, f"{subject}: {first}", input=name, output=output,
        location=ctx.location,
        hint=hint or ("complex gradients follow PyTorch's convention: backward returns "
                      "grad * conj(df/dz) for a holomorphic f (check for a missing .conj())"
                      if complex_case else
                      "the mismatch is spread thinly or confined to elements the sampled "
                      "Jacobian did not reach; run with --slow and -v for full blocks"),
        data={"torch_message": failure[:2000]}))


def raised(exc: BaseException, ctx: CheckContext, n_outputs: int, *,
                    rerun: bool = False) -> Finding:
    """The Function raised inside gradcheck: say which of its methods, and why it may have
    (``rerun``: called as bare torch calls it, on the same input tensors every time)."""
    from gradverify.checks import _calls as calls
    from gradverify.checks import _probes as probes

    where = probes.raised_in(exc, ctx.info)
    location = calls.user_location(exc, ctx.info)
    if rerun:
        return Finding("GV121", Severity.ERROR,
                       f"{AS_TORCH_CALLS_IT}it raised {calls.describe_exception(exc)}",
                       location=location or ctx.forward_location,
                       hint="forward or backward writes into its input, so bare "
                            "torch.autograd.gradcheck fails the same way; make them work on a "
                            "copy (see mutation)")
    if where == "backward":
        hint = ("gradcheck calls backward once per output element with the other outputs' "
                "gradients undefined (zeros, or None after set_materialize_grads(False)); "
                "see undefined_grad" if n_outputs > 1 else
                "gradcheck calls backward with one-hot incoming gradients; fix the line shown")
        return Finding("GV121", Severity.ERROR,
                       f"backward raised {calls.describe_exception(exc)} while gradcheck "
                       "computed the Jacobian", location=location or ctx.location, hint=hint)
    if where in ("forward", "setup_context"):
        return Finding("GV121", Severity.ERROR,
                       f"{where} raised {calls.describe_exception(exc)} on inputs that gradcheck "
                       f"moved by eps={ctx.tolerance.eps:g} (finite differences)",
                       location=location or ctx.forward_location,
                       hint="forward must accept inputs near the spec's values; if it checks "
                            "exact values (sortedness, ties), keep the spec's inputs away from "
                            "those boundaries")
    return Finding("GV121", Severity.ERROR,
                   f"gradcheck could not compare Jacobians: {calls.describe_exception(exc)}",
                   location=location or ctx.location,
                   hint="the Function's outputs or gradients could not be compared; see the "
                        "message")


def nonlinear_finding(item: Nonlinear, names: list[str], ctx: CheckContext) -> Finding:
    from gradverify.checks import _jacobian as jac
    from gradverify.checks._probes import SCALE

    name = names[item.input]
    return Finding(
        "GV127", Severity.ERROR,
        f"the gradient for {name!r} is not linear in the incoming gradient: {item.kind}; "
        f"backward({SCALE:g}*g) differs from {SCALE:g}*backward(g) by {item.error:.3g} at "
        f"{jac.format_index(name, item.index)} (largest value {item.scale:.3g})",
        input=name, location=ctx.location,
        hint=jac.pattern_hint("not linear in the incoming gradient", name),
        data={"kind": item.kind, "max_error": item.error, "index": list(item.index)})


def _failed_inputs(outcome: Outcome) -> str:
    names = []
    for finding in outcome.findings:
        if finding.severity == Severity.ERROR and finding.input and finding.input not in names:
            names.append(finding.input)
    return f"gradient for {', '.join(repr(n) for n in names)}" if names else "see findings"


def _evidence(block: Block, name: str, output: str) -> Evidence:
    from gradverify.checks import _jacobian as jac

    return Evidence(blocks=(jac.evidence(block, name, output),))
