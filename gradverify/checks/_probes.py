"""Probes that watch a Function from the inside, shared by several checks: whether backward is
linear in its incoming gradient, which of forward/backward raised, tensors that forward changes
after saving them, and what backward receives. Imported only from inside a check's ``run`` (it
imports torch)."""
from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from gradverify import frames, torchcompat
from gradverify.checks._tensors import dense, unravel, version
from gradverify.results import Location
from gradverify.targets import Target

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
    from gradverify.checks._calls import randn_like

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
    return torch.zeros(like.shape, dtype=like.dtype) if g is None else g


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
    from gradverify.targets.introspection import unwrap as _unwrap

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


# ----------------------------------------------------------------------------- saved, then changed


@dataclass
class SavedThenChanged:
    """A tensor forward passed to ``save_for_backward`` and then changed in place: autograd
    records versions when forward returns, so backward silently reads the changed value."""

    label: str
    """``input 'x'``, ``output 0`` or ``an intermediate tensor``."""
    saved_at: Location | None
    changed_at: Location | None
    call: int
    """Which save_for_backward call of the forward (0-based), and ``position`` in it."""
    position: int
    changed_text: str = ""
    """The source of the line that changed it, as written."""

    def describe(self) -> str:
        saved = f" (saved at {self.saved_at})" if self.saved_at else ""
        changed = f" at {self.changed_at}" if self.changed_at else ""
        return (f"forward changes {self.label}{saved} in place{changed}, after passing it to "
                "save_for_backward: backward reads the changed value, not the one saved")

    def hint(self) -> str:
        """How to fix it, quoting the write as written (``y /= s``). Saving an output is
        fine (backward may read what forward returns): only the order is at fault then."""
        from gradverify.checks import _rewrite

        write = _rewrite.parse(self.changed_text)
        if self.label.startswith("output"):
            return ("saving an output is fine: call save_for_backward after its last in-place "
                    "change" + (f" (after `{write.written}`)" if write else "")
                    + ", so that backward reads the value forward returns")
        return (f"{write.advice()}, or save it after the last in-place change"
                if write else "save it after the last in-place change, save a clone, or change "
                "a copy (t = t * a) instead of the saved tensor")


@dataclass
class _Saved:
    tensor: torch.Tensor
    version: int
    saved_at: Location | None
    call: int
    position: int
    changed_at: Location | None = None
    changed_text: str = ""


@dataclass
class _Watch:
    info: Target
    saved: list[_Saved] = field(default_factory=list)
    calls: int = 0
    freeze: set[tuple[int, int]] = field(default_factory=set)
    """(call, position) pairs to save as clones taken at save time (the frozen run)."""


def _user_line(info: Target) -> Location | None:
    """The user's line that called into torch (forward's, as a rule)."""
    found = frames.calling_user_frame(info.source_file)
    return found.location() if found is not None else None


class _VersionWatch(TorchFunctionMode):
    """After every torch call in forward, notes where a saved tensor's version moved."""

    def __init__(self, watch: _Watch) -> None:
        super().__init__()
        self.watch = watch

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        result = func(*args, **(kwargs or {}))
        for saved in self.watch.saved:
            if saved.changed_at is None and version(saved.tensor) != saved.version:
                found = frames.calling_user_frame(self.watch.info.source_file)
                if found is not None:
                    saved.changed_at, saved.changed_text = found.location(), found.text()
        return result


@contextlib.contextmanager
def _watching(watch: _Watch) -> Iterator[None]:
    from torch.autograd.function import FunctionCtx

    original = FunctionCtx.save_for_backward

    def save_for_backward(ctx: Any, *tensors: Any) -> None:
        call = watch.calls
        watch.calls += 1
        where = _user_line(watch.info)
        chosen = []
        for position, t in enumerate(tensors):
            if isinstance(t, torch.Tensor) and (call, position) in watch.freeze:
                t = t.detach().clone()
            elif isinstance(t, torch.Tensor):
                at_save = version(t)
                if at_save is not None:
                    watch.saved.append(_Saved(t, at_save, where, call, position))
            chosen.append(t)
        original(ctx, *chosen)

    # patched while the probe runs (torch types the method with its own signature)
    FunctionCtx.save_for_backward = save_for_backward  # type: ignore[method-assign,assignment]
    try:
        with _VersionWatch(watch):
            yield
    finally:
        FunctionCtx.save_for_backward = original  # type: ignore[method-assign]


def saved_then_changed(info: Target, args: Any) -> list[SavedThenChanged]:
    """The tensors one forward call (on ``args``, an ``inputs.Args``) changes in place after
    passing them to save_for_backward. mark_dirty Functions run on clones, as always."""
    from gradverify.checks import _calls as calls
    from gradverify.checks import _tensors as tk

    watch = _Watch(info)
    with _watching(watch):
        applied = calls.apply(info, args)
    inputs = {n: v for n, v in zip(args.names, args.values) if tk.is_tensor(v)}
    found = []
    for saved in watch.saved:
        if version(saved.tensor) == saved.version:
            continue
        kind, name = tk.classify(saved.tensor, inputs, dict(applied.tensors))
        label = {"input": f"input {name!r}", "output": f"output {name}"}.get(
            kind, "an intermediate tensor")
        found.append(SavedThenChanged(label, saved.saved_at, saved.changed_at, saved.call,
                                      saved.position, saved.changed_text))
    return found


@contextlib.contextmanager
def frozen_saves(info: Target, which: Sequence[SavedThenChanged]) -> Iterator[None]:
    """While active, the given save_for_backward arguments are saved as clones taken at the
    call: backward then reads the values forward meant to save."""
    watch = _Watch(info, freeze={(s.call, s.position) for s in which})
    with _watching(watch):
        yield


def directional_difference(info: Target, args: Any, grads: Sequence[Any],
                           generator: torch.Generator, eps: float
                           ) -> tuple[float, list[torch.Tensor]]:
    """<g, J u> by a central difference along a random direction u over the differentiable
    inputs (two forward calls): what <backward(g), u> must equal. Returns it and u."""
    from gradverify.checks import _calls as calls

    diff = args.diff_positions
    directions = [calls.randn_like(args.values[i], generator) for i in diff]
    fn = calls.tensor_function(info, args, diff, list(range(len(grads))))
    base = [args.values[i].detach() for i in diff]
    with torch.no_grad():
        plus = fn(*[b + eps * u for b, u in zip(base, directions)])
        minus = fn(*[b - eps * u for b, u in zip(base, directions)])
    total = 0.0
    for p, m, g in zip(plus, minus, grads):
        if isinstance(p, torch.Tensor) and isinstance(g, torch.Tensor) and \
                (p.is_floating_point() or p.is_complex()):
            total += float((g.conj() * (p - m) / (2 * eps)).real.sum())
    return total, directions


def agrees(gradients: Sequence[torch.Tensor | None], directions: Sequence[torch.Tensor],
           numeric: float, rtol: float = 1e-3, atol: float = 1e-6) -> bool:
    """<gradients, directions> matches the finite difference ``numeric``."""
    analytic = sum(float((dense(g).conj() * u).real.sum())
                   for g, u in zip(gradients, directions) if g is not None)
    return abs(analytic - numeric) <= atol + rtol * abs(numeric)


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
