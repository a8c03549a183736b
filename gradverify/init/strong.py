"""``init``'s guesses made strong (``init.strengthen``): the probed guesses as a case, its
defaults included (a gain of 1.0 hides a backward that forgets it), strengthened, and each
change written back into its guess with why it was made."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gradverify.init.guess import Guess
from gradverify.init.measure import scorer_for
from gradverify.init.probe import spec_dict
from gradverify.init.strengthen import Strength, apply_edit, strengthen
from gradverify.targets import Target


def strengthened(info: Target, guesses: list[Guess]
                 ) -> tuple[list[Guess], Strength, dict[str, int]]:
    """The guesses with the edits that make their case strongest, its strength, and the dims
    whose size strengthening changed."""
    spec = spec_dict(guesses)
    case = {**spec["cases"][0], "dims": spec["dims"]}
    case["args"] = {**case["args"], **{g.name: g.value for g in guesses
                                       if g.kind == "default" and _scalar(g.value)}}
    loops = frozenset(g.name for g in guesses if g.loop is not None)
    done = strengthen(case, scorer_for(info, loops=loops), loops=loops)
    edited = {e.arg: e for e in done.edits if e.arg is not None}
    out = []
    for g in guesses:
        edit = edited.get(g.name)
        if edit is None:
            out.append(g)
        elif g.kind == "default":
            out.append(replace(g, kind="float" if isinstance(edit.value, float) else "int",
                               value=edit.value, longer=None,
                               why=f"forward's default is {g.value!r}, but {edit.why}"))
        elif g.tensor():
            out.append(replace(g, fixed=done.case["args"][g.name], why=f"{g.why}; {edit.why}"))
        else:
            out.append(replace(g, value=edit.value, why=f"{g.why}; {edit.why}"))
    sizes = {e.dim: e.value for e in done.edits if e.dim is not None}
    return out, with_mutation_score(info, done.case, done.strength), sizes


def with_mutation_score(info: Target, case: Mapping[str, Any], strength: Strength) -> Strength:
    """``strength`` with the mutation score of the strengthened ``case`` (``--mutate``'s
    engine, every check run against each mutant of backward, in this process), which the
    spec's header then states; as it is where the case is weak or scoring fails."""
    if weakness(strength) is not None:
        return strength
    try:
        from gradverify.options import RunOptions
        from gradverify.run.scoring import score
        from gradverify.spec.file import from_dict

        found = score(info, from_dict({"target": info.target, "cases": [dict(case)]}), RunOptions())
    except Exception:  # noqa: BLE001 -- the user's code, or a case no spec can hold: unscored
        return strength
    if not found.total:
        return strength
    return replace(strength, killed=found.killed, total=found.total)


def _scalar(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def weakness(strength: Strength | None) -> str | None:
    """Why a case proves nothing (forward not finite, every gradient zero, a loop left empty),
    or None."""
    if strength is None or strength.error is not None:
        return None  # not measured (the header says why): the probe's verdict stands
    if not strength.finite:
        return "forward returns NaN or inf on them, at every value tried"
    if strength.vacuous:
        return "every gradient is zero on them, at every value tried"
    if strength.empty:
        return (", ".join(strength.empty) + " left at 0: forward's loop runs no step, at every "
                "value tried")
    return None


__all__ = ["apply_edit", "strengthened", "weakness"]
