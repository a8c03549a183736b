"""Recorded calls into drafted cases: named dims, integers, tensors as spec values.

A size seen on the tensors of one call is a dim (``N``, ``C``, ``L``, ...), shrunk to a small size
(2, 3, 4, ... in the order of the recorded sizes, so that different dims stay different and
transposition bugs stay visible); a dim recorded at most ``KEPT_SIZE`` long keeps its size (3-D
points stay 3-D). Two things are decided by ``joined``, keys the probe (``recording.shrink``)
chooses by running forward:

- ``size:S``: axes of size S at different positions (counted from the last axis) are one dim.
  Not joined, each position is a dim of its own: a batch of 4 and 4 heads stay two dims.
- ``int:PATH``: the int argument at PATH follows the dim whose size it equals (a ``seq_len``).
  Not joined, it keeps its recorded value (``bits: 8`` stays 8 when a dim was also 8).
- ``grad:PATH``: the floating tensor at PATH, recorded without grad, is checked as differentiable
  (backward computes its gradient, so a wrong one must be caught).

An int kept at its recorded value keeps its relation to the dims above it: every dim recorded
larger than it stays larger when shrunk (top-k's ``k`` below the number of experts, a block size
below the sequence). A count that integer values index (``num_segments``) is a dim of its own,
and the integer tensor's range follows it (``high: N``).
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gradverify.recording.spool import Observation

_NAMES = ("N", "C", "L", "D", "H", "W", "K", "M", "P", "Q", "R", "S", "T", "U", "V")
MIN_TIED_INT = 8
"""A count at least this large that integer values index is a dim of its own (``num_classes``)."""
KEPT_SIZE = 4
"""A dim recorded at most this long keeps its size: coordinates (``linalg.cross`` needs 3)."""
MAX_KEPT_RELATION = 32
"""An int kept at its recorded value keeps the dims recorded above it above it, up to this value
(a larger one would keep the case large: its relation is left to a hand-written case)."""


@dataclass(frozen=True)
class Draft:
    """One recorded call as a case: dims with recorded and chosen sizes, arguments as spec
    values (a size that follows a dim is a ``Dim``, resolved at write time), and what needs a
    factory. Frozen: backing off returns new drafts."""

    recorded: Mapping[str, int]
    sizes: Mapping[str, int]
    args: tuple[tuple[str, Any, str], ...]
    """(name, value as a spec mapping or literal, comment)."""
    dtype: str | None
    factory: tuple[str, ...]
    """Why the case needs a factory, which gradverify writes (sparse, one-hot, constant)."""
    todo: tuple[str, ...]
    """Why the case needs a factory that gradverify cannot write (callables, objects)."""
    signature: str
    raw: tuple[Mapping[str, Any], ...]
    """The recorded arguments, as ``capture.describe`` wrote them."""
    dims_of: Mapping[int, str]
    """The dim named by each recorded size (the first, where a size is several dims)."""
    notes: tuple[str, ...] = ()
    source: Observation | None = None
    keys: tuple[str, ...] = ()
    """Every key ``joined`` may hold for this call, in the order the probe tries them."""
    int_dims: Mapping[str, str] | None = None
    """The dim each int argument follows, by its path (``chunk``, ``sizes[1]``)."""
    strength: str | None = None
    """How strong the case is, as ``recording.strong`` measured it (the case's header)."""

    def at_recorded_sizes(self) -> Draft:
        return replace(self, sizes=dict(self.recorded))


def initial_draft(observation: Observation) -> Draft:
    """The draft before any probing: every int at its recorded value, every size split by
    position. A case that needs a factory is never probed: its sizes are joined at once (the
    factory is written for one dim per size)."""
    first = draft(observation)
    if first.factory or first.todo:
        return draft(observation, frozenset(k for k in first.keys if k.startswith("size:")))
    return first


def draft(observation: Observation, joined: frozenset[str] = frozenset()) -> Draft:
    args = list(observation.args)
    axes = list(_axes(args))
    classes = _classes(axes, joined)
    by_size: dict[int, set[int]] = {}
    for (_, _, size, _), root in zip(axes, classes, strict=True):
        by_size.setdefault(size, set()).add(root)
    order = list(dict.fromkeys((size, root) for (_, _, size, _), root in zip(axes, classes,
                                                                            strict=True)))
    counts = [v for _, v in _ints(args) if v >= MIN_TIED_INT and v not in by_size
              and _indexes(v, args)]
    order += [(v, -1 - i) for i, v in enumerate(dict.fromkeys(counts))]
    names = {key: (_NAMES[i] if i < len(_NAMES) else f"D{i}") for i, key in enumerate(order)}
    axis_names = {(path, axis): names[(size, root)]
                  for (path, axis, size, _), root in zip(axes, classes, strict=True)}
    dims_of = {key[0]: names[key] for key in reversed(order)}
    int_dims = {path: dims_of[v] for path, v in _ints(args)
                if (f"int:{path}" in joined and v in by_size) or v in counts}
    kept = [v for path, v in _ints(args) if path not in int_dims and v not in counts
            and 2 <= v <= MAX_KEPT_RELATION]
    kept += [v for v in observation.defaults.values() if 2 <= v <= MAX_KEPT_RELATION]
    sized = _sizes(order, kept, {(a[2], root) for a, root in zip(axes, classes, strict=True)
                                 if a[1] == -1})  # the dims of a last axis
    chosen = {names[k]: sized[k] for k in order}  # in the order of appearance
    recorded = {names[k]: k[0] for k in order}
    ranks = {size: {a[1] - a[3] for a in axes if a[2] == size} for size in by_size}
    keys = tuple(f"lead:{s}" for s, roots in by_size.items() if len(roots) > 1
                 and len(ranks[s]) > 1) + tuple(
        f"size:{s}" for s, roots in by_size.items() if len(roots) > 1) + tuple(
        f"int:{path}" for path, v in _ints(args) if v >= 2 and v in by_size)
    built = _Builder(args, axis_names, dims_of, int_dims, joined)
    out = tuple((arg["name"], *built.arg(arg, arg["name"])) for arg in args)
    signature = hashlib.sha256(json.dumps(args, sort_keys=True).encode()).hexdigest()[:12]
    notes = []
    if not observation.grad_enabled and not built.any_grad:
        notes.append("recorded under torch.no_grad(): every floating input is checked as "
                     "differentiable")
    return Draft(recorded, chosen, out, built.dtype, tuple(built.factory), tuple(built.todo),
                 signature, tuple(args), dims_of, tuple(notes), observation, keys,
                 int_dims)


def _sizes(order: Sequence[tuple[int, int]], kept: Sequence[int],
           last: set[tuple[int, int]]) -> dict[tuple[int, int], int]:
    """The shrunk size of each dim (a (recorded size, root) key): 2, 3, 4, ... in the order of
    the recorded sizes, each above the ``kept`` ints recorded below it. A small dim keeps its
    recorded size (``KEPT_SIZE``: forward's meaning depends on 3 coordinates, and shrinking
    saves nothing); of several recorded at one small size, only the first of a last axis
    (``last``) does, and the others shrink below it: a transposition stays visible."""
    small: dict[int, tuple[int, int]] = {}
    for size in {k[0] for k in order if k[0] <= KEPT_SIZE}:
        keys = [k for k in order if k[0] == size]
        keep = keys if len(keys) == 1 else [k for k in keys if k in last]
        if keep:
            small[size] = keep[0]
    chosen: dict[tuple[int, int], int] = {}
    previous = 1
    for key in sorted(order, key=lambda k: (k[0], small.get(k[0]) == k, order.index(k))):
        floor = max([v + 1 for v in kept if v < key[0]], default=2)
        previous = key[0] if small.get(key[0]) == key else min(key[0], max(previous + 1, floor))
        chosen[key] = previous
    return chosen


def _axes(args: Sequence[Mapping[str, Any]]) -> Iterator[tuple[str, int, int, int]]:
    """(path, axis counted from the last, size, axis counted from the first) of every axis
    longer than 1 of every tensor."""
    for path, arg in _walk(args):
        if arg["kind"] == "tensor":
            ndim = len(arg["shape"])
            for i, size in enumerate(arg["shape"]):
                if size > 1:
                    yield path, i - ndim, size, i


def _classes(axes: Sequence[tuple[str, int, int, int]], joined: frozenset[str]) -> list[int]:
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


def _walk(args: Sequence[Mapping[str, Any]], prefix: str = ""
          ) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for i, arg in enumerate(args):
        path = f"{prefix}[{i}]" if prefix else arg.get("name", str(i))
        yield path, arg
        if arg["kind"] in ("tuple", "list"):
            yield from _walk(arg["items"], path)


def _ints(args: Sequence[Mapping[str, Any]]) -> list[tuple[str, int]]:
    return [(path, arg["value"]) for path, arg in _walk(args)
            if arg["kind"] == "value" and type(arg["value"]) is int]


def _indexes(count: int, args: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the values of an integer tensor of the call could index ``count`` positions."""
    return any(arg["kind"] == "tensor" and not _floating(arg["dtype"]) and arg["dtype"] != "bool"
               and arg.get("min", -1) >= 0 and arg.get("max", count) < count
               for _, arg in _walk(args))


def _floating(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat", "complex"))


class _Builder:
    """The arguments of one draft as spec values."""

    def __init__(self, args: Sequence[Mapping[str, Any]], axis_names: Mapping[tuple[str, int],
                 str], dims_of: Mapping[int, str], int_dims: Mapping[str, str],
                 joined: frozenset[str]) -> None:
        self.args, self.axis_names, self.dims_of = args, axis_names, dims_of
        self.int_dims, self.joined = int_dims, joined
        tensors = [a for _, a in _walk(args) if a["kind"] == "tensor"]
        floats = {a["dtype"] for a in tensors if a["dtype"].startswith(("float", "bfloat"))}
        self.dtype = floats.pop() if len(floats) == 1 else None
        self.any_grad = any(a.get("requires_grad") for a in tensors if _floating(a["dtype"]))
        self.factory: list[str] = []
        self.todo: list[str] = []

    def arg(self, arg: Mapping[str, Any], path: str) -> tuple[Any, str]:
        kind = arg["kind"]
        label = arg.get("name", "an item")
        if kind == "value":
            value = arg["value"]
            if path in self.int_dims:
                return Dim(self.int_dims[path]), f"= {self.int_dims[path]} (recorded {value})"
            if type(value) is int and value >= 2 and value in self.dims_of:
                return value, f"recorded value (not tied to {self.dims_of[value]})"
            return value, ""
        if kind in ("tuple", "list"):
            items = [self.arg(item, f"{path}[{i}]") for i, item in enumerate(arg["items"])]
            return Seq(kind, [v for v, _ in items]), "; ".join(c for _, c in items if c)
        if kind == "object":
            what = "a callable" if arg.get("callable") else f"a {arg['type']}"
            self.todo.append(f"{label} is {what}")
            return None, ""
        if arg.get("subclass"):
            self.todo.append(f"{label} is a {arg['subclass']}")
            return None, ""
        ndim = len(arg["shape"])
        shape = [Dim(self.axis_names[(path, i - ndim)]) if (path, i - ndim) in self.axis_names
                 else size for i, size in enumerate(arg["shape"])]
        spec, comment = tensor_spec(arg, shape, self.args, self.dims_of, self.dtype,
                                    self.any_grad, self.factory, label, self.int_dims)
        if isinstance(spec, dict) and f"grad:{path}" in self.joined:
            spec.pop("requires_grad", None)
            comment += "; recorded without grad, but backward computes its gradient: checked"
        return spec, comment


def tensor_spec(arg: Mapping[str, Any], shape: list[Any], siblings: Sequence[Mapping[str, Any]],
                dims_of: Mapping[int, str], dtype: str | None, any_grad: bool,
                factory: list[str], label: str, int_dims: Mapping[str, str] | None = None
                ) -> tuple[Any, str]:
    """One recorded tensor as a spec mapping (or None where it needs a factory) and a comment."""
    recorded = f"recorded {arg['shape']} {arg['dtype']}"
    if arg["layout"] != "strided":
        factory.append(f"{label} is a {arg['layout']} tensor of shape {arg['shape']}")
        return None, recorded
    spec: dict[str, Any] = {"shape": shape}
    t = arg["dtype"]
    floating = _floating(t)
    if not floating or t != dtype:
        spec["dtype"] = t
    notes = [recorded]
    if floating and any_grad and not arg.get("requires_grad"):
        spec["requires_grad"] = False
    if t == "bool":
        spec["init"] = "bernoulli"
        spec["p"] = arg.get("density", 0.5)
        notes.append(f"{arg.get('density', '?')} True")
        return spec, "; ".join(notes)
    constant = arg.get("constant")
    if arg.get("onehot"):
        factory.append(f"{label} is one-hot along its last dim")
        return None, recorded
    if constant is not None and floating:
        # A weight of ones, a bias of zeros: a backward that forgets the weight passes on
        # them. Random values (positive where the constant was) catch it.
        if constant > 0:
            spec["init"] = "positive"
        return spec, "; ".join([*notes, f"recorded constant {constant!r}: random values here, "
                                        "since a constant hides a missing factor"])
    if constant is not None:
        if constant in (0, 1):
            spec["init"] = "zeros" if constant == 0 else "ones"
            return spec, "; ".join([*notes, "constant"])
        factory.append(f"{label} is constant ({constant})")
        return None, recorded
    if not floating:
        notes.append(_index_range(spec, arg, siblings, dims_of, int_dims or {}))
    elif arg.get("spd"):
        spec["init"] = "spd"
        notes.append("symmetric positive definite")
    elif arg.get("positive"):
        spec["init"] = "positive"
        notes.append("all positive")
    if arg.get("sorted") and spec.get("init") not in ("spd",):
        spec["sorted"] = True
        notes.append("sorted")
    return spec, "; ".join(notes)


def _index_range(spec: dict[str, Any], arg: Mapping[str, Any],
                 siblings: Sequence[Mapping[str, Any]], dims_of: Mapping[int, str],
                 int_dims: Mapping[str, str]) -> str:
    """An integer tensor's values: below the count argument or the dim they index, else in
    their recorded range. Sets ``spec``'s init and bounds; returns the comment."""
    low, high = arg.get("min", 0), arg.get("max", 9)
    dim = indexed_dim(low, high, arg, siblings, dims_of)
    count = _count_of(low, high, siblings, dims_of)
    spec["init"] = "randint"
    if count is not None and int_dims.get(count[0]):
        spec["high"] = Dim(int_dims[count[0]])
        return f"values index {count[0]} (recorded {low}..{high})"
    if count is not None:
        spec["high"] = count[1]
        return f"values index {count[0]} = {count[1]} (recorded {low}..{high})"
    if dim is not None:
        spec["high"] = Dim(dim)
        return f"values index dim {dim} (recorded {low}..{high})"
    spec["low"], spec["high"] = low, high + 1
    return f"values {low}..{high}"


def _count_of(low: int, high: int, siblings: Sequence[Mapping[str, Any]],
              dims_of: Mapping[int, str]) -> tuple[str, int] | None:
    """The int argument (its path, its value) that integer values index: the smallest one
    that they all fit below, where no dim is a tighter bound (``num_classes`` rather than a
    tensor's size that happens to be equal)."""
    if low < 0:
        return None
    counts = sorted((v, path) for path, v in _ints(siblings) if v > high)
    if not counts:
        return None
    tighter = [s for s in dims_of if high < s < counts[0][0]]
    return None if tighter else (counts[0][1], counts[0][0])


def indexed_dim(low: int, high: int, arg: Mapping[str, Any], siblings: Sequence[Mapping[str, Any]],
                names: Mapping[int, str]) -> str | None:
    """The dim whose positions the values index: the smallest size, among the other
    arguments' dims and counts, that all values fit below."""
    if low < 0:
        return None
    sizes = sorted({s for path, other in _walk(siblings) if other is not arg
                    for s in (other["shape"] if other["kind"] == "tensor" else
                              [other["value"]] if other["kind"] == "value"
                              and type(other["value"]) is int else [])
                    if s > high and s in names})
    return names[sizes[0]] if sizes else None


def Dim(name: str) -> dict[str, str]:
    """A size, or a value, that follows the dim ``name``."""
    return {"$dim": name}


def Seq(kind: str, items: list[Any]) -> dict[str, Any]:
    return {"$seq": kind, "items": items}


def is_dim(value: Any) -> bool:
    return isinstance(value, dict) and "$dim" in value


def case_dict(args: Sequence[Any], dtype: str | None, sizes: Mapping[str, int],
              name: str) -> dict[str, Any]:
    """A drafted case as ``gradverify.spec.file.from_dict`` reads it, at ``sizes``: in a tensor's
    ``shape`` and ``high`` a dim stays a name; a plain value that follows a dim is its size."""
    def tensor(spec: dict[str, Any]) -> dict[str, Any]:
        return {k: ([d["$dim"] if is_dim(d) else d for d in v] if k == "shape" else
                    v["$dim"] if is_dim(v) else v) for k, v in spec.items()}

    def value(v: Any) -> Any:
        if is_dim(v):
            return sizes[v["$dim"]]
        if isinstance(v, dict) and "$seq" in v:
            return {v["$seq"]: [value(i) for i in v["items"]]}
        if isinstance(v, dict):
            return tensor(v)
        return v

    case: dict[str, Any] = {"name": name, "dims": dict(sizes)}
    if dtype:
        case["dtype"] = dtype
    case["args"] = {n: value(v) for n, v, _ in args}
    return case


def without_grad(d: Draft) -> list[str]:
    """The paths of the floating tensors a draft checks without grad, where others have it."""
    return [name for name, value, _ in d.args
            if isinstance(value, dict) and value.get("requires_grad") is False]
