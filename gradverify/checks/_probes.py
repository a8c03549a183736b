"""Probes that watch a Function from the inside, shared by several checks: whether backward is
linear in its incoming gradient, which of forward/backward raised, and what backward receives
(tensors that forward changes after saving them: ``_saved_changes``). Imported only from inside
a check's ``run`` (it imports torch)."""
from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from gradverify import frames, torchcompat
from gradverify.checks._calls import randn_like
from gradverify.checks._tensors import dense, unravel
from gradverify.targets import Target
from gradverify.targets.introspection import unwrap as _unwrap

# ----------------------------------------------------------------------------- linearity

SCALE = -2.0
"""backward(SCALE * g) must equal SCALE * backward(g): a negative, non-unit factor, so that a
backward that drops or clamps negative incoming gradients, uses their sign or magnitude, or adds
a term of its own, cannot satisfy it. A power of two, so that scaling is exact in every dtype: a
linear backward gives the scaled result bit for bit (float32 kernels included)."""


@dataclass
class Nonlinear:
    """An input whose gradient is not linear in the incoming gradient."""

    input: int
    """Position among the differentiable inputs."""
    error: float
    """max |backward(SCALE g) - SCALE backward(g)|."""
    scale: float
    index: tuple[int, ...]
    kind: str
    """What the backward does to the incoming gradient, in words."""


_BLOCK = 4093
"""Above this many elements a signed incoming gradient is a random block of this (prime)
length repeated: drawing 1e6 normal numbers costs about 20 backward passes of an elementwise
Function, and any sign pattern serves a test of linearity."""


