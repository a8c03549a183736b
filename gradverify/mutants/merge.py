"""A target's mutation score from what each case of its spec did to each mutant: killed where
any case killed it; equivalent, unexecuted or not applicable where every case says so; else a
survivor, with the reason its cases give. Pure: no torch."""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gradverify.results import Location
from gradverify.scores import MutantLine, MutantRun, MutationScore


def merge(target: str, spec: str | None, runs: Iterable[MutantRun]) -> MutationScore:
    """One score from the runs of every case (each mutant once per case, same keys)."""
    by_key: dict[str, list[MutantRun]] = {}
    for run in runs:
        by_key.setdefault(run.key, []).append(run)
    killed = 0
    survived: list[MutantLine] = []
    equivalent: list[MutantLine] = []
    unexecuted: list[MutantLine] = []
    note = None
    for seen in by_key.values():
        verdicts = {r.verdict for r in seen}
        first = seen[0]
        note = note or first.data.get("note")
        if "killed" in verdicts:
            killed += 1
        elif verdicts - {"inapplicable", "unexecuted"} == {"equivalent"} or (
                "equivalent" in verdicts and all(r.data.get("difference") == 0.0 for r in seen
                                                 if r.verdict == "survived")):
            # equivalent where a case could tell, and no change at all in the others
            same = next(r for r in seen if r.verdict == "equivalent")
            equivalent.append(_line(same, str(same.data.get("why", "equivalent"))))
        elif verdicts <= {"inapplicable"}:
            continue  # nothing it could change: a swap of two shapes, an input with no gradient
        elif verdicts <= {"unexecuted", "inapplicable"}:
            arm = any(r.data.get("arm") for r in seen if r.verdict == "unexecuted")
            unexecuted.append(_line(first, ARM if arm else "no case runs this line"))
        else:
            lived = [r for r in seen if r.verdict == "survived"]
            line = _line(first, why(lived, everywhere=len(lived) == len(seen)))
            survived.append(dataclasses.replace(
                line, larger=_larger_may_kill([r.data for r in lived]),
                gap=_gap([r.data for r in lived])))
    return MutationScore(target, spec, killed + len(survived), killed, tuple(survived),
                         tuple(equivalent), tuple(unexecuted), note)


ARM = "no case takes this arm of its `... if ... else ...`"
"""Why an unexecuted mutant in an arm of a conditional expression whose line ran was not."""


def _line(run: MutantRun, why: str) -> MutantLine:
    return MutantLine(run.mutation, run.location, why)


def _too_small(facts: Sequence[Mapping[str, Any]]) -> str | None:
    """Why a `.view` or an overwritten sum lived, from the layouts and sums its cases showed
    (a case too small to permute a gradient or to overlap two windows), or None."""
    if _all(facts, "operator", "view"):
        if any(f.get("layout") == "viewable" for f in facts):
            return ("a non-contiguous tensor reached this `.reshape`, but the dims it merges "
                    "were laid out one after the other, so `.view` could still take them; "
                    "give a case whose incoming gradient is permuted across the dims it "
                    "merges (each of them at least 2 long)")
        if any(f.get("layout") == "ones" for f in facts):
            return ("a non-contiguous tensor reached this `.reshape`, but the dims it merged "
                    "had size 1 (one row, one frame, one block), a layout `.view` can still "
                    "take; give the dims it reshapes sizes of at least 2")
        if any(f.get("layout") == "splits" for f in facts):
            return ("non-contiguous tensors reached this `.reshape`, but in every case it only "
                    "kept or split their dims, which `.view` does in any layout: only a merge "
                    "of two dims needs contiguous memory; give a case on which it merges dims "
                    "(an input with more leading dims, where `-1` spans several), if forward "
                    "takes one (if none can, the mutant changes nothing)")
        if not any(f.get("layout_check") in ("pass", "warn", "fail") for f in facts):
            return ("the layout check, which hands backward non-contiguous gradients, did not "
                    "run; turn it on (it is off in `checks:` or by --only/--skip)")
        return ("no case hands backward a non-contiguous gradient that reaches this line "
                "(each permuted dim has size 1: one row, one frame, one block); give those "
                "dims sizes of at least 2")
    if _all(facts, "slice", "past"):
        return ("the slice whose bound it changes took the whole of its dim in every case (the "
                "bound beyond the dim's end); only a case on which that slice cuts can kill "
                "it, if forward admits one")
    if _all(facts, "operator", "overwrite") and _all(facts, "wrote_over", False):
        return ("what this `+=` adds to held only zeros each time, in every case (one window, "
                "one block, a loop that ran once, or windows that never overlap); give a case "
                "whose windows overlap or whose loop adds at least twice (where that cannot "
                "happen, the mutant changes nothing)")
    return None


def _gap(facts: Sequence[Mapping[str, Any]]) -> str | None:
    """What a survivor's cases never exercised, where its facts say (a layout, an overlap, a
    slice that cuts)."""
    if _all(facts, "operator", "view"):
        if any(f.get("layout") == "splits" for f in facts):
            return "a `.reshape` that merges dims of a non-contiguous tensor"
        if any(f.get("layout") == "ones" for f in facts):
            return "a non-contiguous gradient whose merged dims are longer than 1"
        if any(f.get("layout_check") in ("pass", "warn", "fail") for f in facts):
            return "a non-contiguous gradient that `.view` cannot take"
        return None
    if _all(facts, "operator", "overwrite") and _all(facts, "wrote_over", False):
        return "a `+=` onto what an earlier window or block added (overlap, two blocks)"
    if _all(facts, "slice", "past"):
        return "a slice that cuts (it took the whole of its dim)"
    return None


