"""The dtype a target computes in inside, whatever dtype it is handed (docs/checks.md,
"Kernels that compute in float32").

A kernel (Triton, CUDA, C++) usually loads its inputs, converts them to float32, computes, and
stores the result in the output's dtype: handed float64, it returns float64 tensors that hold
float32 values. float64 finite differences of such a forward measure float32 round-off, so
gradcheck would blame a correct backward (GV121).

Detected from one forward call, under no_grad, on the case's float64 inputs nudged off the
float32 grid (each floating value times 1 + 2**-28 u, u in [-1, 1]: off the grid, yet large
enough to survive a cancellation such as (x + 1e5) - 1e5 in float64): when every finite floating
output lies on a narrower dtype's grid (bfloat16's 8 significant bits, float16's 11, float32's
24, tried in that order) and some output uses at least the last three of those bits, forward
computed in that dtype. A float64 computation on nudged inputs lands on a 24-bit grid with
probability 2**-29 per value; an integer-valued or coarsely quantized output (a rounding
Function's multiples of 0.25) uses only a few bits and is never taken for a kernel. A spec's
``computes_in:`` is over detection (``float64`` turns it off).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gradverify.checks.base import Outcome

if TYPE_CHECKING:
    import torch

    from gradverify.case.context import CheckContext
    from gradverify.case.inputs import Args
    from gradverify.checks.base import Outcome
    from gradverify.targets import Target

GRIDS = (("bfloat16", 8), ("float16", 11), ("float32", 24))
"""Narrower dtypes, narrowest first, with their significant bits."""
FULL_BITS = 3
"""A detected dtype's grid must be needed: some value uses one of its last three bits."""
NUDGE = 2.0**-28


def detect(info: Target, double: Args) -> str | None:
    """The narrower dtype forward computes in (``float32``, ...), or None: float64 inside, a
    forward that raises, or nothing to tell (no floating input or output)."""
    import torch

    values = [_nudged(v, i) if i in double.diff_positions else v
              for i, v in enumerate(double.values)]
    if len(values) == len(double.values) and all(v is w for v, w in zip(values, double.values)):
        return None  # nothing differentiable was nudged: outputs tell nothing
    try:
        with torch.no_grad():
            out = info.function.apply(*values)
    except Exception:  # noqa: BLE001 -- user code: the checks report forward's errors
        return None
    outs = [o for o in (out if isinstance(out, (tuple, list)) else (out,))
            if isinstance(o, torch.Tensor) and o.dtype == torch.float64 and o.numel()]
    finite = [o[torch.isfinite(o)] for o in outs]
    finite = [o for o in finite if o.numel()]
    if not finite:
        return None
    for name, bits in GRIDS:
        if all(_on_grid(o, bits) for o in finite) and \
                any(not _on_grid(o, bits - FULL_BITS) for o in finite):
            return name
    return None


def _nudged(value: Any, salt: int) -> Any:
    import torch

    if not isinstance(value, torch.Tensor) or value.dtype != torch.float64:
        return value
    generator = torch.Generator().manual_seed(1234 + salt)
    u = (torch.rand(value.shape, generator=generator, dtype=torch.float64) * 2 - 1
         ).to(value.device)
    with torch.no_grad():
        return value.detach() * (1 + NUDGE * u)


def _on_grid(t: torch.Tensor, bits: int) -> bool:
    """Every value of ``t`` has at most ``bits`` significant bits."""
    import torch

    mantissa, _ = torch.frexp(t)
    scaled = mantissa * 2.0**bits
    return bool((scaled == scaled.round()).all())


def finite_differences_skip(ctx: CheckContext) -> Outcome | None:
    """For a check that compares with finite differences: a skip when the target computes in
    float16 or bfloat16 inside, where no finite-difference step works (its round-off, 1e-3
    of the values, swamps any step small enough for the derivative). Only a ``reference:``
    judges such a kernel; without one the case verifies nothing."""
    if ctx.computes_in in (None, "float32"):
        return None
    judged = (f"the reference check judges it against {ctx.spec.reference}"
              if ctx.spec.reference else
              "name a plain-PyTorch `reference:` in the spec to have it judged")
    return Outcome.skip(f"forward computes in {ctx.computes_in} inside: finite differences "
                        f"cannot judge it; {judged}",
                        nothing_verified=not ctx.spec.reference)


def tolerance_note(ctx: CheckContext) -> str:
    """For a finite-difference check's summary: the tolerances it ran at, when the target
    computes in float32 inside (else nothing)."""
    if ctx.computes_in != "float32":
        return ""
    tol = ctx.tolerance
    said = "declared" if ctx.spec.computes_in else "detected"
    return (f"; forward computes in float32 inside ({said}): atol {tol.atol:g}, rtol "
            f"{tol.rtol:g}, eps {tol.eps:g}")
