"""Recorded calls into drafted cases: arguments as spec values, over the dims of ``dims``.

Each recorded argument becomes a spec value: a tensor's shape in named dims (``dims``), an int
that follows a dim as that dim, an integer tensor's range below the count or dim its values index
(``high: N``), and what needs a factory. Besides the keys of ``dims`` (``size:S``, ``int:PATH``),
``joined`` may hold one more, chosen by the probe (``recording.shrink``) by running forward:

- ``grad:PATH``: the floating tensor at PATH, recorded without grad, is checked as differentiable
  (backward computes its gradient, so a wrong one must be caught).
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gradverify.recording.dims import KEPT_SIZE, find_dims, ints, is_floating, walk
from gradverify.recording.spool import Observation

__all__ = ["KEPT_SIZE", "Dim", "Draft", "Seq", "case_dict", "draft", "indexed_dim",
           "initial_draft", "is_dim", "tensor_spec", "without_grad"]


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
    made: bool = False
    """Made for a branch of forward no recorded call took: its sizes are the made call's."""
    same_as: tuple[str, ...] = ()
    """The signatures of other recorded calls whose case, once drafted, is this one (a call
    under ``torch.no_grad()``, or with an input not requiring grad that is checked anyway)."""

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
    """One recorded call as a case, with what ``joined`` joins made one (see ``dims``)."""
    args = list(observation.args)
    dims = find_dims(observation, joined)
    built = _Builder(args, dims.axis_names, dims.dims_of, dims.int_dims, joined)
    out = tuple((arg["name"], *built.arg(arg, arg["name"])) for arg in args)
    checked_as_grad = not observation.grad_enabled and not built.any_grad
    return Draft(dims.recorded, dims.sizes, out, built.dtype, tuple(built.factory),
                 tuple(built.todo), _signature(_with_grad(args) if checked_as_grad else args),
                 tuple(args), dims.dims_of,
                 _notes(observation, built), observation, dims.keys, dims.int_dims)


def _signature(args: Sequence[Mapping[str, Any]]) -> str:
    """A short hash of the recorded arguments: calls with equal ones are one case."""
    return hashlib.sha256(json.dumps(args, sort_keys=True).encode()).hexdigest()[:12]


def _with_grad(args: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The arguments of a call recorded under ``torch.no_grad()`` as its case checks them:
    every floating tensor requiring grad. Its signature is then that of the same call recorded
    with grad, and the two are one case."""
    def changed(arg: Mapping[str, Any]) -> dict[str, Any]:
        if arg["kind"] in ("tuple", "list"):
            return {**arg, "items": [changed(item) for item in arg["items"]]}
        if arg["kind"] == "tensor" and is_floating(arg["dtype"]):
            return {**arg, "requires_grad": True}
        return dict(arg)

    return [changed(arg) for arg in args]


def _notes(observation: Observation, built: _Builder) -> tuple[str, ...]:
    """What the case's header says about how it was recorded."""
    if not observation.grad_enabled and not built.any_grad:
        return ("recorded under torch.no_grad(): every floating input is checked as "
                "differentiable",)
    return ()


class _Builder:
    """The arguments of one draft as spec values."""

    def __init__(self, args: Sequence[Mapping[str, Any]], axis_names: Mapping[tuple[str, int],
                 str], dims_of: Mapping[int, str], int_dims: Mapping[str, str],
                 joined: frozenset[str]) -> None:
        self.args, self.axis_names, self.dims_of = args, axis_names, dims_of
        self.int_dims, self.joined = int_dims, joined
        tensors = [a for _, a in walk(args) if a["kind"] == "tensor"]
        floats = {a["dtype"] for a in tensors if a["dtype"].startswith(("float", "bfloat"))}
        self.dtype = floats.pop() if len(floats) == 1 else None
        self.any_grad = any(a.get("requires_grad") for a in tensors if is_floating(a["dtype"]))
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
    floating = is_floating(t)
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
    counts = sorted((v, path) for path, v in ints(siblings) if v > high)
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
    sizes = sorted({s for path, other in walk(siblings) if other is not arg
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
