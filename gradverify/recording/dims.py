"""The dims of one recorded call: which axes of its tensors are one dim, their names, their shrunk
sizes, the int arguments that follow them, and the keys the probe may join.

A size seen on the tensors of one call is a dim (``N``, ``C``, ``L``, ...), shrunk to a small size
(2, 3, 4, ... in the order of the recorded sizes, so that different dims stay different and
transposition bugs stay visible); a dim recorded at most ``KEPT_SIZE`` long keeps its size (3-D
points stay 3-D). Two things are decided by ``joined``, keys the probe (``recording.shrink``)
chooses by running forward:

- ``size:S``: axes of size S at different positions (counted from the last axis) are one dim.
  Not joined, each position is a dim of its own: a batch of 4 and 4 heads stay two dims.
  (``lead:S``: counted from the first axis instead, for tensors of different ranks.)
- ``int:PATH``: the int argument at PATH follows the dim whose size it equals (a ``seq_len``).
  Not joined, it keeps its recorded value (``bits: 8`` stays 8 when a dim was also 8).

An int kept at its recorded value keeps its relation to the dims above it: every dim recorded
larger than it stays larger when shrunk (top-k's ``k`` below the number of experts, a block size
below the sequence), and one recorded at least twice as large (plus one) as an int above
``KEPT_SIZE`` stays so: two blocks, two echoes of a delay, two hops of a window, where the
recording had them. A count that integer values index (``num_segments``) is a dim of its own.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gradverify.recording.spool import Observation

_NAMES = ("N", "C", "L", "D", "H", "W", "K", "M", "P", "Q", "R", "S", "T", "U", "V")
MIN_TIED_INT = 8
"""A count at least this large that integer values index is a dim of its own (``num_classes``)."""
KEPT_SIZE = 4
"""A dim recorded at most this long keeps its size: coordinates (``linalg.cross`` needs 3)."""
MAX_KEPT_RELATION = 128
"""An int kept at its recorded value keeps the dims recorded above it above it, up to this value
(a feedback delay of 40 samples on a signal of 256: the signal shrinks to 81, and the feedback
still runs, twice); a larger one would keep the case large: its relation is left to a hand-written
case."""

Axis = tuple[str, int, int, int]
"""(path, axis counted from the last, size, axis counted from the first) of a tensor's axis."""
Key = tuple[int, int]
"""A dim: (recorded size, root), where the root is the index of the dim's first axis, or a
negative number for a count that integer values index."""


@dataclass(frozen=True)
class Dims:
    """The dims of one recorded call, named in the order they appear in its arguments."""

    recorded: dict[str, int]
    """Each dim's recorded size, by name."""
    sizes: dict[str, int]
    """Each dim's shrunk size, by name, in the same order."""
    axis_names: dict[tuple[str, int], str]
    """The dim of each axis longer than 1: (tensor path, axis counted from the last) -> name."""
    dims_of: dict[int, str]
    """The dim named by each recorded size (the first, where a size is several dims)."""
    int_dims: dict[str, str]
    """The dim each int argument follows, by its path (``chunk``, ``sizes[1]``)."""
    keys: tuple[str, ...]
    """Every key ``joined`` may hold for this call, in the order the probe tries them."""


def find_dims(observation: Observation, joined: frozenset[str]) -> Dims:
    """The dims of a recorded call, with the axes and ints that ``joined`` joins made one."""
    args = list(observation.args)
    axes = list(_axes(args))
    classes = _classes(axes, joined)
    by_size = _roots_by_size(axes, classes)
    counts = _counts(args, by_size)
    order = [*dict.fromkeys((axis[2], root) for axis, root in zip(axes, classes, strict=True)),
             *((v, -1 - i) for i, v in enumerate(counts))]
    names = {key: (_NAMES[i] if i < len(_NAMES) else f"D{i}") for i, key in enumerate(order)}
    dims_of = {key[0]: names[key] for key in reversed(order)}
    int_dims = _int_dims(args, joined, by_size, counts, dims_of)
    last = {(axis[2], root) for axis, root in zip(axes, classes, strict=True) if axis[1] == -1}
    sized = _sizes(order, _kept(observation, int_dims, counts), last)
    return Dims(recorded={names[k]: k[0] for k in order},
                sizes={names[k]: sized[k] for k in order},  # in the order of appearance
                axis_names={(path, axis): names[(size, root)] for (path, axis, size, _), root
                            in zip(axes, classes, strict=True)},
                dims_of=dims_of, int_dims=int_dims, keys=_probe_keys(args, axes, by_size))


def _roots_by_size(axes: Sequence[Axis], classes: Sequence[int]) -> dict[int, set[int]]:
    """The dims (by root) recorded at each size, the sizes in order of first appearance."""
    by_size: dict[int, set[int]] = {}
    for (_, _, size, _), root in zip(axes, classes, strict=True):
        by_size.setdefault(size, set()).add(root)
    return by_size


def _counts(args: Sequence[Mapping[str, Any]], by_size: Mapping[int, set[int]]) -> list[int]:
    """The int arguments that are dims of their own, each once: counts at least
    ``MIN_TIED_INT`` that no tensor has as a size and that integer values could index."""
    return list(dict.fromkeys(v for _, v in ints(args) if v >= MIN_TIED_INT and v not in by_size
                              and _indexes(v, args)))


def _int_dims(args: Sequence[Mapping[str, Any]], joined: frozenset[str],
              by_size: Mapping[int, set[int]], counts: Sequence[int],
              dims_of: Mapping[int, str]) -> dict[str, str]:
    """The dim each int argument follows: its own (a count), or the dim of its size where
    ``int:PATH`` is joined."""
    return {path: dims_of[v] for path, v in ints(args)
            if (f"int:{path}" in joined and v in by_size) or v in counts}


