"""Drafted cases tried on the user's forward: which sizes are one dim, which ints follow a dim,
and how far the sizes shrink.

Drafting (``gradverify.recording.draft``) gives the choices; they are made here in a separate
process (``python -m gradverify.recording.shrink``, one for every Function: ``prober``) that
imports the target and runs forward on each choice. Meaning comes first: every int at its
recorded value and every position of a size a dim of its own, where forward runs so; else the
fewest joins that make it run; else, where forward raises at the shrunk sizes, dims back off
towards their recorded sizes in halving steps until it runs. Writing the specs is
``gradverify.recording.write``.
"""
from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gradverify.case.binding import bind
from gradverify.case.inputs import InputMaker
from gradverify.init.source import read_source
from gradverify.recording.draft import Draft, case_dict, draft, without_grad
from gradverify.recording.prober import ProbeFailed, Prober
from gradverify.recording.spool import Observation
from gradverify.recording.strong import strong_case, strong_draft
from gradverify.spec.file import from_dict
from gradverify.syspath import ensure_cwd_on_path
from gradverify.targets import resolve
from gradverify.torchstate import warm_up

FUNCTION_SECONDS = 45.0
"""Seconds that making one Function's cases strong may take in all (its mutation score
included), after which its remaining cases are written as shrunk, saying so in their strength
line: a safety limit for a slow forward. What is written is decided by the searches' tries
(``init.strengthen.MAX_TRIES``), so a loaded machine gets the same specs as an idle one."""


@dataclass(frozen=True)
class SizeChoice:
    """Where the size search ended: the sizes, and notes on how it got there."""

    sizes: Mapping[str, int]
    notes: tuple[str, ...] = ()
    runs: bool = True
    """Whether forward runs at these sizes."""


# ----------------------------------------------------------------------------- backing off


def back_off(target: str, drafts: Sequence[Draft], prober: Prober | None = None) -> list[Draft]:
    """The drafts with their joins and sizes chosen by running forward in the probe process
    (``choose``; ``prober``'s, else one of its own). Drafts that need a factory are returned
    as they are."""
    todo = [d for d in drafts if not d.factory and not d.todo and d.sizes and d.source]
    if not todo:
        return list(drafts)
    request = {"target": target, "seconds": FUNCTION_SECONDS, "calls": [
        {"args": d.raw, "grad_enabled": d.source.grad_enabled, "defaults": d.source.defaults}
        for d in todo if d.source]}
    own = prober is None
    prober = prober or Prober()
    try:
        answer = prober.ask(request)
        chosen = {}
        for d, r in zip(todo, answer["calls"], strict=True):
            redrafted = draft(d.source, frozenset(r["joined"])) if d.source else d
            chosen[id(d)] = strong_draft(replace(redrafted, sizes=r["sizes"],
                                                 notes=d.notes + tuple(r["notes"])), r)
        added = [_branch_draft(target, r) for r in answer.get("branches", [])]
    except (ProbeFailed, ValueError, KeyError, TypeError) as exc:
        why = str(exc) if isinstance(exc, ProbeFailed) else type(exc).__name__
        note = f"the shrunk sizes were not tried: the probe failed ({why})"
        chosen = {id(d): replace(d, notes=(*d.notes, note)) for d in todo}
        added = []
    finally:
        if own:
            prober.close()
    return [*(chosen.get(id(d), d) for d in drafts), *added]


def _branch_draft(target: str, answer: Mapping[str, Any]) -> Draft:
    """The draft of a call made for a branch of forward (``branch_calls``), as chosen and made
    strong; its strength line says it was not recorded."""
    call = Observation(target, tuple(answer["args"]), answer["grad_enabled"],
                       answer["defaults"])
    d = strong_draft(replace(draft(call, frozenset(answer["joined"])), sizes=answer["sizes"],
                             source=call), answer)
    made = tuple((name, value, comment.replace("recorded", "made (not recorded):", 1))
                 for name, value, comment in d.args)
    return replace(d, args=made, made=True, strength=f"{answer['why']}; {d.strength}"
                   if d.strength else answer["why"])


