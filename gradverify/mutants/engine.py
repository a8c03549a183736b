"""One case against every mutant of its target's backward. A mutant of backward leaves forward as
it is, so the case's finite differences are taken once and shared by its mutants: for each, only
backward runs again (the Jacobian's sampled rows, in float64, against those differences). A
mutant that comparison does not kill runs through the case's checks again (``rerun``); it is
killed when a check fails or warns where the original passed."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gradverify.case.context import CheckContext
from gradverify.checks._calls import apply
from gradverify.mutants.jacobians import (
    Jacobians,
    Original,
    gradient_difference,
    original_gradients,
)
from gradverify.mutants.plan import Mutant, Plan, plan
from gradverify.mutants.source import SourceMutant
from gradverify.results import CheckResult, Status
from gradverify.scores import MutantRun
from gradverify.targets import Schema, Target

Rerun = Callable[[Target], Sequence[CheckResult]]
"""The case's checks again, on a target with a mutant in place: their rows."""

_BADNESS = {Status.FAIL: 2, Status.ERROR: 2, Status.XFAIL: 2, Status.WARN: 1, Status.XPASS: 1}


def case_mutants(ctx: CheckContext, baseline: Sequence[CheckResult], rerun: Rerun
                 ) -> tuple[MutantRun, ...]:
    """What this case does to each mutant of ``ctx.info``'s backward (``baseline``: the rows
    of the case's checks on the original)."""
    args = ctx.args("double")
    names = list(args.names)
    # where a value mutant points: backward's def; else forward's; else the spec
    mutants = plan(ctx.info, names, ctx.location or ctx.forward_location or ctx.spec.location,
                   _node(ctx))
    try:
        with mutants.observe(ctx.info):
            original = original_gradients(ctx)
    except Exception:  # noqa: BLE001 -- the original raised: the checks report that
        return ()
    jacobians = Jacobians.of(ctx)
    gradcheck = [r.status.value for r in baseline if r.name == "gradcheck"]
    facts = {"atol": ctx.tolerance.atol, "rtol": ctx.tolerance.rtol, "note": mutants.note,
             "gradcheck": gradcheck[0] if gradcheck else None, "scale": original.scale,
             "needs_input_grad": next((r.status.value for r in baseline
                                       if r.name == "needs_input_grad"), None),
             "layout_check": next((r.status.value for r in baseline if r.name == "layout"),
                                  None)}
    return tuple(_judge(ctx, m, mutants, jacobians, original, baseline, rerun, facts)
                 for m in mutants.mutants)


def _node(ctx: CheckContext) -> Any:
    """A graph node of one call of an op (its registered backward is found through it)."""
    if ctx.info.detail(Schema) is None:
        return None
    try:
        return apply(ctx.info, ctx.args("double")).node
    except Exception:  # noqa: BLE001 -- the checks report what forward raises
        return None


