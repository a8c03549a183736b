"""Recorded calls into cases: named dims, shrinking, backing off.

Sizes equal across the arguments of one call are one dim (``N``, ``C``, ``L``, ...). Each dim
shrinks to a small size (2, 3, 4, ... in the order of the recorded sizes, so that different dims
stay different and transposition bugs stay visible). An integer tensor whose values index a dim
keeps its range tied to that dim (``high: N``), and an int argument equal to a dim's size follows
the dim. The shrunk case is then tried in a separate process (``python -m
gradverify.recording.shrink``): where forward raises, a dim backs off towards its recorded size in
halving steps until forward runs. Writing the specs is ``gradverify.recording.write``.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gradverify.recording.spool import Observation

_NAMES = ("N", "C", "L", "D", "H", "W", "K", "M", "P", "Q", "R", "S", "T", "U", "V")
PROBE_TIMEOUT = 120.0
MIN_TIED_INT = 8
"""An int argument at least this large that equals a dim's size follows the dim; smaller ones
(axis numbers, kernel sizes) stay as they were."""


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
    """The dim named by each recorded size."""
    notes: tuple[str, ...] = ()

    def at_recorded_sizes(self) -> Draft:
        return replace(self, sizes=dict(self.recorded))


@dataclass(frozen=True)
class SizeChoice:
    """Where the size search ended: the sizes, and notes on how it got there."""

    sizes: Mapping[str, int]
    notes: tuple[str, ...] = ()


# ----------------------------------------------------------------------------- drafting


def draft(observation: Observation) -> Draft:
    args = list(observation.args)
    sizes: list[int] = []
    for arg in args:
        for shape in shapes(arg):
            sizes += [s for s in shape if s > 1 and s not in sizes]
    for arg in args:  # a count such as num_segments or num_classes: a dim of its own
        sizes += [v for v in ints(arg) if v >= MIN_TIED_INT and v not in sizes]
    names = {size: (_NAMES[i] if i < len(_NAMES) else f"D{i}") for i, size in enumerate(sizes)}
    shrunk = {size: 2 + rank for rank, size in enumerate(sorted(sizes))}
    recorded = {names[s]: s for s in sizes}
    chosen = {names[s]: shrunk[s] for s in sizes}
    floats = {a["dtype"] for a in _tensors(args) if a["dtype"].startswith(("float", "bfloat"))}
    dtype = floats.pop() if len(floats) == 1 else None
    any_grad = any(a.get("requires_grad") for a in _tensors(args)
                   if a["dtype"].startswith(("float", "bfloat", "complex")))
    factory: list[str] = []
    todo: list[str] = []
    out = []
    for arg in args:
        value, comment = _arg(arg, names, args, dtype, any_grad, factory, todo)
        out.append((arg["name"], value, comment))
    signature = hashlib.sha256(json.dumps(args, sort_keys=True).encode()).hexdigest()[:12]
    notes = []
    if not observation.grad_enabled and not any_grad:
        notes.append("recorded under torch.no_grad(): every floating input is checked as "
                     "differentiable")
    return Draft(recorded, chosen, tuple(out), dtype, tuple(factory), tuple(todo), signature,
                 tuple(args), names, tuple(notes))


def shapes(arg: Mapping[str, Any]) -> list[list[int]]:
    if arg["kind"] == "tensor":
        return [arg["shape"]]
    if arg["kind"] in ("tuple", "list"):
        return [s for item in arg["items"] for s in shapes(item)]
    return []


def ints(arg: Mapping[str, Any]) -> list[int]:
    if arg["kind"] == "value" and type(arg["value"]) is int:
        return [arg["value"]]
    if arg["kind"] in ("tuple", "list"):
        return [v for item in arg["items"] for v in ints(item)]
    return []


def _tensors(args: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    found = []
    for arg in args:
        if arg["kind"] == "tensor":
            found.append(arg)
        elif arg["kind"] in ("tuple", "list"):
            found += _tensors(arg["items"])
    return found


def _arg(arg: Mapping[str, Any], names: Mapping[int, str], siblings: Sequence[Mapping[str, Any]],
         dtype: str | None, any_grad: bool, factory: list[str], todo: list[str]
         ) -> tuple[Any, str]:
    kind = arg["kind"]
    label = arg.get("name", "an item")
    if kind == "value":
        value = arg["value"]
        if type(value) is int and value >= MIN_TIED_INT and value in names:
            return Dim(names[value]), f"= {names[value]} (recorded {value})"
        return value, ""
    if kind in ("tuple", "list"):
        items = [_arg(item, names, siblings, dtype, any_grad, factory, todo)
                 for item in arg["items"]]
        return Seq(kind, [v for v, _ in items]), "; ".join(c for _, c in items if c)
    if kind == "object":
        what = "a callable" if arg.get("callable") else f"a {arg['type']}"
        todo.append(f"{label} is {what}")
        return None, ""
    if arg.get("subclass"):
        todo.append(f"{label} is a {arg['subclass']}")
        return None, ""
    return _tensor(arg, names, siblings, dtype, any_grad, factory, label)


def _tensor(arg: Mapping[str, Any], names: Mapping[int, str], siblings: Sequence[Mapping[str, Any]],
            dtype: str | None, any_grad: bool, factory: list[str], label: str) -> tuple[Any, str]:
    shape = [Dim(names[s]) if s in names else s for s in arg["shape"]]
    recorded = f"recorded {arg['shape']} {arg['dtype']}"
    if arg["layout"] != "strided":
        factory.append(f"{label} is a {arg['layout']} tensor of shape {arg['shape']}")
        return None, recorded
    spec: dict[str, Any] = {"shape": shape}
    t = arg["dtype"]
    floating = t.startswith(("float", "bfloat", "complex"))
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
        low, high = arg.get("min", 0), arg.get("max", 9)
        dim = indexed_dim(low, high, arg, siblings, names)
        spec["init"] = "randint"
        if dim is not None:
            spec["high"] = Dim(dim)
            notes.append(f"values index dim {dim} (recorded {low}..{high})")
        else:
            spec["low"], spec["high"] = low, high + 1
            notes.append(f"values {low}..{high}")
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


def indexed_dim(low: int, high: int, arg: Mapping[str, Any], siblings: Sequence[Mapping[str, Any]],
                 names: Mapping[int, str]) -> str | None:
    """The dim whose positions the values index: the smallest size, among the other
    arguments' dims, that all values fit below."""
    if low < 0:
        return None
    sizes = sorted({s for other in siblings if other is not arg
                    for s in [*(s for shape in shapes(other) for s in shape), *ints(other)]
                    if s > high and s in names})
    return names[sizes[0]] if sizes else None