def _serve() -> None:
    """In the probe process: one request a line on stdin, one answer a line on the original
    stdout; what the user's code prints goes to stderr."""
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    warm_up(checkpoint=True)  # the mutation score runs every default check

    ensure_cwd_on_path()
    for line in sys.stdin:
        if line.strip():
            print(json.dumps(_answer(json.loads(line))), file=answers, flush=True)
    answers.close()
    sys.stderr.flush()
    os._exit(0)  # torch's teardown would cost the user a second at the end of every record


def _answer(request: Mapping[str, Any]) -> dict[str, Any]:
    """Import the target, and choose joins and sizes at which forward runs for each call; the
    cases are then made strong within ``request["seconds"]`` in all."""
    started = time.monotonic()
    calls = [Observation(request["target"], tuple(c["args"]), c["grad_enabled"],
                         c.get("defaults", {})) for c in request["calls"]]
    try:
        info = resolve(request["target"])
    except Exception as exc:  # noqa: BLE001 -- reported as a note
        note = f"the shrunk sizes were not tried: {request['target']} cannot be imported ({exc})"
        return {"calls": [{"joined": [], "sizes": draft(c).sizes, "notes": [note]}
                          for c in calls]}
    def chosen(call: Observation) -> dict[str, Any]:
        def error(d: Draft, sizes: Mapping[str, int]) -> str | None:
            return _forward_error(info, case_dict(d.args, d.dtype, sizes, "probe"))

        joined, choice = choose(call, error)
        if choice.runs:
            joined |= gradients_computed(info, call, joined, choice.sizes)
        left = request.get("seconds", FUNCTION_SECONDS) - (time.monotonic() - started)
        return {"joined": sorted(joined), "sizes": dict(choice.sizes), "runs": choice.runs,
                "notes": list(choice.notes),
                **strong_case(info, call, joined, choice.sizes, seconds=left)}

    results = [chosen(call) for call in calls]
    branches = []
    for call, why in branch_calls(info, calls):
        answer = chosen(call)
        if answer["runs"]:
            branches.append({"args": list(call.args), "grad_enabled": call.grad_enabled,
                             "defaults": dict(call.defaults), "why": why, **answer})
    return {"calls": results, "branches": branches}


MAX_BRANCH_CASES = 2
"""Cases added for forward's branches on a rank that no recorded call took, at most."""


def branch_calls(info: Any, calls: Sequence[Observation]) -> list[tuple[Observation, str]]:
    """Calls no one recorded, for forward's branches on a float tensor's rank (``if x.dim() ==
    3:``, read by ``init.ranks``) that no recorded call took: the first recorded call with
    leading dims of 2 added (or dropped); each with why it is there."""
    try:
        hints = read_source(info)
    except Exception:  # noqa: BLE001 -- a source we cannot read: no branch read
        return []
    taken = {(a.get("name"), len(a["shape"])) for c in calls for a in c.args
             if a.get("kind") == "tensor"}
    found: list[tuple[Observation, str]] = []
    for i, arg in enumerate(calls[0].args if calls else ()):
        name = arg.get("name")
        if arg.get("kind") != "tensor" or name not in hints \
                or not str(arg.get("dtype", "")).startswith(("float", "bfloat")):
            continue
        for rank in hints[name].branches:
            if (name, rank) in taken or not 1 <= rank <= 5 or len(found) >= MAX_BRANCH_CASES:
                continue
            shape = list(arg["shape"])
            new = [2] * (rank - len(shape)) + shape if rank > len(shape) \
                else shape[len(shape) - rank:]
            args = [*calls[0].args[:i], {**arg, "shape": new}, *calls[0].args[i + 1:]]
            found.append((replace(calls[0], args=tuple(args)),
                          f"not recorded: forward branches on {name}'s rank {rank}, which no "
                          f"recorded call took; {name} is the recorded {shape} made {rank}-D"))
            taken.add((name, rank))
    return found


