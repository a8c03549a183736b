"""The componentwise condition of the reference's math: the allowance the error-baseline rule
gives an element that is past plain PyTorch's own error (docs/checks.md, "The error-baseline
rule").

A kernel that uses another correct algorithm than its reference (a matmul DFT against an FFT,
Welford's variance against a two-pass one, a loop against ``torch.sum``) rounds at other
places than plain PyTorch does, and its error can exceed the baseline's by more than ``k``
where the math itself is ill-conditioned. What no correct algorithm in that dtype can avoid
is the error that one rounding of every input (and incoming gradient) causes:

    A_j  =  eps * sum_i |d y_j / d z_i| * |z_i|

for an element ``y_j`` of an output (``z`` the floating inputs) or of an input's gradient (``z``
the inputs and the incoming gradients: the gradient is a function of both). It is computed in
float64 through the reference, with autograd (once more for a gradient), for at most
``MAX_ELEMENTS`` elements per tensor: the elements past the rule's limit, the largest errors
first. An element within ``c`` times its own ``A_j`` (``c`` is 10) is a correct algorithm's
rounding; a wrong mask, a wrong factor or a float16 accumulation is orders past it, a missing
``eps`` several times. The measurements that chose ``c`` (bench/baseline_algorithms.py, 60
seeds: every correct algorithm within 1.9, every planted precision bug past 37) are in
docs/checks.md.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gradverify.targets import op_calls as opcalls

if TYPE_CHECKING:
    import torch

    from gradverify.case.context import CheckContext

C = 10.0
MAX_ELEMENTS = 64


def factor(ctx: CheckContext) -> float:
    """``c``: the ``condition`` option (0 takes the allowance away), else 10."""
    given = ctx.options.get("condition")
    return C if given is None else float(given)


class Condition:
    """The float64 reference's sensitivities at one seed's inputs, built when first asked
    for (most tensors are within the rule's limit and never need it)."""

    def __init__(self, ctx: CheckContext, values: list[Any], grads: list[Any] | None,
                 diff: list[int]) -> None:
        self._ctx, self._values, self._grads, self._diff = ctx, values, grads, diff
        self._built: tuple[list[Any], list[Any], list[Any], list[Any]] | None = None

    def _build(self) -> tuple[list[Any], list[Any], list[Any], list[Any]]:
        """(leaves, outputs, incoming-gradient leaves, gradients with their graph)."""
        import torch

        if self._built is None:
            leaves = [v.detach().to(torch.float64).requires_grad_(True)
                      if _floating(v) else v for v in self._values]
            out = opcalls.flat_outputs(
                self._ctx.reference(*opcalls.op_values(self._ctx.info, leaves)))
            outs = list(out) if isinstance(out, tuple) else [out]
            pairs = [(o, g.detach().to(torch.float64).requires_grad_(True))
                     for o, g in zip(outs, self._grads or [])
                     if _floating(o) and o.requires_grad and _floating(g)]
            wanted = [leaves[i] for i in self._diff]
            gradients = list(torch.autograd.grad(
                [o for o, _ in pairs], wanted, [g for _, g in pairs], create_graph=True,
                allow_unused=True)) if pairs else [None] * len(wanted)
            self._built = leaves, outs, [g for _, g in pairs], gradients
        return self._built

    def of_output(self, index: int, elements: torch.Tensor) -> torch.Tensor | None:
        """sum_i |dy/dz_i| |z_i| for the flat ``elements`` of output ``index``."""
        leaves, outs, _, _ = self._build()
        return _sensitivity(outs[index] if index < len(outs) else None,
                            [v for v in leaves if _floating(v)], elements)

    def of_gradient(self, position: int, elements: torch.Tensor) -> torch.Tensor | None:
        """The same for the flat ``elements`` of the gradient of the input at ``diff``'s
        ``position``, over the inputs and the incoming gradients."""
        leaves, _, incoming, gradients = self._build()
        return _sensitivity(gradients[position],
                            [v for v in leaves if _floating(v)] + incoming, elements)


def worst_ratio(condition: Condition, index: int, output: bool, error: torch.Tensor,
                limit: float, eps: float) -> float | None:
    """The largest error / (eps * A) over the elements whose error (flat, float64, infinite
    where the value is not finite) is past ``limit``; None where the reference cannot give
    its sensitivities (no double backward, it raised), and the rule stands as it is."""
    import torch

    over = torch.nonzero(error > limit).flatten()
    if not len(over):
        return 0.0
    if not bool(torch.isfinite(error[over]).all()):
        return float("inf")
    order = over[torch.argsort(error[over], descending=True)]
    half = MAX_ELEMENTS // 2
    rest = order[half:]
    if len(rest) > half:  # the largest errors, and evenly spaced ones of the rest
        rest = rest[torch.linspace(0, len(rest) - 1, half).round().long()]
    picked = torch.cat([order[:half], rest])
    try:  # user code: the reference again, and its double backward
        sens = (condition.of_output(index, picked) if output
                else condition.of_gradient(index, picked))
    except Exception:  # noqa: BLE001 -- no allowance where the math cannot say
        return None
    if sens is None:
        return None
    allowed = eps * sens
    ratio = torch.where(allowed > 0, error[picked] / allowed.clamp_min(1e-300),
                        torch.full_like(allowed, float("inf")))
    return float(ratio.max())


def _sensitivity(value: Any, wrt: list[Any], elements: torch.Tensor) -> torch.Tensor | None:
    import torch

    if not _floating(value) or not value.requires_grad or not wrt:
        return None
    flat = value.reshape(-1)
    found = []
    for e in elements.tolist():
        parts = torch.autograd.grad(flat[e], wrt, retain_graph=True, allow_unused=True)
        found.append(sum((p.abs() * z.detach().abs()).sum() for p, z in zip(parts, wrt)
                         if p is not None))
    return torch.stack([torch.as_tensor(f, dtype=torch.float64) for f in found])


def _floating(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor) and value.is_floating_point()