def _judge(ctx: CheckContext, mutant: Mutant, mutants: Plan,
           jacobians: Jacobians | None, original: Original, baseline: Sequence[CheckResult],
           rerun: Rerun, facts: dict[str, Any]) -> MutantRun:
    """One mutant on this case: its verdict and the facts behind it."""
    def verdict(name: str, killed_by: str | None = None, **data: Any) -> MutantRun:
        return MutantRun(mutant.key, mutant.mutation, mutant.location, name, killed_by,
                         {**facts, **data})

    source = mutant.source
    if mutant.equivalent is not None:
        return verdict("equivalent", why=mutant.equivalent)
    if source is not None and source.swapped is not None \
            and not original.same_shape(*source.swapped):
        return verdict("inapplicable")
    if source is not None and source.returned is not None \
            and source.returned not in original.floating:
        return verdict("inapplicable")  # the gradient of an integer tensor or a number
    if source is not None and source.gate is not None \
            and original.floating == [source.gate]:
        return verdict("equivalent", why=f"{original.name(source.gate)!r} is the only input "
                       "that can require grad, so backward runs only when it does: the gate is "
                       "always open")
    if mutant.value is not None and not original.requires_grad(mutant.value.position):
        return verdict("inapplicable")  # no gradient of that input is asked for here
    known = _known(mutant, mutants, original)
    if mutant.value is not None:
        mutant.value.hits = 0
        mutant.value.uniform.clear()
        mutant.value.scalar.clear()
    seen: list[CheckResult] = []

    def rerun_seen(target: Target) -> Sequence[CheckResult]:
        seen[:] = rerun(target)
        return seen

    with mutant.install(ctx.info) as info:
        if source is not None and not _ran(source, mutants.ran):
            # not run by the case's own call: maybe by a check's (a subset requiring grad)
            mutant.ran.clear()
            rows = rerun_seen(info)
            if not _ran(source, mutant.ran):
                return verdict("unexecuted", arm=bool(source.arms) and _statement_ran(
                    source, mutants.ran | mutant.ran))
            by, difference = _killed_by(rows, baseline), None
        else:
            by, difference = _exercise(ctx, info, jacobians, original, baseline, rerun_seen)
        if mutant.value is not None and not mutant.value.hits:
            return verdict("inapplicable")
    if by is not None:
        return verdict("killed", by)
    if mutant.value is not None:
        if mutant.value.scalar and all(mutant.value.scalar):
            return verdict("equivalent", why=f"the gradient of {mutant.value.name!r} is 0-d: "
                           "no input can make a permutation of it change anything")
        known["uniform"] = bool(mutant.value.uniform) and all(mutant.value.uniform)
    known["new_codes"] = sorted(_said(seen) - _said(baseline))
    same = _same_by_what_it_saw(mutant, known, difference)
    if same is not None:
        return verdict("equivalent", why=same)
    return verdict("survived", difference=difference, **known)


def _same_by_what_it_saw(mutant: Mutant, known: dict[str, Any],
                         difference: float | None) -> str | None:
    """Why a mutant that lived is the original's function, as its runs showed (an ignored
    gate that only wastes work; a ``.view`` of a tensor that stays contiguous whatever layout
    backward is handed; a bound of a slice that ends where its dim does, moved past the end),
    or None; ``known`` gets what a survivor's why reads."""
    source = mutant.source
    if known.get("slice") == "exact" and difference == 0.0:
        return NEVER_CUTS
    if source is not None and source.operator == "gate" and WASTED & set(known["new_codes"]):
        return ONLY_WASTE
    if source is not None and source.operator == "view":
        known["layout"] = _layout(mutant.observed)
        if known["layout"] == "follows-nothing":
            return VIEWS_FRESH
    if source is not None and source.operator == "overwrite":
        known["wrote_over"] = any(nonzero for kind, nonzero in mutant.observed if kind == "kept")
    return None


NEVER_CUTS = ("it moves a bound of a slice that, in every call, ended exactly where its dim "
              "does (a slice that never cuts: the bound is the dim's size, as the code made "
              "them), past that end, where the slice takes the same")
VIEWS_FRESH = ("the tensor it views stayed contiguous while backward was handed non-contiguous "
               "gradients (the layout check's), so `.view` takes it as `.reshape` does")


def _layout(observed: Sequence[tuple[str, bool]]) -> str:
    """What a ``.view`` mutant that lived saw: ``viewable`` (a non-contiguous tensor whose
    merged dims ``.view`` could still take), ``ones`` (one that merged only dims of size 1),
    ``splits`` (one, but a view that merged no dims, which takes any layout),
    ``follows-nothing`` (contiguous while the incoming gradient was not), or ``contiguous``
    (no call handed backward a non-contiguous gradient)."""
    views = [c for kind, c in observed if kind == "view"]
    merges = [m for kind, m in observed if kind == "merge"]
    trivial = [m for kind, m in observed if kind == "merge-ones"]
    uneven = [(merged, one) for contiguous, merged, one in zip(views, merges, trivial)
              if not contiguous]
    if any(merged for merged, _ in uneven):
        return "viewable"
    if any(one for _, one in uneven):
        return "ones"
    if uneven:
        return "splits"
    if any(kind == "incoming" and not contiguous for kind, contiguous in observed):
        return "follows-nothing"
    return "contiguous"


