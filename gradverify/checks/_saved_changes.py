"""Tensors that forward changes in place after passing them to ``save_for_backward`` (autograd
records versions only when forward returns, so backward silently reads the changed value): which
ones, where they were saved and changed, a run with them saved as clones, and the directional
difference that tells whether the gradient is wrong because of it. Also the lines where backward
writes into tensors it was given. Imported only from inside a check's ``run`` (it imports
torch)."""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from gradverify import frames
from gradverify.checks import _calls as calls
from gradverify.checks import _rewrite
from gradverify.checks import _tensors as tk
from gradverify.checks._tensors import dense, version
from gradverify.results import Location
from gradverify.targets import Target


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


def writes_during(info: Target, tensors: Sequence[torch.Tensor], run: Callable[[], Any]
                  ) -> list[Location | None]:
    """Run ``run()`` (backward) watching ``tensors``: per tensor, the user's line where an
    in-place write first moved its version (``x.mul_(2)``, ``x[0] = 1``, ``x /= 2``), or None
    when none did (or its version cannot be read)."""
    watch = _Watch(info, saved=[_Saved(t, v, None, 0, k) for k, t in enumerate(tensors)
                                if (v := version(t)) is not None])
    with _VersionWatch(watch):
        run()
    where: list[Location | None] = [None] * len(tensors)
    for saved in watch.saved:
        where[saved.position] = saved.changed_at
    return where


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
