"""Recorded cases made strong (``init.strengthen``), in the probe's process: the shrunk case
strengthened on the user's forward, keeping what the recording showed of its structure (an edge
list without self-loops stays one); the edits sent back as JSON and made on the draft, each with
why in its comment."""
from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gradverify.init.measure import scorer_for
from gradverify.init.strengthen import MAX_SECONDS, Edit, apply_edit, chain_edit, strengthen
from gradverify.init.strong import grown, weakness
from gradverify.recording.draft import KEPT_SIZE, Draft, case_dict, draft
from gradverify.recording.spool import Observation


def strong_case(info: Any, call: Observation, joined: frozenset[str],
                sizes: Mapping[str, int], *, seconds: float = MAX_SECONDS) -> dict[str, Any]:
    """``{"edits": [...], "strength": line}`` for one recorded call at its chosen sizes, made
    strong within about ``seconds`` (strengthening first; the mutation score where time is
    left); a dim recorded at most ``KEPT_SIZE`` long keeps its size."""
    started = time.monotonic()
    d = draft(call, joined)
    case = case_dict(d.args, d.dtype, sizes, "recorded")  # a spec's first case's name
    kept = [e for e in (_kept_structure(case, raw) for raw in call.args) if e is not None]
    for edit in kept:
        case = apply_edit(case, edit)
    fixed = frozenset(n for n, size in d.recorded.items()  # kept at their small recorded size
                      if size <= KEPT_SIZE and sizes.get(n) == size)
    try:
        done = strengthen(case, scorer_for(info), fixed_dims=fixed,
                          max_seconds=max(0.0, min(seconds, MAX_SECONDS)))
    except Exception as exc:  # noqa: BLE001 -- the user's code: the case stays as drafted
        return {"edits": [_json(e) for e in kept],
                "strength": f"strength not measured ({type(exc).__name__})"}
    strength, more = done.strength, list[Edit]()
    if time.monotonic() - started < seconds:
        _, strength, more = grown(info, done.case, done.strength, d.recorded, fixed)
    elif strength.cut is None:
        strength = replace(strength, cut="not scored with mutants: the time limit for this "
                                         "Function was spent")
    problem = weakness(strength)
    said = (strength.score_line(), strength.unran_line(), strength.gaps_line())
    scored = "".join(f"; {line}" for line in said if line)
    line = strength.header() + scored if problem is None else \
        f"TODO: {problem}: a check would prove nothing here; set values at which it does"
    return {"edits": [_json(e) for e in (*kept, *done.edits, *more)], "strength": line}


def _kept_structure(case: Mapping[str, Any], raw: Mapping[str, Any]) -> Edit | None:
    """An edge list recorded without self-loops: a chain, which has none either."""
    name = raw.get("name")
    if raw.get("kind") != "tensor" or raw.get("self_loops") is not False or name is None:
        return None
    edit = chain_edit(case, name)
    return replace(edit, why="recorded without self-loops: " + edit.why) if edit else None


def _json(edit: Edit) -> dict[str, Any]:
    return {"arg": edit.arg, "value": edit.value, "why": edit.why, "dim": edit.dim}


def strong_draft(d: Draft, answer: Mapping[str, Any]) -> Draft:
    """The draft with the probe's edits made, and its strength line."""
    args = list(d.args)
    sizes = {**d.sizes, **{e["dim"]: e["value"] for e in answer.get("edits", []) if e.get("dim")}}
    for edit in answer.get("edits", []):
        for i, (name, value, comment) in enumerate(args):
            if name == edit["arg"]:
                new = apply_edit({"args": {name: value}}, Edit(name, edit["value"], edit["why"]))
                args[i] = (name, new["args"][name], f"{comment}; {edit['why']}" if comment
                           else edit["why"])
    return replace(d, args=tuple(args), sizes=sizes, strength=answer.get("strength"))
