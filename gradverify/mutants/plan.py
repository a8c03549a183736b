"""The mutants of one target, the same list in every case of a run: source mutants of its
backward where its source can be read, value mutants of each input's gradient for every kind;
and how each is put in place (``install``)."""
from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable
from contextlib import AbstractContextManager as ContextManager
from dataclasses import dataclass, field
from typing import Any

from gradverify.errors import shown_path
from gradverify.mutants.install import Holder, holder, tapped
from gradverify.mutants.operators import probed, source_mutants
from gradverify.mutants.source import BackwardSource, SourceMutant, read_backward
from gradverify.mutants.values import ValueChange, value_changes
from gradverify.results import Location
from gradverify.targets import Capability, Target


@dataclass
class Mutant:
    """One mutant: its name, what it changes, where, and how to put it in place."""

    key: str
    mutation: str
    location: Location | None
    install: Callable[[Target], ContextManager[Target]]
    source: SourceMutant | None = None
    value: ValueChange | None = None
    ran: set[int] = field(default_factory=set)
    """The lines of backward's source its compiled code ran (``source.marked``)."""
    observed: list[tuple[str, bool]] = field(default_factory=list)
    """What the mutant saw, call by call: for a ``.view`` mutant ``("view", contiguous)`` of
    the tensor it viewed, ``("merge", merged)`` whether the view merged two of its dims longer
    than 1 (only a merge can need contiguous memory), ``("merge-ones", merged)`` whether it
    merged any, and ``("incoming", contiguous)`` of backward's incoming
    gradients together; for an overwrite, ``("kept", nonzero)`` of what it wrote over."""

    @property
    def equivalent(self) -> str | None:
        return self.source.equivalent if self.source is not None else None


@dataclass
class Plan:
    """A target's mutants, and what observing the original needs."""

    mutants: list[Mutant]
    source: BackwardSource | None
    place: Holder | None
    """Where the target's backward is swapped (None: it has none to swap)."""
    note: str | None
    probes: dict[str, list[str]] = field(default_factory=dict)
    """What each probed operand was, per call (``facts``), filled by a run of ``observe``."""
    ran: set[int] = field(default_factory=set)
    """The lines of backward's source the original ran, filled by a run of ``observe``."""

    def observe(self, info: Target) -> ContextManager[Target]:
        """The original backward with its dropped operands probed (the same function), or the
        original itself where there is no source."""
        if self.source is None or self.place is None:
            return contextlib.nullcontext(info)
        tree = probed(self.source, [m.source for m in self.mutants if m.source is not None])
        function = self.source.compile(tree, helpers(self.probes, self.ran))
        return self.place.installed(info, lambda _: function)

def plan(info: Target, names: list[str], location: Location | None, node: Any = None) -> Plan:
    """The mutants of ``info``, whose inputs are ``names``; ``location``: where a value mutant
    points (backward's ``def``, else the code a finding about gradients points at); ``node``:
    a graph node of a call of it (``install.holder``)."""
    place = holder(info, node)
    source = read_backward(place.function, place.skip) if place is not None else None
    mutants: list[Mutant] = []
    if source is not None and place is not None:
        for found in source_mutants(source):
            ran: set[int] = set()
            observed: list[tuple[str, bool]] = []
            mutants.append(Mutant(found.key, found.mutation, Location(
                location.file if location else shown_path(source.file), found.line),
                _source_install(place, source, found, ran, observed), source=found, ran=ran,
                observed=observed))
    for change in value_changes(names):
        install = (lambda i, c=change: place.installed(i, c.returning)) if place is not None \
            else (lambda i, c=change: contextlib.nullcontext(tapped(i, c.position, c)))
        mutants.append(Mutant(change.key, change.mutation, location, install, value=change))
    note = None
    if place is None and info.has(Capability.OWN_BACKWARD):
        note = ("its backward cannot be reached to swap (an autograd kernel written at the "
                "Autograd key): value mutants of its inputs' gradients only")
    elif place is None:
        note = "no backward of its own: value mutants of its inputs' gradients only"
    elif source is None:
        note = "backward's source cannot be read: value mutants only"
    return Plan(mutants, source, place, note)


def _source_install(place: Holder, source: BackwardSource, found: SourceMutant, ran: set[int],
                    observed: list[tuple[str, bool]]
                    ) -> Callable[[Target], ContextManager[Target]]:
    def install(info: Target) -> ContextManager[Target]:
        function = source.compile(found.tree, helpers({}, ran, observed))
        return place.installed(info, lambda _: function)

    return install


