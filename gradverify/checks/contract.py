"""contract: what autograd would reject or silently repair in backward's return value.

Calls ``MyFunc.backward(ctx, *grads)`` directly (ctx is the output's ``grad_fn``), so it sees
backward's raw results before the engine validates, casts or sums them.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING

from gradverify.checks import _devices
from gradverify.checks.base import Check, Consequence, Effect, Outcome, Trait
from gradverify.codes import Code
from gradverify.results import Finding, Location, Severity
from gradverify.targets.model import Capability, Formula
from gradverify.targets.op_calls import gradient_count

if TYPE_CHECKING:
    import torch

    from gradverify.case.context import CheckContext
    from gradverify.checks._calls import Applied


CODES = (
    Code("GV101", "backward-raised",
         "backward raised when called with gradients for the outputs.",
         "Every training step that reaches this Function will crash.",
         "def backward(ctx, grad):\n    x, = ctx.saved_tensors\n"
         "    return grad @ x   # shapes do not match",
         "Read the traceback location given and fix backward."),
    Code("GV102", "too-few-gradients",
         "backward returned fewer values than forward has inputs.",
         "Autograd requires exactly one gradient (or None) per forward input, including "
         "non-tensor ones, and raises 'returned an incorrect number of gradients'.",
         "def forward(ctx, x, scale): ...\ndef backward(ctx, grad):\n    return grad * ctx.scale",
         "Return one value per forward input: `return grad * ctx.scale, None`."),
    Code("GV103", "too-many-gradients",
         "backward returned more non-None values than forward has inputs.",
         "Autograd raises 'returned an incorrect number of gradients'; extra trailing Nones are "
         "accepted, extra tensors are not.",
         "return grad_x, grad_w, grad_b   # forward(ctx, x, w) has two inputs",
         "Return exactly one value per forward input."),
    Code("GV104", "grad-for-non-tensor",
         "backward returned a gradient for an input that is not a tensor (an int, a float, None).",
         "Autograd raises 'returned a gradient different than None at position N, but the "
         "corresponding forward input was not a Variable'.",
         "def forward(ctx, x, dim): ...\ndef backward(ctx, g):\n    return g, g",
         "Return None at the positions of non-tensor inputs."),
    Code("GV105", "grad-shape-mismatch",
         "A gradient's shape cannot be summed to its input's shape.",
         "Autograd raises 'returned an invalid gradient at index N - got [...] but expected shape "
         "compatible with [...]'.",
         "return grad.t()   # input was [3, 4]",
         "Return a gradient with exactly the input's shape."),
    Code("GV106", "grad-broadcast-unsummed",
         "A gradient has a broadcast shape that autograd silently sums down to the input's shape.",
         "The result is right but backward materialises a larger tensor than needed, and the "
         "mismatch usually means backward forgot to reduce over broadcast dimensions.",
         "def backward(ctx, g):\n    return g, g   # bias is [5], g is [N, 5]",
         "Reduce explicitly: `g.sum(0)` (or `g.sum_to_size(bias.shape)`)."),
    Code("GV107", "grad-dtype-mismatch",
         "A gradient's dtype differs from its input's, and autograd silently casts it.",
         "A float32 gradient for a float64 input loses precision (and often hides that the kernel "
         "cannot run in double, so gradcheck compares against float32 noise).",
         "return grad.float()",
         "Compute the gradient in the input's dtype; for float32-only kernels use `reference:`."),
    Code("GV108", "grad-for-integer-input",
         "backward returned a tensor for an integer or boolean input, which can never require "
         "grad.",
         "Autograd drops it silently; computing it is wasted work.",
         "return grad_values, torch.zeros_like(indices)",
         "Return None for integer inputs (indices, label maps, masks)."),
    Code("GV109", "grad-wrong-device",
         "A gradient is on a different device than its input.",
         "Autograd raises, or copies across devices on every step.",
         "return grad.cpu()",
         "Create gradients on the input's device (`torch.zeros_like(x)`, `x.new_zeros(...)`)."),
    Code("GV110", "backward-arity-mismatch",
         "backward takes a different number of gradient arguments than forward has outputs.",
         "Autograd calls backward with one gradient per output; a mismatch is a TypeError on "
         "the first backward.",
         "def forward(ctx, x):\n    return y, idx\n"
         "def backward(ctx, grad_y):   # needs grad_idx too",
         "Take one gradient per output: `def backward(ctx, grad_y, grad_idx)`."),
    Code("GV111", "non-differentiable-output-depends-on-input",
         "An output marked non-differentiable (ctx.mark_non_differentiable) changes when a "
         "differentiable input changes.",
         "Gradients that flow through that output are silently zero, so training ignores that "
         "path.",
         "ctx.mark_non_differentiable(normalised)   # normalised = x / x.norm()",
         "Only mark outputs that are truly piecewise constant (indices, masks, argmax)."),
    Code("GV112", "grad-not-a-tensor",
         "backward returned something other than a tensor or None (a number, a list, a numpy "
         "array).",
         "Autograd raises 'expected Variable or None'.",
         "return 2.0 * ctx.scale",
         "Return tensors (`torch.full_like(x, 2.0 * ctx.scale)`) or None."),
    Code("GV113", "output-not-float64",
         "forward returned a lower-precision floating output for float64 inputs.",
         "A kernel that only runs in float32 makes float64 gradient checks compare against float32 "
         "round-off, so they fail (or pass) for the wrong reasons.",
         "return kernel(x.float())",
         "Support float64, or verify the kernel against a plain-PyTorch `reference:` in the spec."),
)


class ContractCheck(Check):
    name = "contract"
    needs = MappingProxyType({Capability.OWN_BACKWARD: ""})
    default = True
    summary = "backward returns what autograd expects: count, types, shapes, dtypes, devices"
    codes = CODES
    traits = frozenset({Trait.DIFFERENTIATES})
    consequences = (Consequence(Effect.SKIPS, reaches=frozenset({Trait.CALLS_BACKWARD})),)
    """A backward result autograd rejects: no check that calls backward can run."""

    def run(self, ctx: CheckContext) -> Outcome:
        from gradverify.checks import _calls as calls
        info = ctx.info
        outcome = Outcome()
        applied = calls.differentiable_call(ctx)
        if isinstance(applied, calls.NothingToDifferentiate):
            return applied.skip()
        args = applied.args
        n_out = len(applied.outputs)
        loc = ctx.location
        formula = info.detail(Formula)
        arity = formula.backward_arity if formula else None
        if arity is not None and arity != n_out:
            return self._arity_mismatch(arity, n_out, loc)
        self._output_dtypes(applied, outcome, loc)
        grads = calls.random_grads(applied, ctx.generator("contract"))
        no_backward = calls.no_own_backward(info, applied)
        if no_backward:
            return Outcome.skip(no_backward)
        try:
            raw = calls.raw_backward(info, applied, grads)
        except Exception as exc:  # noqa: BLE001 -- user code
            return self._backward_raised(ctx, exc, outcome)
        n_in = gradient_count(info, len(args.values))
        self._gradient_count(raw, n_in, args.names[:n_in], outcome, loc)
        for pos in range(min(n_in, len(raw))):
            self._one_gradient(raw[pos], args.values[pos], args.names[pos], outcome, loc)
        self._non_differentiable_outputs(ctx, applied, outcome)
        outcome.summary = _summary(outcome.findings, len(raw), n_in)
        return outcome

    @staticmethod
    def _arity_mismatch(arity: int, n_out: int, loc: Location | None) -> Outcome:
        """backward takes a different number of gradients than forward has outputs (GV110):
        autograd could not even call it, so nothing else is checked."""
        outcome = Outcome()
        outcome.add(Finding(
            "GV110", Severity.ERROR,
            f"backward takes {arity} gradient argument(s) but forward returns "
            f"{n_out} output(s); autograd calls backward with one gradient per output",
            location=loc,
            hint=f"give backward {n_out} gradient parameters after ctx (unused ones may be "
                 "ignored)"))
        outcome.summary = f"backward takes {arity} gradient(s) for {n_out} output(s)"
        return outcome

    @staticmethod
    def _backward_raised(ctx: CheckContext, exc: Exception, outcome: Outcome) -> Outcome:
        """backward raised (GV101): there is no return value to check."""
        from gradverify.checks import _calls as calls

        outcome.add(Finding(
            "GV101", Severity.ERROR,
            f"backward raised {calls.describe_exception(exc)}",
            location=calls.user_location(exc, ctx.info) or ctx.location,
            hint=f"a tensor on another device than the inputs: {_devices.HINT}"
            if _devices.two_devices(exc) else "autograd calls backward with one gradient per "
            "output, shaped like that output; fix the line shown",
            data={"exception": type(exc).__name__}))
        outcome.summary = f"backward raised {type(exc).__name__}"
        return outcome

    @staticmethod
    def _gradient_count(raw: tuple[object, ...], n_in: int, names: list[str],
                        outcome: Outcome, loc: Location | None) -> None:
        """One value per input backward answers for (``names``): fewer is GV102, extra
        non-None values GV103 (extra trailing Nones are accepted)."""
        if len(raw) < n_in:
            outcome.add(Finding(
                "GV102", Severity.ERROR,
                f"backward returned {len(raw)} value(s) but forward takes {n_in} input(s) "
                f"({', '.join(names)}); autograd raises 'returned an incorrect number of "
                "gradients'", location=loc,
                hint=f"return one gradient or None per forward input, in order: "
                     f"({', '.join(names)})"))
        extra = [k for k in range(n_in, len(raw)) if raw[k] is not None]
        if extra:
            outcome.add(Finding(
                "GV103", Severity.ERROR,
                f"backward returned {len(raw)} values, {len(extra)} non-None beyond forward's "
                f"{n_in} input(s); autograd raises 'returned an incorrect number of gradients'",
                location=loc, hint="return exactly one value per forward input"))

    @staticmethod
    def _one_gradient(grad: object, value: object, name: str, outcome: Outcome,
                      loc: Location | None) -> None:
        """One raw gradient against its input: autograd must accept it at all (a tensor, for a
        floating tensor input); then its device, shape and dtype must match the input's."""
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
        for finding in (_gradient_device(grad, value, name, loc),
                        _gradient_shape(grad, value, name, loc),
                        _gradient_dtype(grad, value, name, loc)):
            if finding is not None:
                outcome.add(finding)

    @staticmethod
    def _output_dtypes(applied: Applied, outcome: Outcome, loc: Location | None) -> None:
        import torch

        for j, out in applied.tensors:
            if out.is_floating_point() and out.dtype != torch.float64:
                outcome.add(Finding(
                    "GV113", Severity.WARNING,
                    f"output {j} is {str(out.dtype)[6:]} although the inputs are float64: the "
                    "gradient checks compare against round-off of that precision", output=j,
                    location=loc,
                    hint="support float64 inputs, or verify a float32-only kernel through a "
                         "plain-PyTorch `reference:` in the spec"))

    @staticmethod
    def _non_differentiable_outputs(ctx: CheckContext, applied: Applied, outcome: Outcome) -> None:
        """An output marked non-differentiable must not move when the inputs move."""
        import torch

        from gradverify.checks import _calls as calls

        candidates = [j for j, o in applied.tensors
                      if (o.is_floating_point() or o.is_complex()) and not o.requires_grad]
        if not candidates:
            return
        args = ctx.args("double")
        generator = ctx.generator("contract-nondiff")
        with torch.no_grad():
            before = calls.apply(ctx.info, args)
            for pos in args.diff_positions:
                x = args.values[pos]
                x.add_(1e-6 * calls.randn_like(x, generator) * (1 + x.abs()))
            after = calls.apply(ctx.info, args)
        for j in candidates:
            change = (after.outputs[j].double() - before.outputs[j].double()).abs().max().item()
            if change > 1e-9:
                outcome.add(Finding(
                    "GV111", Severity.WARNING,
                    f"output {j} is marked non-differentiable but changes with the inputs "
                    f"(by {change:.3g} under a 1e-6 perturbation): gradients through it are "
                    "silently zero", output=j, location=ctx.forward_location,
                    hint="only mark outputs that are piecewise constant (indices, masks); "
                         "otherwise make it differentiable"))


