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
from gradverify.init.strengthen import Edit, Strength, apply_edit, strengthen
from gradverify.mutants.merge import ARM
from gradverify.options import RunOptions
from gradverify.run.scoring import score
from gradverify.scores import MutantLine, MutationScore
from gradverify.spec.file import from_dict
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
    _, strength, more = grown(info, done.case, done.strength, {})
    sizes = {e.dim: e.value for e in (*done.edits, *more) if e.dim is not None}
    return out, strength, sizes


def with_mutation_score(info: Target, case: Mapping[str, Any], strength: Strength) -> Strength:
    """``strength`` with the mutation score of the strengthened ``case`` (``--mutate``'s
    engine, every check run against each mutant of backward, in this process), which the
    spec's header then states; as it is where the case is weak or scoring fails."""
    return _scored(info, [case], strength)[0]


def with_cases_scored(info: Target, cases: list[Mapping[str, Any]], strength: Strength
                      ) -> Strength:
    """``strength`` with the mutation score of every case of the spec together (the draft's
    and those for forward's branches), and the lines of backward none of them runs."""
    return _scored(info, cases, strength)[0]


NOT_IN_HEADER_SCORE = ("gradgradcheck", "op_aot_dispatch", "op_fake", "compile", "checkpoint")
"""The checks the header's mutation score leaves out: the costliest (second derivatives,
torch.compile and AOT tracing, recomputation), run against every mutant of every case they
would cost ``record`` seconds per Function; the score is then of the others, a lower bound on
what ``check --mutate`` (every check) kills."""


def _scored(info: Target, cases: list[Mapping[str, Any]], strength: Strength
            ) -> tuple[Strength, MutationScore | None]:
    if weakness(strength) is not None:
        return strength, None
    try:
        found = score(info, from_dict({"target": info.target,
                                       "cases": [dict(c) for c in cases]}),
                      RunOptions(skip=NOT_IN_HEADER_SCORE))
    except Exception:  # noqa: BLE001 -- the user's code, or a case no spec can hold: unscored
        return strength, None
    if not found.total:
        return strength, None
    def lines(found: tuple[MutantLine, ...], arm: bool) -> tuple[int, ...]:
        return tuple(sorted({m.location.line for m in found if m.location is not None
                             and m.location.line is not None and (m.why == ARM) == arm}))

    gaps = {(m.location.line, m.gap) for m in found.survived if m.gap is not None
            and m.location is not None and m.location.line is not None}
    return replace(strength, killed=found.killed, total=found.total,
                   unran=lines(found.unexecuted, False), untaken=lines(found.unexecuted, True),
                   gaps=tuple(sorted(gaps))), found


GROW_TRIES = 3
"""Larger cases scored at most, for survivors only a larger case may kill (``grown``)."""


def grown(info: Target, case: Mapping[str, Any], strength: Strength, limits: Mapping[str, int],
          fixed: frozenset[str] = frozenset()) -> tuple[Mapping[str, Any], Strength, list[Edit]]:
    """The case scored with mutants, and where a survivor says a larger case may kill it (one
    window where windows overlap, one block of a loop, one row that nothing permutes), the
    case with one dim grown (doubled plus one, at most to ``limits``: a recorded size) that
    kills more, the first of ``GROW_TRIES`` tried; its strength and the edit made."""
    scored, found = _scored(info, [case], strength)
    if found is None or not any(m.larger for m in found.survived):
        return case, scored, []
    tries = 0
    for dim, size in case.get("dims", {}).items():
        bound = limits.get(dim, 2 * size + 1) if isinstance(size, int) else 0
        if dim in fixed or not isinstance(size, int) or bound <= size or tries >= GROW_TRIES:
            continue
        tries += 1
        edit = Edit(None, min(bound, 2 * size + 1), f"grown from {size}: a case this small "
                    "cannot catch a backward that drops overlapping windows, all but one block "
                    "or a permuted gradient", dim=dim)
        larger = apply_edit(case, edit)
        try:
            bigger, _ = _scored(info, [larger], scorer_for(info)(larger))
        except Exception:  # noqa: BLE001 -- the user's code on a larger case: not grown
            continue
        if (bigger.killed or 0) > (scored.killed or 0):
            return larger, bigger, [edit]
    return case, scored, []


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