def helpers(probes: dict[str, list[str]], ran: set[int],
            observed: list[tuple[str, bool]] | None = None) -> dict[str, Any]:
    """What mutated code calls (``source.HELPERS``), recording into ``probes``, ``ran`` and
    ``observed``."""
    seen = observed if observed is not None else []
    def neg(value: Any) -> Any:
        return None if value is None else -value

    def ones(value: Any) -> Any:
        import torch

        if isinstance(value, torch.Tensor):
            return torch.ones_like(value)
        if isinstance(value, (tuple, list)):
            return type(value)(ones(v) for v in value)
        return value

    def probe(key: str, value: Any) -> Any:
        probes.setdefault(key, []).append(fact(value))
        return value

    def view(value: Any, *shape: Any) -> Any:
        viewed = value.view(*shape)
        seen.append(("view", _contiguous(value)))
        before, after = tuple(value.shape), tuple(viewed.shape)
        seen.append(("merge", _merges(before, after, ones=False)))
        seen.append(("merge-ones", _merges(before, after, ones=True)))
        return viewed

    def incoming(*grads: Any) -> None:
        seen.append(("incoming", all(_contiguous(g) for g in _tensors(grads))))

    def kept(before: Any, value: Any) -> Any:
        seen.append(("kept", _nonzero(before)))
        return value

    def cut(key: str, value: Any, index: Any) -> Any:
        result = value[index]
        for i, took in _slices_took(value, index):
            probes.setdefault(f"{key}:{i}", []).append(took)
        return result

    cut.slice = slice  # type: ignore[attr-defined]
    return {"_gv_neg": neg, "_gv_ones": ones, "_gv_probe": probe, "_gv_line": ran.add,
            "_gv_view": view, "_gv_incoming": incoming, "_gv_kept": kept, "_gv_cut": cut}


def _slices_took(value: Any, index: Any) -> list[tuple[int, str]]:
    """For each slice of ``index`` (its place in the index), what it took of its dim of
    ``value`` (``_took``); none for an index that holds anything but slices, integers,
    ``None`` and ``...`` (a tensor of indices), or for a value with no shape or length."""
    elements = index if isinstance(index, tuple) else (index,)
    shape = tuple(value.shape) if hasattr(value, "shape") else \
        (len(value),) if isinstance(value, (list, tuple, str)) else None
    if shape is None or not all(e is None or e is Ellipsis or isinstance(e, (slice, int))
                                for e in elements):
        return []
    later = sum(1 for e in elements[elements.index(Ellipsis) + 1:] if e is not None) \
        if Ellipsis in elements else 0
    took, dim = [], 0
    for i, element in enumerate(elements):
        if element is Ellipsis:
            dim = len(shape) - later
        elif element is not None:
            if isinstance(element, slice) and dim < len(shape):
                took.append((i, _took(element, shape[dim])))
            dim += 1
    return took


def _took(part: slice, size: int) -> str:
    """``exact``: all of the dim, each bound given where the dim ends (``g[:n]``, ``n`` its
    size); ``past``: all of it, a bound beyond the end; ``cut``; ``unknown``."""
    try:
        start, stop = (None if b is None else operator.index(b) for b in (part.start, part.stop))
        first, last, step = part.indices(size)
    except (TypeError, ValueError):
        return "unknown"
    if step != 1 or last - first != size:
        return "cut"
    return "exact" if start in (None, 0) and stop in (None, size) else "past"


def _merges(before: tuple[int, ...], after: tuple[int, ...], *, ones: bool) -> bool:
    """Whether reshaping ``before`` to ``after`` merges two dims into one, dims of size 1
    counted where ``ones`` (a view that only keeps or splits dims takes any layout; one that
    merges a dim of size 1 takes any layout too, but merges a larger one where it is): the
    shapes cut into runs of equal products, and a run of two dims or more of ``before``."""
    a = [n for n in before if ones or n != 1]
    b = [n for n in after if ones or n != 1]
    if 0 in a or 0 in b:
        return False
    i = j = 0
    while i < len(a) and j < len(b):
        left, right, run = a[i], b[j], 1
        i, j = i + 1, j + 1
        while left != right and (i < len(a) or j < len(b)):
            if left < right and i < len(a):
                left, i, run = left * a[i], i + 1, run + 1
            elif j < len(b):
                right, j = right * b[j], j + 1
            else:
                break
        if run >= 2:
            return True
    return False


def _nonzero(value: Any) -> bool:
    """Whether a tensor or number holds anything but zeros (what cannot be looked at counts
    as nonzero)."""
    import torch

    from gradverify.checks._tensors import is_strided

    if isinstance(value, torch.Tensor):
        if not is_strided(value):
            return True
        with torch.no_grad():
            return bool((value != 0).any())
    if isinstance(value, (int, float, complex)):
        return value != 0
    return True


def _tensors(values: Any) -> list[Any]:
    """The tensors among ``values`` (a ``*grads`` parameter is one tuple of them)."""
    import torch

    out = []
    for value in values:
        if isinstance(value, (tuple, list)):
            out += _tensors(value)
        elif isinstance(value, torch.Tensor):
            out.append(value)
    return out


def _contiguous(value: Any) -> bool:
    """Whether a tensor's memory is contiguous (anything else counts as contiguous)."""
    import torch

    from gradverify.checks._tensors import is_strided

    if not isinstance(value, torch.Tensor) or not is_strided(value):
        return True
    return bool(value.is_contiguous())


def fact(value: Any) -> str:
    """What an operand was: ``ones``, ``zeros``, or ``varies`` (anything else)."""
    import torch

    from gradverify.checks._tensors import is_strided

    if isinstance(value, torch.Tensor):
        if not is_strided(value) or value.numel() == 0:
            return "varies"
        with torch.no_grad():
            if bool((value == 1).all()):
                return "ones"
            return "zeros" if bool((value == 0).all()) else "varies"
    if isinstance(value, (int, float, complex)) and not isinstance(value, bool):
        return "ones" if value == 1 else "zeros" if value == 0 else "varies"
    return "varies"