def _statement_ran(source: SourceMutant, lines: set[int]) -> bool:
    return any(source.span[0] <= n <= source.span[1] for n in lines)


def _ran(source: SourceMutant, lines: set[int]) -> bool:
    """Whether the change ran: its statement, and each ``a if c else b`` arm that holds it."""
    return _statement_ran(source, lines) and all(arm in lines for arm in source.arms)


def _exercise(ctx: CheckContext, info: Target, jacobians: Jacobians | None, original: Original,
              baseline: Sequence[CheckResult], rerun: Rerun) -> tuple[str | None, float | None]:
    """The check that kills the mutant in place (None: none does), and how far its gradients
    are from the original's. The shared Jacobian first; where it does not kill, the checks.
    A mutant whose backward raises in the comparisons goes to the checks, which classify it."""
    try:
        if jacobians is not None and jacobians.mismatch(info):
            return "gradcheck", None
    except Exception:  # noqa: BLE001 -- the checks will say what the mutant does
        pass
    try:
        difference = gradient_difference(ctx, info, original)
    except Exception:  # noqa: BLE001 -- as above
        difference = None
    return _killed_by(rerun(info), baseline), difference


def _known(mutant: Mutant, mutants: Plan, original: Original) -> dict[str, Any]:
    """Facts of this case about what the mutant changes: the operand a drop removes, the
    returned gradient it concerns, the needs_input_grad entry a gate read."""
    source = mutant.source
    known: dict[str, Any] = {"operator": source.operator if source is not None else "value"}
    if source is not None and source.dropped is not None:
        seen = set(mutants.probes.get(source.dropped, ()))
        known["operand"] = seen.pop() if len(seen) == 1 else "varies" if seen else None
        known["operand_text"] = source.dropped_text
        # an input of forward's, or an attribute named as one: what the spec's values set
        bare = (source.dropped_text or "").removeprefix("ctx.")
        known["operand_is_input"] = bare in original.args.names
    if source is not None and source.sliced is not None:
        took = set(mutants.probes.get(source.sliced, ()))
        known["slice"] = took.pop() if len(took) == 1 else "varies" if took else None
    position = mutant.value.position if mutant.value is not None \
        else source.returned if source is not None else None
    if source is not None and source.gate is not None:
        position = source.gate
    if position is not None:
        known["input"] = original.name(position)
        known["requires_grad"] = original.requires_grad(position)
        known["zero_gradient"] = original.zero(position)
    return known


WASTED = frozenset({"GV204", "needs_input_grad:unneeded_gradients"})
"""What needs_input_grad says of a gradient computed for an input that needed none: a note
(or the row's data), never a failure."""
ONLY_WASTE = ("ignoring the gate only wastes work: backward computes a gradient nobody asked "
              "for, which autograd drops (needs_input_grad notes it, GV204, and fails nothing), "
              "and every gradient the checks compare is the same")


def _said(rows: Sequence[CheckResult]) -> set[str]:
    """What rows say: their findings' codes, and ``check:key`` for the data they carry (a
    note kept as data, such as needs_input_grad's unneeded gradients)."""
    return {f.code for row in rows for f in row.findings} \
        | {f"{row.name}:{key}" for row in rows for key in row.data}


def _killed_by(rows: Sequence[CheckResult], baseline: Sequence[CheckResult]) -> str | None:
    """The first check worse on the mutant than on the original: failing, erring or failing
    as expected where it did not; warning where it did not."""
    before = {row.name: row.status for row in baseline}
    for row in rows:
        if _BADNESS.get(row.status, 0) > _BADNESS.get(before.get(row.name, Status.SKIP), 0):
            return row.name
    return None
