"""Shrinking a failing case: pure functions over sizes and simplifications, given a predicate
("still fails the same way") that the caller runs (``run.smallest``). Imports no torch.

Sizes shrink towards 1, one at a time: each tries 1, 2, half its size, then one less, and a
smaller size that still fails is kept and shrunk further, until no size can shrink (hypothesis's
shrinker is the model: greedy, deterministic, every step a smaller case). Then simplifications
(a random init made ``ones``) are kept where the case still fails with them. A ``Budget`` bounds
the predicate's runs and their time: shrinking ends with the smallest case found so far.
"""
from __future__ import annotations

import re
import time
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from gradverify.spec.yamlio import flow_scalar
from gradverify.specmodel import (
    FLOATING,
    TOLERANCE_KEYS,
    Arg,
    Case,
    SeqArg,
    TensorArg,
    ValueArg,
)

K = TypeVar("K", bound=Hashable)
T = TypeVar("T", bound=Hashable)

MAX_RUNS = 40
"""Candidate cases tried per failing check, at most."""
MAX_SECONDS = 5.0
"""Seconds spent shrinking one failing check, at most (it ends with what it has)."""
CASE_RUNS = 100
CASE_SECONDS = 10.0
"""The same, for every failing check of one case together."""


@dataclass
class Budget:
    """How many more candidates may run, and until when (``clock``, seconds)."""

    runs: int = MAX_RUNS
    seconds: float = MAX_SECONDS
    clock: Callable[[], float] = time.monotonic
    spent: int = 0
    """Candidates run so far."""
    within: Budget | None = None
    """A budget this one's runs are also taken from (a case's, over its checks')."""
    cost: float = 0.0
    """Seconds the next candidate is expected to take: at first what the caller says (the
    failed check's own run), then what the candidate before it took (a candidate is never
    larger than the one before it)."""
    _deadline: float | None = field(default=None, repr=False)
    _began: float | None = field(default=None, repr=False)

    def take(self, cost: float | None = None) -> bool:
        """Whether one more candidate may run (and count it, here and ``within``): one that
        would end after the deadline is not begun. ``cost``: its seconds as the budget it is
        ``within`` judged them (of its own check's candidates); else this one's own judgement."""
        now = self.clock()
        if self._deadline is None:
            self._deadline = now + self.seconds
        if cost is None:
            if self._began is not None:  # the candidate run since the last take
                self.cost = now - self._began
            cost = self.cost
        if self.spent >= self.runs or now + cost > self._deadline or \
                (self.within is not None and not self.within.take(cost)):
            return False
        self._began = now
        self.spent += 1
        return True


