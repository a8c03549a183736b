"""gradcheck: first-order Jacobians from backward against finite differences, in float64.

The verdict is ``torch.autograd.gradcheck``'s; on failure gradverify computes the mismatching
(output, input) blocks itself to name the input, the worst element and the pattern.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from gradverify.checks.base import Option, Outcome
from gradverify.codes import Code
from gradverify.report.results import Finding, Severity

if TYPE_CHECKING:
    from gradverify.checks._jacobian import Block
    from gradverify.context import CheckContext

SLOW_MODE_MAX_ENTRIES = 65_536
"""Automatic mode: slow (full Jacobians) while numel(inputs) x numel(outputs) is at most this."""

SMALLEST_SLOW_MAX_ENTRIES = 1_048_576
"""When every case of a spec is above SLOW_MODE_MAX_ENTRIES, the smallest one is also checked
in slow mode if its Jacobian has at most this many entries (fast mode can miss errors confined
to a few elements)."""

MODES = ("auto", "slow", "fast")

_HINTS = {
    "zero gradient": "backward returns zeros or None for {name!r} although the output depends on "
                     "it: check the order of the returned tuple and the needs_input_grad index",
    "sign flipped": "a sign error in the formula for {name!r}",
    "off by a constant factor": "a missing or extra constant in the formula for {name!r} (a 2 from "
                                "d(x**2), a 1/N from a mean, a scale saved on ctx)",
    "not multiplied by the incoming gradient": "multiply by the incoming gradient: return "
                                               "grad_output * (local derivative) for {name!r}",
    "transposed": "a transpose is missing or extra in the gradient of {name!r} (square shapes "
                  "made it fit; use distinct sizes)",
    "only rows": "an indexing or boundary error: only some rows of {name!r} get a wrong gradient",
}


def resolve_mode(requested: str, entries: int) -> str:
    if requested in ("slow", "fast"):
        return requested
    return "slow" if entries <= SLOW_MODE_MAX_ENTRIES else "fast"


def pattern_hint(pattern: str | None, name: str) -> str:
    for key, hint in _HINTS.items():
        if pattern and pattern.startswith(key):
            return hint.format(name=name)
    return (f"compare backward's formula for {name!r} with the math; run with -v to see the "
            "Jacobian blocks")


def mismatch_message(block: Block, subject: str, wrt: str, out_label: str) -> str:
    d = block.data
    if d["worst_output_index"] is None:
        worst = f"worst at {_index(wrt, d['worst_input_index'])} for a random projection of {out_label}"
    else:
        worst = (f"worst at {_index(wrt, d['worst_input_index'])} for "
                 f"{_index(out_label, d['worst_output_index'])}")
    share = f"{d['bad_entries']} of {d['entries']}{' sampled' if d['sampled'] else ''} entries off"
    pattern = f": {block.pattern}" if block.pattern else ""
    rel = (f", max rel error {d['max_rel_error']:.3g}" if d["max_rel_error"] is not None
           else " (numerical values are 0)")
    non_finite = d.get("non_finite_entries", 0)
    if non_finite:
        share += (f", {non_finite} of them non-finite (NaN or inf in backward's result: often "
                  "0 * inf from the derivative of sqrt, log or pow at 0)")
    return (f"{subject}{pattern}; {worst}: analytical {d['analytical']:.6g}, numerical "
            f"{d['numerical']:.6g}; max abs error {d['max_abs_error']:.3g}{rel}, {share}")


def _index(name: str, index: list[int]) -> str:
    return f"{name}[{', '.join(map(str, index))}]" if index else name


CODES = (
    Code("GV121", "jacobian-mismatch",
         "The analytical Jacobian (from backward) differs from the numerical one (finite "
         "differences in float64) for one (output, input) pair.",
         "The gradient is wrong: training follows a wrong direction, usually without any error.",
         "def backward(ctx, g):\n    x, = ctx.saved_tensors\n    return -g * x.cos()   # d sin = +cos",
         "The finding names the input, the worst element and a recognised pattern (sign flipped, "
         "constant factor, zero, not multiplied by the incoming gradient, transposed, only some "
         "rows); fix the formula for that input."),
    Code("GV122", "non-differentiable-point",
         "The mismatch is where the left and right finite differences disagree: the inputs sit "
         "on a kink or a tie (relu at 0, max with equal values, abs at 0).",
         "Finite differences are meaningless at such points, so this is a problem of the spec's "
         "inputs, not of backward.",
         "args: [{shape: [4], init: zeros}]   # relu at exactly 0",
         "Choose an `init` that avoids the kink (e.g. `uniform` with low 0.1, or `randn`), or "
         "distinct values for max/sort-like ops."),
    Code("GV123", "fast-mode-used",
         "gradcheck ran in fast mode, which compares random projections of the Jacobian.",
         "Fast mode can miss an error confined to a few elements.",
         "", "Add a small case (a few elements per dim) so that slow mode runs, or pass --slow."),
    Code("GV124", "no-slow-mode-case",
         "No case of this spec is small enough for slow-mode gradcheck.",
         "Every case ran in fast mode, so errors confined to a few elements can go unseen.",
         "", "Add a case with small shapes of distinct sizes, with batch 1 and batch > 1."),
    Code("GV125", "square-shapes",
         "Every tensor dimension in this case has the same size.",
         "Square shapes hide transpose bugs: grad.t() has the right shape by accident.",
         "args: [{shape: [3, 3]}, {shape: [3, 3]}]",
         "Use distinct sizes, e.g. [2, 3] and [3, 4]."),
    Code("GV126", "gradient-in-wrong-dtype",
         "Gradients were not computed in float64 although the inputs were float64.",
         "gradcheck then compares float64 finite differences with float32 results, so it fails "
         "or passes for the wrong reason.",
         "", "Support float64, or use `reference:`, which checks the working dtype directly."),
)


class GradcheckCheck:
    name = "gradcheck"
    default = True
    summary = "first-order gradients match finite differences (float64)"
    codes = CODES
    options = (Option("mode", str, "auto, slow or fast (overrides --fast/--slow)", MODES),)
    requires = ("contract",)

    def run(self, ctx: CheckContext) -> Outcome:
        import torch
        from torch.autograd.gradcheck import GradcheckError

        from gradverify.checks import _calls as calls
        from gradverify.checks import _jacobian as jac

        prepared = prepare(ctx)
        if isinstance(prepared, Outcome):
            return prepared
        fn, inputs, names, outs = prepared
        entries = jac.jacobian_entries(inputs, outs)
        mode = resolve_mode(ctx.options.get("mode") or ctx.mode, entries)
        outcome = Outcome(mode=mode, data={"jacobian_entries": entries})
        tol = ctx.tolerance
        modes = [mode]
        if mode == "fast" and ctx.smallest and not ctx.options.get("mode") \
                and ctx.mode == "auto" and entries <= SMALLEST_SLOW_MAX_ENTRIES:
            modes.append("slow")
            outcome.mode = "fast+slow"
        try:
            for run_mode in modes:
                with jac.no_slow_rerun():
                    torch.autograd.gradcheck(fn, inputs, eps=tol.eps, atol=tol.atol,
                                             rtol=tol.rtol, nondet_tol=tol.nondet_tol,
                                             check_undefined_grad=False,
                                             fast_mode=run_mode == "fast", raise_exception=True)
            failure = None
        except GradcheckError as exc:
            failure = str(exc)
        except Exception as exc:  # noqa: BLE001 -- backward or forward raised inside gradcheck
            outcome.add(Finding("GV121", Severity.ERROR,
                                f"gradcheck could not compare Jacobians: {calls.describe_exception(exc)}",
                                location=calls.user_location(exc, ctx.info) or ctx.location,
                                hint="the Function raised while gradcheck perturbed its inputs"))
            return outcome
        if outcome.mode == "fast":
            outcome.add(Finding(
                "GV123", Severity.INFO,
                f"fast mode ran ({entries:,} Jacobian entries > {SLOW_MODE_MAX_ENTRIES:,}): it "
                "compares random projections and can miss an error confined to a few elements",
                hint="add a small case so that slow mode runs, or pass --slow"))
        square = _square_shapes(ctx.args("double"))
        if square:
            outcome.add(Finding(
                "GV125", Severity.INFO,
                f"every tensor dimension in this case is {square}: square shapes hide transpose "
                "bugs", hint="use distinct sizes, e.g. [2, 3] and [3, 4]"))
        if failure is None:
            outcome.summary = (f"{entries:,} Jacobian entries match (slow mode)"
                               if outcome.mode == "slow" else
                               f"random projections of {entries:,} Jacobian entries match "
                               f"({outcome.mode} mode)")
            return outcome
        low = [o for o in outs if o.dtype not in (torch.float64, torch.complex128)]
        blocks = jac.diagnose(fn, inputs, atol=tol.atol, rtol=tol.rtol, eps=tol.eps,
                             generator=ctx.generator("gradcheck-diagnose"))
        scaled = _ignores_incoming_gradient(fn, inputs, ctx)
        for block in blocks:
            name = names[block.input]
            if block.only_kinks:
                outcome.add(Finding(
                    "GV122", Severity.WARNING,
                    mismatch_message(block, f"the inputs sit on a non-differentiable point for "
                                     f"{name!r} (left and right differences disagree)", name,
                                     f"output {block.output}"),
                    input=name, output=block.output, location=ctx.location,
                    hint="choose an `init` in the spec that keeps inputs away from kinks and ties "
                         "(e.g. uniform with low: 0.1, or distinct values)",
                    data=_data(block, ctx.verbose)))
                continue
            if block.input in scaled:
                block.pattern = "not multiplied by the incoming gradient"
            outcome.add(Finding(
                "GV121", Severity.ERROR,
                mismatch_message(block, f"gradient for {name!r} (output {block.output}) is wrong",
                                 name, f"output {block.output}"),
                input=name, output=block.output, location=ctx.location,
                hint=pattern_hint(block.pattern, name),
                data={**_data(block, ctx.verbose), "pattern": block.pattern}))
        if not blocks:
            first = failure.strip().splitlines()[0] if failure.strip() else "mismatch"
            # torch names inputs by index among the differentiable ones: give the name.
            where = re.search(r"output (\d+) with respect to input (\d+)", failure)
            name = names[int(where.group(2))] if where and int(where.group(2)) < len(names) \
                else None
            complex_case = any(t.is_complex() for t in [*inputs, *outs])
            subject = (f"gradient for {name!r} (output {where.group(1)}) is wrong"
                       if name and where else "gradcheck failed")
            outcome.add(Finding(
                "GV121", Severity.ERROR, f"{subject}: {first}", input=name,
                output=int(where.group(1)) if where else None, location=ctx.location,
                hint=("complex gradients follow PyTorch's convention: backward returns "
                      "grad * conj(df/dz) for a holomorphic f (check for a missing .conj())"
                      if complex_case else
                      "the mismatch did not reproduce in the sampled Jacobian; run with --slow "
                      "and -v for full blocks"), data={"torch_message": failure[:2000]}))
        if low:
            outcome.add(Finding(
                "GV126", Severity.ERROR,
                f"the Function returned {str(low[0].dtype)[6:]} for float64 inputs, so the "
                "comparison is against that precision's round-off",
                location=ctx.info.forward_location,
                hint="support float64, or verify the kernel through a plain-PyTorch "
                     "`reference: mod:fn` in the spec"))
        outcome.summary = f"Jacobian mismatch ({outcome.mode} mode)"
        return outcome


def prepare(ctx: CheckContext) -> Outcome | tuple[Any, list[Any], list[str], list[Any]]:
    """The differentiable view of a case shared by gradcheck and gradgradcheck:
    (fn of the differentiable inputs, those inputs, their names, the differentiable outputs)."""
    from gradverify.checks import _calls as calls

    applied = calls.differentiable_call(ctx)
    if isinstance(applied, str):
        return Outcome.skip(applied)
    args, diff, out_idx = applied.args, applied.args.diff_positions, applied.differentiable
    fn = calls.tensor_function(ctx.info, args, diff, out_idx)
    inputs = [args.values[i].detach().requires_grad_(True) for i in diff]
    outs = [applied.outputs[j] for j in out_idx]
    return fn, inputs, [args.names[i] for i in diff], outs


def _ignores_incoming_gradient(fn: Any, inputs: list[Any], ctx: CheckContext) -> set[int]:
    """Inputs whose gradient does not scale with the incoming gradient (backward is not
    linear in grad_output: it forgot to multiply by it)."""
    import torch

    from gradverify.checks import _calls as calls

    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    outs = fn(*leaves)
    generator = ctx.generator("gradcheck-linearity")
    g = [calls.randn_like(o, generator) for o in outs]
    try:
        one = torch.autograd.grad(outs, leaves, g, retain_graph=True, allow_unused=True)
        two = torch.autograd.grad(outs, leaves, [3 * x for x in g], allow_unused=True)
    except Exception:  # noqa: BLE001 -- gradcheck already reported the failure
        return set()
    found = set()
    for i, (a, b) in enumerate(zip(one, two)):
        if a is None or b is None:
            continue
        if not torch.allclose(3 * a, b, rtol=1e-6, atol=1e-9):
            found.add(i)
    return found


def _square_shapes(args: Any) -> int | None:
    import torch

    tensors = [v for v in args.values if isinstance(v, torch.Tensor)]
    sizes = {s for t in tensors for s in t.shape}
    if len(sizes) == 1 and any(t.dim() >= 2 for t in tensors) and sizes != {1}:
        return sizes.pop()
    return None


def _data(block: Block, verbose: bool) -> dict[str, Any]:
    data = dict(block.data)
    if verbose and block.analytical.numel() <= 400:
        data["analytical_block"] = block.analytical.tolist()
        data["numerical_block"] = block.numerical.tolist()
    return data


CHECK = GradcheckCheck()