def _gradient_device(grad: torch.Tensor, value: torch.Tensor, name: str,
                     loc: Location | None) -> Finding | None:
    """GV109 when the gradient is on another device than its input."""
    if grad.device == value.device:
        return None
    return Finding(
        "GV109", Severity.ERROR,
        f"gradient for {name!r} is on {grad.device} but the input is on {value.device}",
        input=name, location=loc,
        hint="create gradients on the input's device (x.new_zeros, torch.zeros_like)")


def _gradient_shape(grad: torch.Tensor, value: torch.Tensor, name: str,
                    loc: Location | None) -> Finding | None:
    """A shape other than the input's: a broadcast autograd sums silently (GV106), or one it
    cannot sum to the input's shape and rejects (GV105)."""
    import torch

    if tuple(grad.shape) == tuple(value.shape):
        return None
    g_shape, x_shape = list(grad.shape), list(value.shape)
    try:
        expandable = torch.broadcast_shapes(value.shape, grad.shape) == grad.shape
    except RuntimeError:
        expandable = False
    if expandable:
        return Finding(
            "GV106", Severity.WARNING,
            f"gradient for {name!r} has shape {g_shape}; autograd sums it to the input's "
            f"{x_shape} (a broadcast left unsummed)", input=name, location=loc,
            hint=f"reduce in backward: grad.sum_to_size({', '.join(map(str, x_shape))})"
            if x_shape else "reduce in backward: grad.sum()",
            data={"grad_shape": g_shape, "input_shape": x_shape})
    return Finding(
        "GV105", Severity.ERROR,
        f"gradient for {name!r} has shape {g_shape} but the input has shape "
        f"{x_shape}, and it cannot be summed to it; autograd raises 'returned an "
        "invalid gradient'", input=name, location=loc,
        hint="return a gradient shaped exactly like the input (check for a missing "
             "or extra transpose, reshape or reduction)",
        data={"grad_shape": g_shape, "input_shape": x_shape})


