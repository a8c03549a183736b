"""vmap: ``torch.func.vmap`` over a batch equals a loop, for outputs and per-sample gradients.

Runs when the Function supports vmap (``generate_vmap_rule = True`` or a ``vmap``
staticmethod, both of which torch.func accepts only in setup_context style); otherwise a skip
naming what is missing.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from gradverify.checks.base import Check, Outcome, Trait
from gradverify.codes import Code
from gradverify.results import Finding, Severity
from gradverify.targets.model import Capability, Formula

if TYPE_CHECKING:
    from gradverify.case.context import CheckContext

BATCH = 3


CODES = (
    Code("GV311", "vmap-output-mismatch",
         "torch.func.vmap of the Function gives different outputs than a loop over the batch.",
         "Batched code (vmap, per-sample gradients, ensembling) computes wrong values.",
         "def vmap(info, in_dims, x):\n    return x.sum(0), 0   # reduces over the batch dim",
         "Return outputs with the batch dimension where out_dims says it is."),
    Code("GV312", "vmap-gradient-mismatch",
         "Per-sample gradients under vmap(grad(...)) differ from a loop.",
         "Per-sample gradients (DP-SGD, influence functions) are wrong.",
         "", "backward must treat each sample independently under vmap."),
    Code("GV313", "vmap-raised",
         "torch.func.vmap raised on a Function (or op) that declares vmap support.",
         "The declared support does not hold.", "",
         "Fix the vmap staticmethod (or register_vmap rule), or use generate_vmap_rule = "
         "True. A rule that raises NotImplementedError declines that batching: a note "
         "(GV314), not a failure."),
    Code("GV314", "vmap-declined",
         "The vmap rule raised NotImplementedError for one way of batching the inputs.",
         "Calls that batch that way fail; the rule says so on purpose.", "",
         "Nothing to fix if intended; the check verifies the batchings the rule accepts."),
)


class VmapCheck(Check):
    name = "vmap"
    needs = MappingProxyType({
        Capability.OWN_AUTOGRAD: "vmap of it is vmap of what it calls: check those"})
    default = True
    summary = "torch.func.vmap equals a loop, for outputs and per-sample gradients"
    codes = CODES
    traits = frozenset({Trait.CALLS_BACKWARD, Trait.DIFFERENTIATES, Trait.COMPARES_RUNS})

    def run(self, ctx: CheckContext) -> Outcome:
        import torch

        info = ctx.info
        unsupported = _unsupported(info)
        if unsupported:
            return Outcome.skip(unsupported)
        args = ctx.args("double")
        floating = [i for i, v in enumerate(args.values) if isinstance(v, torch.Tensor)
                    and (v.is_floating_point() or v.is_complex())]
        if not floating:
            return Outcome.skip("no floating-point tensor input to batch over")
        # Every floating input batched; with several, also the first alone (vmap over the
        # data with shared weights, the usual call).
        variants = [floating] + ([floating[:1]] if len(floating) > 1 else [])
        outcome = Outcome()
        declined: list[str] = []
        for batched in variants:
            label = "" if batched == floating else \
                f" (with only {args.names[batched[0]]!r} batched)"
            refused = self._variant(ctx, args, batched, label, outcome)
            if refused:
                declined.append(f"{label.strip(' ()') or 'every input batched'}: {refused}")
            if outcome.findings:
                break  # one wrong rule is said once
        if len(declined) == len(variants):
            return Outcome.skip("the vmap rule declines every batching tried ("
                                + "; ".join(declined) + ")")
        for text in declined:
            outcome.add(Finding("GV314", Severity.INFO, f"the vmap rule declines {text}",
                                location=ctx.forward_location))
        if not any(f.severity != Severity.INFO for f in outcome.findings):
            grads = not info.has(Capability.SCHEMA)
            outcome.summary = (f"vmap over a batch of {BATCH} equals a loop (outputs"
                               f"{' and gradients' if grads else ''})")
        return outcome

    def _variant(self, ctx: CheckContext, args: Any, batched: list[int], label: str,
                 outcome: Outcome) -> str | None:
        """vmap with the inputs at ``batched`` batched against a loop; findings go to
        ``outcome``. Returns the message when the rule declines (NotImplementedError)."""
        import torch

        from gradverify.checks import _calls as calls

        info = ctx.info
        generator = ctx.generator("vmap")
        stacks = {i: torch.stack([args.values[i].detach()] + [
            args.values[i].detach() + 0.1 * calls.randn_like(args.values[i], generator)
            for _ in range(BATCH - 1)]) for i in batched}

        def call(*tensors: Any) -> Any:
            values = list(args.values)
            for i, t in zip(batched, tensors):
                values[i] = t
            if info.writes_inputs:  # as users call an in-place Function: on a non-leaf
                values = [v.clone() if isinstance(v, torch.Tensor) else v for v in values]
            out = info.function.apply(*values)
            return out if isinstance(out, tuple) else (out,)

        inputs = [stacks[i] for i in batched]
        loop = [call(*[t[b] for t in inputs]) for b in range(BATCH)]
        rule = "register_vmap rule" if info.has(Capability.SCHEMA) else "vmap staticmethod"
        # non-tensor outputs (an int beside a Tensor[]) are not batched: out_dims None
        out_dims: Any = tuple(0 if _tensors_in(o) else None for o in loop[0])
        try:
            mapped = torch.func.vmap(call, out_dims=out_dims)(*inputs)
        except NotImplementedError as exc:
            return str(exc) or "NotImplementedError"
        except Exception as exc:  # noqa: BLE001 -- user code or torch.func
            outcome.add(Finding("GV313", Severity.ERROR,
                                f"torch.func.vmap{label} raised "
                                f"{calls.describe_exception(exc)}",
                                location=calls.user_location(exc, info) or ctx.forward_location,
                                hint=f"check the {rule}'s returned out_dims" + (
                                    "" if info.has(Capability.SCHEMA) else
                                    ", or use generate_vmap_rule = True if forward is plain "
                                    "torch ops")))
            return None
        for j, out in enumerate(mapped):
            self._against_loop(ctx, j, out, [row[j] for row in loop], label, rule, outcome)
        if not info.has(Capability.SCHEMA):  # torch.func.grad cannot differentiate through an op
            self._gradients(ctx, call, inputs, [args.names[i] for i in batched], outcome)
        return None

    @staticmethod
    def _against_loop(ctx: CheckContext, j: int, out: Any, rows: list[Any], label: str,
                      rule: str, outcome: Outcome) -> None:
        """GV311 when vmap's output ``j`` (a tensor, a list of them, or a value that is not
        batched) differs from the loop's ``rows``."""
        import torch

        from gradverify.checks import _compare as cmp

        pairs = [(out, torch.stack(rows))] if isinstance(out, torch.Tensor) else \
            [(o, torch.stack([row[k] for row in rows])) for k, o in enumerate(out)] \
            if _tensors_in(out) else []
        if not pairs and all(row == out for row in rows):
            return
        for got, expected in pairs or [(out, rows[0])]:
            same = isinstance(got, torch.Tensor) and expected.shape == got.shape and \
                torch.allclose(got, expected, rtol=1e-7, atol=1e-9)
            if same:
                continue
            shapes = (f"shapes {list(got.shape)} vs {list(expected.shape)}"
                      if isinstance(got, torch.Tensor) else f"{got!r} vs {expected!r}")
            worst = cmp.max_difference(got, expected)[0] if isinstance(got, torch.Tensor) \
                and expected.shape == got.shape else float("inf")
            outcome.add(Finding(
                "GV311", Severity.ERROR,
                f"vmap's output {j}{label} differs from a loop over the batch "
                f"(by {worst:.3g}, {shapes})", output=j, location=ctx.forward_location,
                hint=f"the {rule} returns wrong values or out_dims"))
            return

    @staticmethod
    def _gradients(ctx: CheckContext, call: Any, inputs: list[Any], names: list[str],
                   outcome: Outcome) -> None:
        import torch

        from gradverify.checks import _calls as calls
        from gradverify.checks import _compare as cmp

        generator = ctx.generator("vmap-grad")
        probe = call(*[t[0] for t in inputs])
        weights = [calls.randn_like(o, generator) if isinstance(o, torch.Tensor)
                   and (o.is_floating_point() or o.is_complex()) else None for o in probe]

        def loss(*tensors: Any) -> Any:
            return sum(((o * w).sum().real for o, w in zip(call(*tensors), weights)
                        if w is not None), torch.zeros((), dtype=torch.float64))

        argnums = tuple(range(len(inputs)))
        try:
            batched = torch.func.vmap(torch.func.grad(loss, argnums=argnums))(*inputs)
        except Exception as exc:  # noqa: BLE001 -- user code or torch.func
            outcome.add(Finding("GV313", Severity.ERROR,
                                f"vmap(grad(...)) raised {calls.describe_exception(exc)}",
                                location=calls.user_location(exc, ctx.info) or ctx.location,
                                hint="backward must work on batched tensors under vmap"))
            return
        for b in range(inputs[0].shape[0]):
            leaves = [t[b].detach().clone().requires_grad_(True) for t in inputs]
            expected = torch.autograd.grad(loss(*leaves), leaves, allow_unused=True)
            for k, name in enumerate(names):
                want = expected[k] if expected[k] is not None else torch.zeros_like(leaves[k])
                if not torch.allclose(batched[k][b], want, rtol=1e-7, atol=1e-9):
                    outcome.add(Finding(
                        "GV312", Severity.ERROR,
                        f"per-sample gradient for {name!r} under vmap differs from a loop "
                        f"(sample {b}, by {cmp.max_difference(batched[k][b], want)[0]:.3g})",
                        input=name, location=ctx.location,
                        hint="backward (or the vmap rule) mixes samples of the batch"))
                    return


def _tensors_in(value: Any) -> bool:
    """A tensor, or a list or tuple of them (an op's Tensor[] output): what vmap batches."""
    import torch

    return isinstance(value, torch.Tensor) or (
        isinstance(value, (list, tuple)) and bool(value)
        and all(isinstance(v, torch.Tensor) for v in value))


def _unsupported(info: Any) -> str | None:
    """Why the target has no vmap rule to check, or None."""
    if info.has(Capability.SCHEMA) and info.vmap is None:
        return "no register_vmap rule: torch.vmap runs the op once per sample, which needs no check"
    from gradverify.checks import _calls as calls

    if info.vmap is None and calls.old_style(info):
        return (f"vmap unsupported: {calls.NO_TORCH_FUNC}; then set generate_vmap_rule = True "
                "or define a vmap staticmethod")
    if info.vmap is None:
        return ("vmap unsupported: set generate_vmap_rule = True or define a vmap staticmethod")
    if (formula := info.detail(Formula)) and formula.style == "ctx":
        return (f"vmap unsupported: {info.vmap} needs setup_context style (forward without "
                "ctx, plus a setup_context staticmethod)")
    return None


CHECK = VmapCheck()