def Dim(name: str) -> dict[str, str]:
    """A size, or a value, that follows the dim ``name``."""
    return {"$dim": name}


def Seq(kind: str, items: list[Any]) -> dict[str, Any]:
    return {"$seq": kind, "items": items}


def is_dim(value: Any) -> bool:
    return isinstance(value, dict) and "$dim" in value


# ----------------------------------------------------------------------------- spec dicts


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


# ----------------------------------------------------------------------------- backing off


def back_off(target: str, drafts: Sequence[Draft]) -> list[Draft]:
    """The drafts with their shrunk sizes tried in a separate process: where forward raises,
    sizes back off towards the recorded ones (``search_sizes``). Drafts that need a factory are
    returned as they are."""
    todo = [d for d in drafts if not d.factory and not d.todo and d.sizes]
    if not todo:
        return list(drafts)
    request = {"target": target, "drafts": [
        {"args": d.args, "dtype": d.dtype, "shrunk": d.sizes, "recorded": d.recorded}
        for d in todo]}
    from gradverify.syspath import own_module_command

    try:
        done = subprocess.run(own_module_command("gradverify.recording.shrink"),
                              input=json.dumps(request), capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT)
        answer = json.loads(done.stdout.strip().splitlines()[-1])
        choices = {id(d): SizeChoice(r["sizes"], tuple(r["notes"]))
                   for d, r in zip(todo, answer["drafts"], strict=True)}
    except (subprocess.TimeoutExpired, ValueError, IndexError, KeyError) as exc:
        note = f"the shrunk sizes were not tried: the probe failed ({type(exc).__name__})"
        choices = {id(d): SizeChoice(d.sizes, (note,)) for d in todo}
    return [replace(d, sizes=choices[id(d)].sizes, notes=d.notes + choices[id(d)].notes)
            if id(d) in choices else d for d in drafts]