def _kept(observation: Observation, int_dims: Mapping[str, str], counts: Sequence[int]
          ) -> list[int]:
    """The ints kept at their recorded values (forward's defaults too) that dims recorded above
    them must stay above."""
    kept = [v for path, v in ints(observation.args) if path not in int_dims and v not in counts
            and 2 <= v <= MAX_KEPT_RELATION]
    return kept + [v for v in observation.defaults.values() if 2 <= v <= MAX_KEPT_RELATION]


def _probe_keys(args: Sequence[Mapping[str, Any]], axes: Sequence[Axis],
                by_size: Mapping[int, set[int]]) -> tuple[str, ...]:
    """The keys the probe may join, in the order it tries them: ``lead:S`` where several dims of
    size S are on tensors of different ranks, ``size:S`` where size S is several dims,
    ``int:PATH`` where an int argument equals a size."""
    ranks = {size: {axis[1] - axis[3] for axis in axes if axis[2] == size} for size in by_size}
    several = [s for s, roots in by_size.items() if len(roots) > 1]
    return (tuple(f"lead:{s}" for s in several if len(ranks[s]) > 1)
            + tuple(f"size:{s}" for s in several)
            + tuple(f"int:{path}" for path, v in ints(args) if v >= 2 and v in by_size))


def _sizes(order: Sequence[Key], kept: Sequence[int], last: set[Key]) -> dict[Key, int]:
    """The shrunk size of each dim (a (recorded size, root) key): 2, 3, 4, ... in the order of
    the recorded sizes, each above the ``kept`` ints recorded below it. A small dim keeps its
    recorded size (``KEPT_SIZE``: forward's meaning depends on 3 coordinates, and shrinking
    saves nothing); of several recorded at one small size, only the first of a last axis
    (``last``) does, and the others shrink below it: a transposition stays visible."""
    small: dict[int, Key] = {}
    for size in {k[0] for k in order if k[0] <= KEPT_SIZE}:
        keys = [k for k in order if k[0] == size]
        keep = keys if len(keys) == 1 else [k for k in keys if k in last]
        if keep:
            small[size] = keep[0]
    chosen: dict[Key, int] = {}
    previous = 1
    for key in sorted(order, key=lambda k: (k[0], small.get(k[0]) == k, order.index(k))):
        floor = max([_above(v, key[0]) for v in kept if v < key[0]], default=2)
        previous = key[0] if small.get(key[0]) == key else min(key[0], max(previous + 1, floor))
        chosen[key] = previous
    return chosen


def _above(kept: int, recorded: int) -> int:
    """The least size of a dim recorded at ``recorded`` above an int kept at ``kept``: past it,
    and past twice it where the recording was and the int is longer than ``KEPT_SIZE`` (two
    blocks, two echoes, two hops: what a backward that keeps only the last block gets wrong;
    an axis, a rank or top-k's k is no block)."""
    if kept > KEPT_SIZE and recorded >= 2 * kept + 1:
        return 2 * kept + 1
    return kept + 1


def _axes(args: Sequence[Mapping[str, Any]]) -> Iterator[Axis]:
    """Every axis longer than 1 of every tensor."""
    for path, arg in walk(args):
        if arg["kind"] == "tensor":
            ndim = len(arg["shape"])
            for i, size in enumerate(arg["shape"]):
                if size > 1:
                    yield path, i - ndim, size, i


def _classes(axes: Sequence[Axis], joined: frozenset[str]) -> list[int]:
    """For each axis, the index of the first axis of its dim. Axes of one size are one dim when
    their tensors hold that size once each, or at the same position counted from the last axis
    (from the first with ``lead:S``: an index of one entry per row); two axes of one tensor are
    two dims (a batch of 4 and 4 heads). ``size:S`` joins every axis of size S."""
    parent = list(range(len(axes)))

    def root(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    held: dict[tuple[str, int], int] = {}
    for path, _, size, _ in axes:
        held[(path, size)] = held.get((path, size), 0) + 1
    for i, (path_i, axis_i, size_i, lead_i) in enumerate(axes):
        for j in range(i):
            path_j, axis_j, size_j, lead_j = axes[j]
            lead = f"lead:{size_i}" in joined
            if size_i != size_j or (path_i == path_j and f"size:{size_i}" not in joined):
                continue
            if f"size:{size_i}" in joined or (lead_i == lead_j if lead else axis_i == axis_j) or \
                    held[(path_i, size_i)] == held[(path_j, size_j)] == 1:
                parent[root(i)] = root(j)
    return [root(i) for i in range(len(axes))]


def walk(args: Sequence[Mapping[str, Any]], prefix: str = ""
         ) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every recorded argument and every item of a recorded tuple or list, with its path
    (``weight``, ``sizes[1]``)."""
    for i, arg in enumerate(args):
        path = f"{prefix}[{i}]" if prefix else arg.get("name", str(i))
        yield path, arg
        if arg["kind"] in ("tuple", "list"):
            yield from walk(arg["items"], path)


def ints(args: Sequence[Mapping[str, Any]]) -> list[tuple[str, int]]:
    """The int arguments and items of a call: (path, value)."""
    return [(path, arg["value"]) for path, arg in walk(args)
            if arg["kind"] == "value" and type(arg["value"]) is int]


def _indexes(count: int, args: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the values of an integer tensor of the call could index ``count`` positions."""
    return any(arg["kind"] == "tensor" and not is_floating(arg["dtype"]) and arg["dtype"] != "bool"
               and arg.get("min", -1) >= 0 and arg.get("max", count) < count
               for _, arg in walk(args))


def is_floating(dtype: str) -> bool:
    """Whether a recorded dtype is floating or complex (differentiable)."""
    return dtype.startswith(("float", "bfloat", "complex"))
