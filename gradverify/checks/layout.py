"""layout: non-contiguous inputs and incoming gradients must give the same results.

Kernels that read ``data_ptr`` as if memory were contiguous are a top source of silently wrong
gradients, and ``.view`` on a tensor a caller permuted a top source of crashes. Inputs and
incoming gradients are given transposed storage, permuted leading dims (an attention output
``transpose(1, 2).reshape(...)``-ed downstream hands backward such a gradient), fully reversed
strides and strided (every other element) storage; incoming gradients also the expanded
stride-0 layout that ``out.sum().backward()`` produces. Outputs and gradients must equal the
contiguous ones.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gradverify.checks.base import Check, Outcome, Trait
from gradverify.codes import Code
from gradverify.results import Finding, Severity
from gradverify.targets import draws_random

if TYPE_CHECKING:
    from gradverify.case.context import CheckContext

LAYOUTS = ("transposed", "leading dims permuted", "reversed strides", "strided")


CODES = (
    Code("GV251", "noncontiguous-input-wrong",
         "A non-contiguous input (transposed or strided storage) gave different outputs or "
         "gradients than the same values in contiguous memory.",
         "Kernels that read data_ptr as if memory were contiguous compute silently wrong results "
         "for views, transposes and slices.",
         "kernel(x.data_ptr(), ...)   # x may be x.t()",
         "Call .contiguous() before raw kernels."),
    Code("GV252", "noncontiguous-input-raises",
         "A non-contiguous input made the Function raise.", "Views and slices are everyday "
         "inputs.", "x.view(-1)   # fails on transposed x",
         "Use .reshape or call .contiguous() first."),
    Code("GV253", "noncontiguous-gradient-wrong",
         "An expanded (stride 0) or non-contiguous incoming gradient gave a different gradient.",
         "`out.sum().backward()` hands backward an expanded gradient with stride 0; a "
         "downstream .t() hands it a transposed one.",
         "kernel_backward(grad.data_ptr(), ...)",
         "Call grad.contiguous() before raw kernels."),
    Code("GV254", "noncontiguous-gradient-raises",
         "An expanded or non-contiguous incoming gradient made backward raise.",
         "`out.sum().backward()` produces such gradients.", "grad.view(-1)",
         "Use grad.reshape or grad.contiguous()."),
)


class LayoutCheck(Check):
    name = "layout"
    default = True
    summary = "non-contiguous inputs and expanded/non-contiguous gradients give the same results"
    codes = CODES
    traits = frozenset({Trait.CALLS_BACKWARD, Trait.DIFFERENTIATES, Trait.COMPARES_RUNS})

    def run(self, ctx: CheckContext) -> Outcome:
        from gradverify.checks import _calls as calls
        from gradverify.checks import _tensors as tk
        if draws_random(ctx.info):
            return Outcome.skip("forward draws random numbers (dropout, noise): a strided input "
                                "gets them in another order, so runs cannot be compared")

        outcome = Outcome()
        # every run on fresh copies: a target that registers hooks on, or writes into, its
        # inputs must not hand the next run what the last one left
        base = ctx.args("double")
        diff = base.diff_positions
        applied = calls.apply(ctx.info, base.clone())
        grads = calls.random_grads(applied, ctx.generator("layout"))
        reference = self._run(ctx, base.clone(), grads, diff)
        if isinstance(reference, Exception):
            return Outcome.skip("forward/backward raised on contiguous inputs")
        tried = 0
        # A module's parameters are the module's own tensors, contiguous as it made them: only
        # what callers pass varies.
        given = len(base.values) - len(ctx.info.parameters)
        for how in LAYOUTS:
            for pos, value in enumerate(base.values[:given]):
                if not tk.is_tensor(value):
                    continue
                variant = tk.noncontiguous(value, how)
                if variant is None:
                    continue
                tried += 1
                args = base.clone()
                args.values[pos] = variant.requires_grad_(value.requires_grad)
                self._compare(ctx, outcome, self._run(ctx, args, grads, diff), reference,
                              f"input {base.names[pos]!r} with {how} storage", base.names[pos],
                              "GV251", "GV252", diff, base.names)
        if applied.differentiable:
            tried += self._gradients(ctx, outcome, base, grads, diff, applied.differentiable)
        outcome.summary = f"{tried} non-contiguous variant(s) agree with contiguous ones"
        return outcome

    def _gradients(self, ctx: CheckContext, outcome: Outcome, base: Any, grads: list[Any],
                   diff: list[int], differentiable: list[int]) -> int:
        import torch

        from gradverify.checks import _tensors as tk

        tried = 0
        for j, g in enumerate(grads):
            if not isinstance(g, torch.Tensor) or j not in differentiable:
                continue
            variants = [(how, tk.noncontiguous(g, how)) for how in LAYOUTS]
            if g.numel() > 1:
                constant = torch.full((), 0.75, dtype=g.dtype, device=g.device).expand(g.shape)
                variants.append(("expanded (stride 0, as .sum() produces)", constant))
            for how, variant in variants:
                if variant is None:
                    continue
                tried += 1
                dense = [x.contiguous() if k == j and isinstance(x, torch.Tensor) else x
                         for k, x in enumerate(grads)]
                dense[j] = variant.contiguous()
                expected = self._run(ctx, base.clone(), dense, diff)
                trial = list(dense)
                trial[j] = variant
                self._compare(ctx, outcome, self._run(ctx, base.clone(), trial, diff), expected,
                              f"the incoming gradient for output {j} {how}", None, "GV253",
                              "GV254", diff, base.names, output=j)
        return tried

    @staticmethod
    def _run(ctx: CheckContext, args: Any, grads: list[Any], diff: list[int]) -> Any:
        """(outputs, gradients) of one forward and backward, or the exception raised."""
        from gradverify.checks import _calls as calls

        try:
            return calls.forward_backward(ctx.info, args, grads, diff)
        except Exception as exc:  # noqa: BLE001 -- user code
            return exc

    @staticmethod
    def _compare(ctx: CheckContext, outcome: Outcome, got: Any, expected: Any, label: str,
                 input_name: str | None, wrong_code: str, raise_code: str, diff: list[int],
                 names: list[str], output: int | None = None) -> None:
        from gradverify.checks import _calls as calls
        from gradverify.checks import _compare as cmp
        from gradverify.checks import _tensors as tk

        if isinstance(expected, Exception):
            return
        if isinstance(got, Exception):
            viewed = "view size is not compatible" in str(got)
            what = "the incoming gradient" if input_name is None else f"{input_name!r}"
            outcome.add(Finding(
                raise_code, Severity.ERROR,
                f"with {label}, the Function raised {calls.describe_exception(got)}"
                + (f": it calls .view() on {what}, which is not contiguous here"
                   if viewed else ""),
                input=input_name, output=output,
                location=calls.user_location(got, ctx.info) or ctx.location,
                hint="use .reshape(...) instead of .view(...), or call .contiguous() first: "
                     "callers hand over permuted and transposed tensors (a downstream "
                     "transpose(1, 2).reshape(...) permutes the incoming gradient's dims)"
                if viewed else "call .contiguous() on tensors before handing them to a kernel "
                               "that assumes contiguous memory"))
            return
        outs, grads = got
        ref_outs, ref_grads = expected
        for j, (a, b) in enumerate(zip(outs, ref_outs)):
            if tk.is_tensor(a) and not cmp.grads_close(a, b, atol=1e-9, rtol=1e-6):
                outcome.add(Finding(
                    wrong_code, Severity.ERROR,
                    f"with {label}, output {j} differs from the contiguous result",
                    input=input_name, output=j, location=ctx.forward_location,
                    hint="forward reads memory as if it were contiguous: call .contiguous() "
                         "first, or use the tensor's strides"))
                return
        for pos, (a, b) in enumerate(zip(grads, ref_grads)):
            if not cmp.grads_close(a, b, atol=1e-9, rtol=1e-6):
                name = names[diff[pos]]
                outcome.add(Finding(
                    wrong_code, Severity.ERROR,
                    f"with {label}, the gradient for {name!r} differs from the contiguous result",
                    input=input_name or name, output=output, location=ctx.location,
                    hint="backward reads memory as if it were contiguous: call .contiguous() on "
                         "the incoming gradient and saved tensors before raw kernels"))
                return


CHECK = LayoutCheck()
