"""The schedule of a case: which checks have a row, and for each, run it or skip it with its
reason. Pure functions of what the checks declare (``Check.traits``, their consequence rules,
applied by ``run.consequences``), the spec, the case, the options, the target's capabilities
and the rows so far; the runner and the pytest plugin both use them, and no check names
another. Imports no torch."""
from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace

from gradverify.checks.base import Check, Trait
from gradverify.options import RunOptions
from gradverify.registry import REGISTRY
from gradverify.results import CheckResult, Finding, Status
from gradverify.run import consequences
from gradverify.specmodel import Case, Spec
from gradverify.targets.model import Capability, Target


def rows(spec: Spec, case: Case, options: RunOptions, capabilities: Collection[Capability],
         *, first: bool = True) -> list[Check]:
    """The checks that have a row on ``case``, in registry order: switched on at some level
    (``RunOptions``), made for a target with the ``capabilities`` (op checks for ops), with a
    reference to compare against where they need one, on an accelerator where they need one
    (unless named by ``--only``), and, for those that read the class once per target, on the
    ``first`` case only."""
    chosen = []
    for name, check in REGISTRY.items():
        named = options.only is not None and name in options.only
        if not options.check_enabled(name, check.default, spec, case,
                                     composition=check.composition):
            continue
        if check.made_for and check.made_for not in capabilities and not named:
            continue  # no row: an op check says nothing about a Function class
        if check.needs_reference and not spec.reference:
            continue  # nothing to compare against
        if check.needs_accelerator and options.device_for(spec) == "cpu" and not named:
            continue  # runs with --device cuda
        if check.static and not first:
            continue  # read once, on the first case
        chosen.append(check)
    return chosen


@dataclass(frozen=True)
class Forward:
    """What probing forward (and backward) once, before any check, found: nothing wrong,
    forward raised (``error``: GV008), backward raised on float64 only (GV026), or forward is
    not finite on or near the inputs (``not_finite``, GV023). ``carrier`` is the check whose
    row carries that error, once one does."""

    error: Finding | None = None
    not_finite: bool = False
    carrier: str | None = None
    judged_in_working_dtype: bool = False
    """forward or backward refuses float64 only (``Finding.refuses_float64``) and a check that
    judges in the working dtype runs: it is the case's verdict, and the checks that need
    float64 skip."""


@dataclass(frozen=True)
class Decision:
    """Run the check, skip it (``skip``: the row's reason), or carry forward's error in its
    row (``carry``: the first check that would have called forward)."""

    skip: str | None = None
    carry: bool = False
    forward: bool = False
    """Skipped because of forward itself (it raised, or is not finite): the row is the
    schedule's, not the check's (no ``expect:`` applies to it)."""

    @property
    def run(self) -> bool:
        return self.skip is None and not self.carry


RUN = Decision()


def decide(check: Check, info: Target, results: Mapping[str, CheckResult],
           forward: Forward = Forward()) -> Decision:
    """Whether ``check`` runs on a case of target ``info`` after the rows ``results`` (by
    check name, in order), and if not, why."""
    if forward.not_finite and not check.static:
        return Decision(skip="skipped: forward is not finite on or near these inputs (GV023)",
                        forward=True)
    lacking = check.not_applicable(info)
    if forward.error is not None and not check.static and lacking is None:
        refused = forward.error.refuses_float64
        if forward.judged_in_working_dtype:
            if not check.judges_in_working_dtype:
                return Decision(skip=f"skipped: needs float64, where {refused}", forward=True)
        elif forward.carrier is None:
            return Decision(carry=True)
        else:
            said = f"needs float64, where {refused}" if refused else "forward raised"
            return Decision(skip=f"skipped: {said} (see {forward.carrier})", forward=True)
    if lacking is not None:
        return Decision(skip=lacking)
    reason = consequences.skip_reason(check, results)
    return RUN if reason is None else Decision(skip=reason)


def record(ctx_results: dict[str, CheckResult], verdicts: dict[Trait, Status], check: Check,
           result: CheckResult) -> None:
    """Keep ``result`` as the row of ``check`` so far: by name for the schedule, and its status
    under each of its traits for the checks that ask by trait (``CheckContext.verdict``)."""
    ctx_results[check.name] = result
    for trait in check.traits:
        verdicts.setdefault(trait, result.status)


def skipped_row(check: Check, reason: str) -> CheckResult:
    """The row of a check the schedule skipped."""
    return CheckResult(check.name, Status.SKIP, 0.0, reason)


def carrier_row(check: Check, error: Finding, summary: str) -> CheckResult:
    """The row that carries forward's error (said once; the others point at it)."""
    return replace(CheckResult(check.name, Status.ERROR, 0.0, summary), findings=(error,))