def _gradient_dtype(grad: torch.Tensor, value: torch.Tensor, name: str,
                    loc: Location | None) -> Finding | None:
    """A dtype other than the input's: a complex gradient for a real input autograd rejects
    (GV105), any other one it casts silently (GV107)."""
    if grad.dtype == value.dtype:
        return None
    if grad.is_complex() != value.is_complex() and not value.is_complex():
        return Finding(
            "GV105", Severity.ERROR,
            f"gradient for real input {name!r} is complex ({str(grad.dtype)[6:]}); "
            "autograd raises", input=name, location=loc,
            hint="return the real part, or a real gradient")
    return Finding(
        "GV107", Severity.WARNING,
        f"gradient for {name!r} is {str(grad.dtype)[6:]} but the input is "
        f"{str(value.dtype)[6:]}; autograd casts it silently", input=name,
        location=loc,
        hint="compute the gradient in the input's dtype; for a float32-only kernel, "
             "verify it with `reference:` in the spec",
        data={"grad_dtype": str(grad.dtype)[6:], "input_dtype": str(value.dtype)[6:]})


def _summary(findings: list[Finding], returned: int, n_in: int) -> str:
    """The names of the problems found (with the input each is about), or what was checked."""
    problems = [f for f in findings if f.severity != Severity.INFO]
    if not problems:
        checked = min(n_in, returned)
        return f"raw backward returned {returned} value(s) for {n_in} input(s); {checked} checked"
    names = {c.code: c.name for c in CODES}
    return "; ".join(dict.fromkeys(
        names[f.code].replace("-", " ") + (f" ({f.input!r})" if f.input else "")
        for f in problems))


CHECK = ContractCheck()