def smaller(size: int) -> list[int]:
    """The sizes to try in place of ``size``, smallest first: 1, 2 (the smallest size that
    is not 1, where a bug needs one), half, one less."""
    return sorted({s for s in (1, 2, size // 2, size - 1) if 1 <= s < size})


def shrink_sizes(sizes: Mapping[K, int], fails: Callable[[Mapping[K, int]], bool],
                 budget: Budget) -> dict[K, int]:
    """The smallest sizes found, from ``sizes`` (which fail), that still ``fails``: each size
    in turn made as small as it goes, rounds repeated until none shrinks."""
    current = dict(sizes)
    shrunk = True
    while shrunk:
        shrunk = False
        for key in current:
            for candidate in _candidates(current, key):
                if not budget.take():
                    return current
                if fails(candidate):
                    current, shrunk = candidate, True
                    break
    return current


def _candidates(current: dict[K, int], key: K) -> Iterator[dict[K, int]]:
    for size in smaller(current[key]):
        yield {**current, key: size}


def simplify(choices: Sequence[T], fails: Callable[[frozenset[T]], bool],
             budget: Budget) -> frozenset[T]:
    """The simplifications (``choices``, in order) kept: each is tried on top of those kept
    before it and kept when the case still ``fails``."""
    kept: frozenset[T] = frozenset()
    for choice in choices:
        if not budget.take():
            break
        if fails(kept | {choice}):
            kept = kept | {choice}
    return kept


# ----------------------------------------------------------------------------- a spec's case

SizeKey = tuple[str, str | int]
"""``("dim", "N")`` for a named dim; ``("size", 4)`` for every literal size 4 of the case's
shapes, shrunk together (equal sizes are usually one dim that the spec did not name)."""
RANDOM_INITS = frozenset({"randn", "rand", "uniform", "normal"})
"""Inits whose values a simpler one (``ones``) may replace."""


def sizes_of(case: Case) -> dict[SizeKey, int]:
    """What can shrink in ``case``: its dims, and its tensors' literal sizes (above 1)."""
    sizes: dict[SizeKey, int] = {("dim", name): size for name, size in case.dims.items()
                                 if size > 1}
    for arg in _tensors(case.args):
        for size in arg.shape or ():
            if isinstance(size, int) and size > 1:
                sizes[("size", size)] = size
    return sizes


def resized(case: Case, sizes: Mapping[SizeKey, int], name: str | None = None) -> Case:
    """``case`` at ``sizes`` (from ``sizes_of``), named ``name`` (default: its own)."""
    dims = {d: sizes.get(("dim", d), size) for d, size in case.dims.items()}
    args = tuple((n, _resized_arg(a, sizes)) for n, a in case.args)
    return replace(case, name=name or case.name, dims=dims, args=args)


def _resized_arg(arg: Arg, sizes: Mapping[SizeKey, int]) -> Arg:
    if isinstance(arg, TensorArg) and arg.shape is not None:
        return replace(arg, shape=tuple(sizes.get(("size", s), s) if isinstance(s, int) else s
                                        for s in arg.shape))
    if isinstance(arg, SeqArg):
        return replace(arg, items=tuple(_resized_arg(a, sizes) for a in arg.items))
    return arg


def simplifications(case: Case) -> list[int]:
    """Positions of ``case.args`` whose random values ``ones`` may replace."""
    return [i for i, (_, arg) in enumerate(case.args)
            if isinstance(arg, TensorArg) and arg.shape is not None
            and arg.dtype in FLOATING and arg.resolved_init in RANDOM_INITS]


def simplified(case: Case, positions: Collection[int]) -> Case:
    """``case`` with the tensors at ``positions`` made of ones."""
    return replace(case, args=tuple(
        (n, replace(a, init="ones", params={}) if i in positions and isinstance(a, TensorArg)
         else a) for i, (n, a) in enumerate(case.args)))


def _tensors(args: Iterable[tuple[str | None, Arg]]) -> Iterator[TensorArg]:
    for _, arg in args:
        if isinstance(arg, TensorArg):
            yield arg
        elif isinstance(arg, SeqArg):
            yield from _tensors((None, a) for a in arg.items)


def case_yaml(case: Case) -> str:
    """``case`` as an item of a spec's ``cases:`` list, in flow style where it fits."""
    plain = re.fullmatch(r"[A-Za-z_][\w.-]*", case.name) and flow_scalar(case.name.replace(
        "-", "_")) == case.name.replace("-", "_")  # a dashed name reads as it is
    lines = [f"- name: {case.name if plain else flow_scalar(case.name)}"]
    if case.dims:
        lines.append(f"  dims: {_flow(dict(case.dims))}")
    if case.factory:
        lines.append(f"  factory: {flow_scalar(case.factory)}")
        if case.dtype != "float32":
            lines.append(f"  dtype: {case.dtype}")
    elif case.by_name:
        lines.append("  args:")
        lines += [f"    {flow_scalar(n)}: {_flow(_arg_value(a))}" for n, a in case.args]
    else:
        lines.append(f"  args: {_flow([_arg_value(a) for _, a in case.args])}")
    tolerance = {k: v for k, v in zip(TOLERANCE_KEYS, case.tolerance.astuple()) if v is not None}
    if tolerance:
        lines.append(f"  tolerance: {_flow(tolerance)}")
    if case.checks:  # what a case turns on or sets may be what makes it fail
        lines.append("  checks: " + _flow({name: dict(c.options) if c.enabled and c.options
                                           else c.enabled for name, c in case.checks.items()}))
    return "\n".join(lines)


class _Dim(str):
    """A dim's name where a spec reads one (a shape's entry, an int argument)."""


def _arg_value(arg: Arg) -> Any:
    """An argument as the spec's plain YAML value."""
    if isinstance(arg, ValueArg):
        return _Dim(arg.dim) if arg.dim else arg.value
    if isinstance(arg, SeqArg):
        items = [_arg_value(a) for a in arg.items]
        return items if arg.kind == "star" else {arg.kind: items}
    out: dict[str, Any] = {}
    if arg.shape is not None:
        out["shape"] = [_Dim(s) if isinstance(s, str) else s for s in arg.shape]
    else:
        out["values"] = arg.values
    if arg.dtype != "float32":
        out["dtype"] = _Dim(arg.dtype)
    if arg.requires_grad is not None:
        out["requires_grad"] = arg.requires_grad
    if arg.init:
        out["init"] = _Dim(arg.init)
    out.update({k: _Dim(v) if isinstance(v, str) else v for k, v in arg.params.items()})
    if arg.sorted:
        out["sorted"] = True
    if arg.device:
        out["device"] = _Dim(arg.device)
    return out


def _flow(value: Any) -> str:
    if isinstance(value, _Dim):
        return str(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{flow_scalar(k)}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    return flow_scalar(value)