def _larger_may_kill(facts: Sequence[Mapping[str, Any]]) -> bool:
    """Whether what the cases showed of a survivor says a larger case may kill it: a `.view`
    that met no layout it cannot take, a sum that never added to anything."""
    if _all(facts, "operator", "view"):
        return all(f.get("layout") in ("viewable", "ones", "contiguous") for f in facts) \
            and any(f.get("layout_check") in ("pass", "warn", "fail") for f in facts)
    return _all(facts, "operator", "overwrite") and _all(facts, "wrote_over", False)


def _all(facts: Sequence[Mapping[str, Any]], key: str, value: Any) -> bool:
    return bool(facts) and all(f.get(key) == value for f in facts)


def why(lived: Sequence[MutantRun], everywhere: bool = True) -> str:
    """Why a mutant survived, from the facts of the cases where it ran (``everywhere``: every
    case of the spec ran it)."""
    facts = [r.data for r in lived]
    operand = facts[0].get("operand_text") if facts else None
    cases = "every case" if everywhere else "every case that runs it"
    neutral = {"drop-factor": ("ones", 1), "drop-term": ("zeros", 0)}.get(
        str(facts[0].get("operator")) if facts else "")
    if operand and neutral and _all(facts, "operand", neutral[0]):
        value = neutral[1]
        if _all(facts, "operand_is_input", True):
            return f"{cases} has {operand} = {value}; give {operand} random values"
        return (f"{cases} has {operand} = {value} here, so dropping it changes nothing; if it "
                f"can be other than {value}, choose inputs that make it so")
    name = facts[0].get("input") if facts else None
    if name is not None and _all(facts, "requires_grad", False):
        return (f"no case has {name!r} requiring grad, so its gradient is never checked; "
                f"give {name!r} requires_grad: true in a case")
    if _all(facts, "operator", "gate"):
        checked = {f.get("needs_input_grad") for f in facts}
        if checked <= {None, "skip"}:
            return ("the needs_input_grad check, which closes the gate, did not run; turn it on "
                    "(it is off in `checks:` or by --only/--skip)")
        if checked <= {"fail", "error"}:
            return ("needs_input_grad already fails on the original, so it cannot tell what the "
                    "gate changes; fix the target first")
    if name is not None and _all(facts, "zero_gradient", True):
        return (f"the gradient of {name!r} is zero in every case; choose inputs that give "
                f"{name!r} a nonzero gradient")
    if name is not None and _all(facts, "uniform", True):
        return (f"every element of the gradient of {name!r} is the same in every case, so "
                "permuting it changes nothing; choose inputs that give it distinct values")
    structure = _too_small(facts)
    if structure is not None:
        return structure
    if _all(facts, "gradcheck", "xfail"):
        return ("the spec expects gradcheck to fail (`expect:`), so finite differences cannot "
                "tell this gradient from the intended one; name a `reference:` whose autograd "
                "gives the intended gradient")
    if facts and all(f.get("gradcheck") in ("fail", "error") for f in facts):
        return ("gradcheck already fails on the original, so a changed gradient cannot be told "
                "from the wrong one; fix the target first")
    return _by_difference(facts)


def _by_difference(facts: Sequence[Mapping[str, Any]]) -> str:
    known = [f for f in facts if isinstance(f.get("difference"), (int, float))]
    if not known:
        return "no check fails or warns on it, and no case has a gradient to compare"
    largest = max(f["difference"] for f in known)
    if largest == 0:
        return ("its gradients equal the original's exactly in every case: on these inputs "
                "the change has no effect; choose inputs (and requires_grad) under which it "
                "has one")
    atol, rtol = known[0]["atol"], known[0]["rtol"]
    if all(f["difference"] <= atol + rtol * f.get("scale", 0.0) for f in known):
        return (f"its gradients differ from the original's by at most {largest:.2g}, within "
                f"the tolerance (atol {atol:g}, rtol {rtol:g}); choose inputs where the change "
                "is larger, or tighten the tolerance")
    statuses = {f.get("gradcheck") for f in known}
    because = ("gradcheck is off for these cases" if statuses == {None} else
               "gradcheck skipped these cases" if statuses <= {None, "skip"} else
               "the finite differences decide nothing where it differs (a kink or a tie in the "
               "inputs: fix the spec's `init`)")
    return (f"its gradients differ from the original's by up to {largest:.2g}, yet no check "
            f"failed or warned on it: {because}")


def scores(results: Iterable[Any], every: bool = False) -> tuple[MutationScore, ...]:
    """Each (target, spec)'s score from its cases' results (``CaseResult.mutants``), in the
    order the results come; with ``every`` (a ``--mutate`` run), also for a target none of
    whose cases tried a mutant, saying so."""
    grouped: dict[tuple[str, str | None], list[MutantRun]] = {}
    unjudged: dict[tuple[str, str | None], list[str]] = {}
    for result in results:
        key = (result.target, result.spec)
        if result.mutants or every or result.mutants_not_judged:
            grouped.setdefault(key, []).extend(result.mutants)
        if result.mutants_not_judged:
            unjudged.setdefault(key, []).append(
                f"case {result.case}'s mutants {result.mutants_not_judged}")
    found = []
    for key, runs in grouped.items():
        score = merge(*key, runs) if runs else MutationScore(*key, 0, 0, note=NONE_TRIED)
        if key in unjudged:
            said = "; ".join(unjudged[key])
            note = said if not runs else "; ".join(filter(None, [score.note, said]))
            score = dataclasses.replace(score, note=note)
        found.append(score)
    return tuple(found)


NONE_TRIED = ("no mutant was tried: no case ran the original's forward and backward to the end "
              "(see the cases' errors and skips)")


def place(location: Location | None) -> str:
    """``file:line`` of a mutant, for the text formats."""
    return f"{location.file}:{location.line}" if location is not None else "?"
