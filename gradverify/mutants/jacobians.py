"""What a case's mutants are compared with: the original's gradients for fixed random incoming
gradients, and a sampled float64 Jacobian whose finite differences are taken once per case
(forward is the same for every mutant of backward) while each mutant reruns only backward."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from gradverify.case.context import CheckContext
from gradverify.case.inputs import Args
from gradverify.checks._calls import (
    NothingToDifferentiate,
    apply,
    differentiable_view,
    engine_grads,
    forward_backward,
    random_grads,
    tensor_function,
)
from gradverify.checks._jacobian import analytical_rows, numerical_columns
from gradverify.checks._tensors import is_strided
from gradverify.targets import Target

MAX_ENTRIES = 64
"""Rows (and columns) of each block compared; a larger output is seen through one random
projection, a larger input through a random sample of its elements."""


@dataclass
class Original:
    """The original backward on this case, for fixed random incoming gradients."""

    args: Args
    incoming: list[Any]
    positions: list[int]
    """The inputs that require grad (their indices among forward's arguments)."""
    gradients: list[torch.Tensor | None]

    def name(self, position: int) -> str | None:
        return self.args.names[position] if 0 <= position < len(self.args.names) else None

    def requires_grad(self, position: int) -> bool:
        return position in self.positions

    def zero(self, position: int) -> bool | None:
        """Whether the input's gradient is zero (None: it has none here)."""
        if position not in self.positions:
            return None
        grad = self.gradients[self.positions.index(position)]
        return grad is None or not is_strided(grad) or not bool(grad.detach().abs().sum() > 0)

    @property
    def floating(self) -> list[int]:
        """The inputs that are floating (or complex) tensors: those that can require grad."""
        return [i for i, v in enumerate(self.args.values) if isinstance(v, torch.Tensor)
                and (v.is_floating_point() or v.is_complex())]

    @property
    def scale(self) -> float:
        """The largest gradient element (for a relative tolerance)."""
        return max([float(_dense(g).abs().max()) for g in self.gradients
                    if g is not None and g.numel()] or [0.0])

    def same_shape(self, i: int, j: int) -> bool:
        values = self.args.values
        if max(i, j) >= len(values):
            return False
        a, b = values[i], values[j]
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) \
            and a.shape == b.shape and a.is_floating_point() and b.is_floating_point()


def original_gradients(ctx: CheckContext) -> Original:
    """The original's gradients of every input requiring grad, for random incoming ones."""
    args = ctx.args("double")
    positions = list(args.diff_positions)
    applied = apply(ctx.info, args)
    if not applied.differentiable or not positions:
        return Original(args, [], [], [])
    incoming = random_grads(applied, ctx.generator("mutants"))
    gradients = engine_grads(applied, incoming, positions)
    return Original(args, incoming, positions, [g.detach() if g is not None else None
                                                for g in gradients])


def gradient_difference(ctx: CheckContext, info: Target, original: Original) -> float | None:
    """The largest difference between ``info``'s gradients and the original's (None: the case
    has no gradient)."""
    if not original.positions:
        return None
    _, got = forward_backward(info, ctx.args("double"), original.incoming, original.positions)
    largest = 0.0
    for mine, theirs in zip(got, original.gradients):
        if mine is None or theirs is None:
            if mine is not None or theirs is not None:
                largest = max(largest, float(_dense(mine if mine is not None else theirs)
                                             .abs().max()))
            continue
        a, b = _dense(mine), _dense(theirs)
        if a.shape != b.shape:
            return float("inf")
        largest = max(largest, float((a - b).abs().max()) if a.numel() else 0.0)
    return largest


def _dense(t: Any) -> torch.Tensor:
    t = t.detach()
    return t if is_strided(t) else t.to_dense()


def _sample(n: int, generator: torch.Generator) -> torch.Tensor:
    if n <= MAX_ENTRIES:
        return torch.arange(n)
    return torch.randperm(n, generator=generator)[:MAX_ENTRIES].sort().values


@dataclass
class Jacobians:
    """A sampled block of each (output, input) pair: finite differences, taken once, and the
    entries where they decide nothing (a kink, or the original already disagrees)."""

    args: Args
    positions: list[int]
    outputs: list[int]
    inputs: list[torch.Tensor]
    rows: list[torch.Tensor]
    cols: list[torch.Tensor]
    central: list[list[torch.Tensor]]
    """[output][input]: [rows, cols] central differences."""
    blind: list[list[torch.Tensor]]
    atol: float
    rtol: float

    @classmethod
    def of(cls, ctx: CheckContext) -> Jacobians | None:
        """The case's sampled Jacobian, or None where it cannot be compared this way (complex
        or sparse tensors, nothing differentiable): those mutants go to the checks."""
        try:
            return cls._of(ctx)
        except Exception:  # noqa: BLE001 -- the checks will run the mutants instead
            return None

    @classmethod
    def _of(cls, ctx: CheckContext) -> Jacobians | None:
        view = differentiable_view(ctx)
        if isinstance(view, NothingToDifferentiate):
            return None
        tensors = [*view.inputs, *view.outputs]
        if any(t.is_complex() or not is_strided(t) for t in tensors):
            return None
        generator = ctx.generator("mutants-jacobian")
        args = ctx.args("double")
        positions, outputs = list(args.diff_positions), list(view.applied.differentiable)
        fn = tensor_function(ctx.info, args, positions, outputs)
        rows = [_sample(o.numel(), generator) if o.numel() <= MAX_ENTRIES
                else torch.randn(o.numel(), generator=generator, dtype=torch.float64)
                for o in view.outputs]
        cols = [_sample(x.numel(), generator) for x in view.inputs]
        tolerance = ctx.tolerance
        numeric = [numerical_columns(fn, view.inputs, i, cols[i], rows, tolerance.eps)
                   for i in range(len(view.inputs))]
        central = [[numeric[i][0][j] for i in range(len(view.inputs))]
                   for j in range(len(outputs))]
        blind = [[_kink(numeric[i][1][j], numeric[i][2][j], tolerance.atol)
                  for i in range(len(view.inputs))] for j in range(len(outputs))]
        found = cls(args, positions, outputs, view.inputs, rows, cols, central, blind,
                    tolerance.atol, tolerance.rtol)
        wrong = found._wrong(ctx.info)
        found.blind = [[b | w for b, w in zip(bs, ws)] for bs, ws in zip(blind, wrong)]
        return found

    def _wrong(self, info: Target) -> list[list[torch.Tensor]]:
        fn = tensor_function(info, self.args, self.positions, self.outputs)
        wrong = []
        for j in range(len(self.outputs)):
            analytic = analytical_rows(fn, self.inputs, j, self.rows[j])
            wrong.append([~((analytic[i][:, self.cols[i]] - c).abs()
                            <= self.atol + self.rtol * c.abs())
                          for i, c in enumerate(self.central[j])])
        return wrong

    def mismatch(self, info: Target) -> bool:
        """Whether ``info``'s backward disagrees with the finite differences where the
        original's agrees."""
        wrong = self._wrong(info)
        return any(bool((w & ~b).any()) for ws, bs in zip(wrong, self.blind)
                   for w, b in zip(ws, bs))


def _kink(left: torch.Tensor, right: torch.Tensor, atol: float) -> torch.Tensor:
    """Entries where the left and right differences disagree: no derivative to compare."""
    jump = (left - right).abs()
    return jump > torch.maximum(torch.full_like(jump, 10 * atol),
                                0.1 * torch.maximum(left.abs(), right.abs()))