def _signed_like(t: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    n = t.numel()
    if n <= 16 * _BLOCK:
        return randn_like(t, generator)
    block = randn_like(torch.empty(_BLOCK, dtype=t.dtype), generator)
    return block.repeat(-(-n // _BLOCK))[:n].reshape(t.shape).to(t.device)


def _vjp(outputs: Sequence[torch.Tensor], leaves: Sequence[torch.Tensor],
         grads: Sequence[torch.Tensor]) -> list[torch.Tensor | None]:
    got = torch.autograd.grad(list(outputs), list(leaves), list(grads), retain_graph=True,
                              allow_unused=True)
    return [dense(g) if g is not None else None for g in got]


def _zero_if_none(g: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    return torch.zeros(like.shape, dtype=like.dtype, device=like.device) if g is None else g


def _tolerance(*tensors: torch.Tensor) -> float:
    """Relative slack for round-off: 1000 ulps of the least precise dtype involved."""
    eps = max((torch.finfo(t.dtype).eps for t in tensors
               if t.is_floating_point() or t.is_complex()), default=1e-16)
    return max(1e-12, 1000 * eps)


def linearity(outputs: Sequence[torch.Tensor], leaves: Sequence[torch.Tensor],
              generator: torch.Generator, *, nondet_tol: float = 0.0) -> list[Nonlinear]:
    """Compare backward(SCALE g) with SCALE backward(g) for a signed random g: two backward
    passes over an existing graph (``outputs`` computed from ``leaves``; retained). torch's
    gradcheck only feeds backward non-negative incoming gradients (one-hot +1 in slow mode,
    ``torch.rand`` in fast mode), so a backward that drops negative ones passes it."""
    g = [_signed_like(o, generator) for o in outputs]
    try:
        once = _vjp(outputs, leaves, g)
        scaled = _vjp(outputs, leaves, [SCALE * x for x in g])
    except Exception:  # noqa: BLE001 -- backward raised: the caller reports that elsewhere
        return []
    found = []
    for i, (a, b) in enumerate(zip(once, scaled)):
        if a is None and b is None:
            continue
        like = a if a is not None else b
        assert like is not None
        a, b = _zero_if_none(a, like), _zero_if_none(b, like)
        if a.shape != b.shape or not a.numel():
            continue
        err = torch.sub(b, a, alpha=SCALE).abs()  # b - SCALE * a, in one pass
        worst = float(err.max())
        scale = max(abs(SCALE) * float(a.abs().max()), float(b.abs().max()))
        if not (math.isfinite(worst) and math.isfinite(scale)):
            # inf or NaN in a gradient (sqrt at 0, say) is gradcheck's finding; here only a
            # different pattern of them counts
            finite = torch.isfinite(a) & torch.isfinite(b)
            same = torch.isfinite(a) == torch.isfinite(b)
            err = torch.where(finite, err, torch.where(same, 0.0, math.inf))
            worst = float(err.max())
            kept = torch.where(finite, torch.maximum(abs(SCALE) * a.abs(), b.abs()), 0.0)
            scale = float(kept.max())
        if worst <= _tolerance(like, *outputs) * scale + nondet_tol:
            continue
        flat = int(torch.argmax(err))
        found.append(Nonlinear(i, worst, scale, unravel(flat, tuple(err.shape)),
                               _what(outputs, leaves, g, i)))
    return found


def _what(outputs: Sequence[torch.Tensor], leaves: Sequence[torch.Tensor],
          g: list[torch.Tensor], i: int) -> str:
    """Name what backward does to the incoming gradient, from a few more backward passes."""
    def grad(gs: list[torch.Tensor]) -> torch.Tensor:
        got = _vjp(outputs, leaves, gs)[i]
        return _zero_if_none(got, leaves[i].detach())

    def same(x: torch.Tensor, y: torch.Tensor) -> bool:
        scale = float(torch.maximum(x.abs().max(), y.abs().max())) if x.numel() else 0.0
        return bool(((x - y).abs() <= _tolerance(x, *outputs) * scale + 1e-300).all())

    def zero(x: torch.Tensor) -> bool:
        return not bool(x.ne(0).any())

    try:
        base = grad(g)
        if not zero(grad([torch.zeros_like(x) for x in g])):
            return "it adds a term that does not depend on the incoming gradient"
        negative = grad([x.clamp(max=0) if not x.is_complex() else x for x in g])
        positive = grad([x.clamp(min=0) if not x.is_complex() else x for x in g])
        if zero(negative) and not zero(positive) and not all(x.is_complex() for x in g):
            return "negative incoming gradients are dropped"
        if zero(positive) and not zero(negative) and not all(x.is_complex() for x in g):
            return "positive incoming gradients are dropped"
        if same(grad([-x for x in g]), base) and not zero(base):
            return "it ignores the sign of the incoming gradient (abs or square)"
        doubled = grad([2 * x for x in g])
        if same(doubled, 4 * base):
            return "it squares the incoming gradient"
        if same(doubled, base):
            return "it does not scale with the incoming gradient (normalised, clipped or ignored)"
    except Exception:  # noqa: BLE001 -- a diagnosis only
        pass
    return "it clamps, masks or rescales the incoming gradient"


# ----------------------------------------------------------------------------- who raised


def raised_in(exc: BaseException, info: Target) -> str | None:
    """``forward``, ``backward``, ``setup_context``, ``jvp`` or ``vmap``: the innermost of the
    Function's own methods on the traceback of ``exc``, or None when none is."""
    codes: dict[Any, str] = {}
    for name in ("forward", "backward", "vjp", "setup_context", "jvp", "vmap"):
        fn = _unwrap(getattr(info.function, name, None))
        code = getattr(fn, "__code__", None)
        # torch's defaults (vjp calling backward, jvp and vmap raising) are not the Function's
        if code is not None and frames.owner(code) is not frames.Owner.TORCH:
            codes.setdefault(code, "backward" if name == "vjp" else name)
    found = None
    for code in frames.traceback_codes(exc):
        found = codes.get(code, found)
    return found


# ------------------------------------------------------------------------- what backward receives


@contextlib.contextmanager
def observed_backward(info: Target) -> Iterator[list[tuple[Any, ...]]]:
    """Records the incoming gradients of every call of the Function's backward while active
    (autograd looks backward up at call time)."""
    calls: list[tuple[Any, ...]] = []
    name = "backward" if "backward" in _own(info.function) else "vjp"
    original = info.function.__dict__.get(name)
    inherited = getattr(info.function, name)

    def backward(ctx: Any, *grads: Any) -> Any:
        calls.append(grads)
        return inherited(ctx, *grads)

    setattr(info.function, name, staticmethod(backward))
    try:
        yield calls
    finally:
        if original is not None:
            setattr(info.function, name, original)
        else:
            delattr(info.function, name)


def _own(cls: type) -> set[str]:
    """The attributes a Function class and its bases define, up to torch's machinery."""
    machinery = torchcompat.function_machinery()
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass in machinery:
            break
        names.update(vars(klass))
    return names