def _probe_main() -> None:
    """In a fresh process: import the target, and search sizes at which forward runs."""
    request = json.loads(sys.stdin.read())
    from gradverify.kinds import resolve
    from gradverify.syspath import ensure_cwd_on_path

    ensure_cwd_on_path()
    results = []
    try:
        info = resolve(request["target"])
    except Exception as exc:  # noqa: BLE001 -- reported as a note
        print(json.dumps({"drafts": [{"sizes": d["shrunk"], "notes": [
            f"the shrunk sizes were not tried: {request['target']} cannot be imported ({exc})"]}
            for d in request["drafts"]]}))
        return
    for d in request["drafts"]:
        def error(sizes: Mapping[str, int], d: dict[str, Any] = d) -> str | None:
            return _forward_error(info, case_dict(d["args"], d["dtype"], sizes, "probe"))

        choice = search_sizes(d["shrunk"], d["recorded"], error)
        results.append({"sizes": dict(choice.sizes), "notes": list(choice.notes)})
    print(json.dumps({"drafts": results}))


def search_sizes(shrunk: Mapping[str, int], recorded: Mapping[str, int],
                 error: Callable[[Mapping[str, int]], str | None]) -> SizeChoice:
    """Sizes at which ``error`` (forward's error at given sizes, or None) is None: the shrunk
    ones; else the first dim that, at its recorded size, makes forward run, halved from there
    while forward still runs; else every dim from its recorded size, halved one by one. Never
    below a dim's shrunk size."""
    first = error(shrunk)
    if first is None:
        return SizeChoice(dict(shrunk))
    culprits = [d for d in shrunk if error({**shrunk, d: recorded[d]}) is None]
    if culprits:
        sizes, names = dict(shrunk), culprits[:1]
    else:
        if error(recorded) is not None:
            return SizeChoice(dict(shrunk), (f"forward raised at the shrunk sizes and at the "
                                             f"recorded ones: {first}",))
        sizes, names = dict(recorded), list(recorded)
    for dim in names:
        size = recorded[dim]
        while size // 2 >= shrunk[dim] and error({**sizes, dim: size // 2}) is None:
            size //= 2
        sizes[dim] = size
    backed = ", ".join(f"{d}={sizes[d]}" for d in names)
    return SizeChoice(sizes, (f"backed off to {backed}: at the shrunk sizes forward raised "
                              f"{first}",))


def _forward_error(info: Any, case: dict[str, Any]) -> str | None:
    import torch

    from gradverify.spec.binding import bind
    from gradverify.spec.file import from_dict
    from gradverify.spec.inputs import InputMaker

    try:
        spec = from_dict({"target": info.target, "cases": [case]})
        bound = bind(spec.cases[0], info, spec)
        args = InputMaker(spec.cases[0], bound, info, 0, "cpu").args("double")
        with torch.no_grad():
            info.cls.apply(*args.values)
    except Exception as exc:  # noqa: BLE001 -- the user's forward
        text = str(exc).splitlines()[0] if str(exc) else ""
        return f"{type(exc).__name__}: {text}"[:200]
    return None


if __name__ == "__main__":
    _probe_main()
