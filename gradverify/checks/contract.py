"""contract: what autograd would reject or silently repair in backward's return value.

Calls ``MyFunc.backward(ctx, *grads)`` directly (ctx is the output's ``grad_fn``), so it sees
backward's raw results before the engine validates, casts or sums them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from gradverify.checks.base import Option, Outcome
from gradverify.report.model import Finding, Severity

if TYPE_CHECKING:
    from gradverify.context import CheckContext


class ContractCheck:
    name = "contract"
    default = True
    summary = "backward returns what autograd expects: count, types, shapes, dtypes, devices"
    codes = ("GV101", "GV102", "GV103", "GV104", "GV105", "GV106", "GV107", "GV108", "GV109",
             "GV110", "GV111", "GV112", "GV113")
    options: tuple[Option, ...] = ()
    requires: tuple[str, ...] = ()

    def run(self, ctx: CheckContext) -> Outcome:
        from gradverify.checks import _autograd as ag

        info = ctx.info
        outcome = Outcome()
        applied = ag.differentiable_call(ctx)
        if isinstance(applied, str):
            return Outcome.skip(applied)
        args = applied.args
        n_out = len(applied.outputs)
        loc = ctx.location
        if info.backward_arity is not None and info.backward_arity != n_out:
            outcome.add(Finding(
                "GV110", Severity.ERROR,
                f"backward takes {info.backward_arity} gradient argument(s) but forward returns "
                f"{n_out} output(s); autograd calls backward with one gradient per output",
                location=loc,
                hint=f"give backward {n_out} gradient parameters after ctx (unused ones may be "
                     "ignored)"))
            return outcome
        self._output_dtypes(applied, outcome, loc)
        grads = ag.random_grads(applied, ctx.generator("contract"))
        try:
            raw = ag.raw_backward(info, applied, grads)
        except Exception as exc:  # noqa: BLE001 -- user code
            outcome.add(Finding(
                "GV101", Severity.ERROR,
                f"backward raised {ag.describe_exception(exc)}",
                location=ag.user_location(exc, info) or loc,
                hint="autograd calls backward with one gradient per output, shaped like that "
                     "output; fix the line shown",
                data={"exception": type(exc).__name__}))
            return outcome
        n_in = len(args.values)
        if len(raw) < n_in:
            outcome.add(Finding(
                "GV102", Severity.ERROR,
                f"backward returned {len(raw)} value(s) but forward takes {n_in} input(s) "
                f"({', '.join(args.names)}); autograd raises 'returned an incorrect number of "
                "gradients'", location=loc,
                hint=f"return one gradient or None per forward input, in order: "
                     f"({', '.join(args.names)})"))
        extra = [k for k in range(n_in, len(raw)) if raw[k] is not None]
        if extra:
            outcome.add(Finding(
                "GV103", Severity.ERROR,
                f"backward returned {len(raw)} values, {len(extra)} non-None beyond forward's "
                f"{n_in} input(s); autograd raises 'returned an incorrect number of gradients'",
                location=loc, hint="return exactly one value per forward input"))
        for pos in range(min(n_in, len(raw))):
            self._one_gradient(raw[pos], args.values[pos], args.names[pos], outcome, loc)
        self._non_differentiable_outputs(ctx, applied, outcome)
        checked = min(n_in, len(raw))
        outcome.summary = (f"raw backward returned {len(raw)} value(s) for {n_in} input(s); "
                           f"{checked} checked")
        return outcome

    @staticmethod
    def _one_gradient(grad: object, value: object, name: str, outcome: Outcome,
                      loc: str | None) -> None:
        import torch

        if grad is None:
            return
        if not isinstance(grad, torch.Tensor):
            outcome.add(Finding(
                "GV112", Severity.ERROR,
                f"backward returned a {type(grad).__name__} for {name!r}; autograd expects a "
                "tensor or None", input=name, location=loc,
                hint="wrap the value in a tensor shaped like the input, or return None"))
            return
        if not isinstance(value, torch.Tensor):
            outcome.add(Finding(
                "GV104", Severity.ERROR,
                f"backward returned a gradient for {name!r}, which is a "
                f"{type(value).__name__}, not a tensor; autograd raises 'returned a gradient "
                "different than None'", input=name, location=loc,
                hint=f"return None for {name!r}"))
            return
        if not (value.is_floating_point() or value.is_complex()):
            outcome.add(Finding(
                "GV108", Severity.WARNING,
                f"backward returned a gradient for {name!r}, a {str(value.dtype)[6:]} tensor that "
                "can never require grad; autograd drops it (wasted work)", input=name,
                location=loc, hint=f"return None for {name!r}"))
            return
        if grad.device != value.device:
            outcome.add(Finding(
                "GV109", Severity.ERROR,
                f"gradient for {name!r} is on {grad.device} but the input is on {value.device}",
                input=name, location=loc,
                hint="create gradients on the input's device (x.new_zeros, torch.zeros_like)"))
        if tuple(grad.shape) != tuple(value.shape):
            g_shape, x_shape = list(grad.shape), list(value.shape)
            try:
                expandable = torch.broadcast_shapes(value.shape, grad.shape) == grad.shape
            except RuntimeError:
                expandable = False
            if expandable:
                outcome.add(Finding(
                    "GV106", Severity.WARNING,
                    f"gradient for {name!r} has shape {g_shape}; autograd sums it to the input's "
                    f"{x_shape} (a broadcast left unsummed)", input=name, location=loc,
                    hint=f"reduce in backward: grad.sum_to_size({', '.join(map(str, x_shape))})"
                    if x_shape else "reduce in backward: grad.sum()",
                    data={"grad_shape": g_shape, "input_shape": x_shape}))
            else:
                outcome.add(Finding(
                    "GV105", Severity.ERROR,
                    f"gradient for {name!r} has shape {g_shape} but the input has shape "
                    f"{x_shape}, and it cannot be summed to it; autograd raises 'returned an "
                    "invalid gradient'", input=name, location=loc,
                    hint="return a gradient shaped exactly like the input (check for a missing "
                         "or extra transpose, reshape or reduction)",
                    data={"grad_shape": g_shape, "input_shape": x_shape}))
        if grad.dtype != value.dtype:
            if grad.is_complex() != value.is_complex() and not value.is_complex():
                outcome.add(Finding(
                    "GV105", Severity.ERROR,
                    f"gradient for real input {name!r} is complex ({str(grad.dtype)[6:]}); "
                    "autograd raises", input=name, location=loc,
                    hint="return the real part, or a real gradient"))
            else:
                outcome.add(Finding(
                    "GV107", Severity.WARNING,
                    f"gradient for {name!r} is {str(grad.dtype)[6:]} but the input is "
                    f"{str(value.dtype)[6:]}; autograd casts it silently", input=name,
                    location=loc,
                    hint="compute the gradient in the input's dtype; for a float32-only kernel, "
                         "verify it with `reference:` in the spec",
                    data={"grad_dtype": str(grad.dtype)[6:], "input_dtype": str(value.dtype)[6:]}))

    @staticmethod
    def _output_dtypes(applied: object, outcome: Outcome, loc: str | None) -> None:
        import torch

        for j, out in applied.tensors:  # type: ignore[attr-defined]
            if out.is_floating_point() and out.dtype != torch.float64:
                outcome.add(Finding(
                    "GV113", Severity.WARNING,
                    f"output {j} is {str(out.dtype)[6:]} although the inputs are float64: the "
                    "gradient checks compare against round-off of that precision", output=j,
                    location=loc,
                    hint="support float64 inputs, or verify a float32-only kernel through a "
                         "plain-PyTorch `reference:` in the spec"))

    @staticmethod
    def _non_differentiable_outputs(ctx: CheckContext, applied: object, outcome: Outcome) -> None:
        """An output marked non-differentiable must not move when the inputs move."""
        import torch

        from gradverify.checks import _autograd as ag

        candidates = [j for j, o in applied.tensors  # type: ignore[attr-defined]
                      if (o.is_floating_point() or o.is_complex()) and not o.requires_grad]
        if not candidates:
            return
        args = ctx.args("double")
        generator = ctx.generator("contract-nondiff")
        with torch.no_grad():
            before = ag.apply(ctx.info, args)
            for pos in args.diff_positions:
                x = args.values[pos]
                x.add_(1e-6 * ag.randn_like(x, generator) * (1 + x.abs()))
            after = ag.apply(ctx.info, args)
        for j in candidates:
            change = (after.outputs[j].double() - before.outputs[j].double()).abs().max().item()
            if change > 1e-9:
                outcome.add(Finding(
                    "GV111", Severity.WARNING,
                    f"output {j} is marked non-differentiable but changes with the inputs "
                    f"(by {change:.3g} under a 1e-6 perturbation): gradients through it are "
                    "silently zero", output=j, location=ctx.info.forward_location,
                    hint="only mark outputs that are piecewise constant (indices, masks); "
                         "otherwise make it differentiable"))


CHECK = ContractCheck()