def choose(call: Observation, error: Callable[[Draft, Mapping[str, int]], str | None]
           ) -> tuple[frozenset[str], SizeChoice]:
    """The joins and sizes for one recorded call, ``error`` being forward's error on a draft at
    given sizes (or None). Meaning first: nothing joined where forward runs so; else the first
    single join that makes it run; else every join, then each dropped again where forward still
    runs without it; else the sizes backed off (``search_sizes``) with nothing joined, then with
    everything joined."""
    def fails(joined: frozenset[str]) -> str | None:
        d = draft(call, joined)
        return error(d, d.sizes)

    separate = draft(call)
    if fails(frozenset()) is None:
        return frozenset(), SizeChoice(dict(separate.sizes))
    for key in separate.keys:
        if fails(frozenset({key})) is None:
            return frozenset({key}), SizeChoice(dict(draft(call, frozenset({key})).sizes))
    joined = frozenset(separate.keys)
    if joined and fails(joined) is None:
        for key in separate.keys:
            if fails(joined - {key}) is None:
                joined -= {key}
        return joined, SizeChoice(dict(draft(call, joined).sizes))
    first = None
    for joined in dict.fromkeys([frozenset(), frozenset(separate.keys)]):
        d = draft(call, joined)
        choice = search_sizes(d.sizes, d.recorded, functools.partial(error, d))
        if choice.runs:
            return joined, choice
        first = first or (joined, choice)
    assert first is not None
    return first


def gradients_computed(info: Any, call: Observation, joined: frozenset[str],
                       sizes: Mapping[str, int]) -> frozenset[str]:
    """``grad:PATH`` for each floating tensor recorded without grad whose gradient backward
    computes (with every floating input requiring grad, backward returns a tensor for it)."""
    import torch


    paths = without_grad(draft(call, joined))
    if not paths:
        return frozenset()
    try:
        d = draft(call, joined | {f"grad:{p}" for p in paths})
        values = _inputs(info, case_dict(d.args, d.dtype, sizes, "probe"))
        named = dict(zip(values.names, values.values, strict=True))
        wanted = [p for p in paths if isinstance(named.get(p), torch.Tensor)]
        leaves = [named[p].detach().requires_grad_() for p in wanted]
        for p, leaf in zip(wanted, leaves, strict=True):
            values.values[values.names.index(p)] = leaf
        outputs = [o for o in _flat(info.function.apply(*values.values))
                   if isinstance(o, torch.Tensor) and o.requires_grad]
        grads = torch.autograd.grad(outputs, leaves, [torch.ones_like(o) for o in outputs],
                                    allow_unused=True)
    except Exception:  # noqa: BLE001 -- the user's code: the recorded grad stays
        return frozenset()
    return frozenset(f"grad:{p}" for p, g in zip(wanted, grads, strict=True) if g is not None)


def _flat(value: Any) -> list[Any]:
    return [v for item in value for v in _flat(item)] if isinstance(value, (tuple, list)) \
        else [value]


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
                                             f"recorded ones: {first}",), runs=False)
        sizes, names = dict(recorded), list(recorded)
    for dim in names:
        size = recorded[dim]
        while size // 2 >= shrunk[dim] and error({**sizes, dim: size // 2}) is None:
            size //= 2
        sizes[dim] = size
    backed = ", ".join(f"{d}={sizes[d]}" for d in names)
    return SizeChoice(sizes, (f"backed off to {backed}: at the shrunk sizes forward raised "
                              f"{first}",))


def _inputs(info: Any, case: dict[str, Any]) -> Any:
    """The double-precision arguments of a drafted case, as a check makes them."""
    spec = from_dict({"target": info.target, "cases": [case]})
    bound = bind(spec.cases[0], info, spec)
    return InputMaker(spec.cases[0], bound, info, 0, "cpu").args("double")


def _forward_error(info: Any, case: dict[str, Any]) -> str | None:
    import torch

    try:
        args = _inputs(info, case)
        with torch.no_grad():
            info.function.apply(*args.values)
    except Exception as exc:  # noqa: BLE001 -- the user's forward
        text = str(exc).splitlines()[0] if str(exc) else ""
        return f"{type(exc).__name__}: {text}"[:200]
    return None


if __name__ == "__main__":
    _serve()
