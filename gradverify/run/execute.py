"""One case, checks in order: prerequisites, expectations, timing, global state and the
classification of errors (its job made ready by ``run.prepare``). Runs in a worker process, or
in-process without isolation."""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from gradverify import torchstate
from gradverify.case.binding import Bound
from gradverify.case.context import CheckContext
from gradverify.case.inputs import InputMaker, case_seed
from gradverify.checks import _computes
from gradverify.checks.base import Check, Outcome, Trait
from gradverify.errors import InputError
from gradverify.options import RunOptions
from gradverify.results import (
    CaseResult,
    CheckResult,
    ErrorEntry,
    Finding,
    Severity,
    Status,
    first_clause,
    worst,
)
from gradverify.run import casenotes, classify, consequences, leftovers, schedule
from gradverify.run.prepare import device_unavailable, prepare
from gradverify.run.smallest import first_failure, with_smallest
from gradverify.run.tasks import MUTANTS, SHRINKING, Task, TaskOutcome, Unsupported
from gradverify.scores import MutantRun
from gradverify.specmodel import FLOAT32_INSIDE_TOLERANCE, Case, Spec
from gradverify.targets import Target
from gradverify.targets import op_calls as opcalls

SHRUNK = -1
"""The key in ``execute``'s cache of the (target, check, code) already shrunk in this process."""


def execute(task: Task, options: RunOptions, cache: dict[int, Any],
            on_check: Callable[[str], None] | None = None,
            on_kept: Callable[[str, TaskOutcome], None] | None = None
            ) -> tuple[CaseResult | None, list[ErrorEntry]]:
    """Run one task; ``cache`` keeps each job's preparation across its cases (and, at
    ``SHRUNK``, what was shrunk). After the case's own checks come the phases that must not
    cost its verdict: its mutants (``--mutate``) and, for a failed check, its smallest failing
    case (``smallest``); each is said first to ``on_kept`` with its name and the outcome that
    stands if the phase ends the process."""
    unavailable = device_unavailable(task.job.spec, options)  # before its target is imported
    if unavailable is not None:
        return None, [unavailable]
    if task.job_index not in cache:
        if on_check:
            on_check("import")  # a process that dies now dies importing the target
        cache[task.job_index] = prepare(task.job)
    prepared = cache[task.job_index]
    if isinstance(prepared, ErrorEntry):
        return None, [prepared]
    if isinstance(prepared, Unsupported):
        return prepared.skipped(task.case), []
    case = next(c for c in prepared.spec.cases if c.name == task.case)
    on_mutants = None if on_kept is None else (
        lambda kept, internal: on_kept(MUTANTS, (kept, [internal] if internal else [])))

    def alone(candidate: Case, bound: Bound, check: str) -> CaseResult | None:
        only = dataclasses.replace(options, only=(check,), skip=(), mutate=False)
        return run_case(prepared.info, prepared.spec, candidate, bound, only,
                        reference=prepared.reference)[0]

    def shrunk(result: CaseResult, internal: ErrorEntry | None) -> CaseResult:
        """The result with its smallest failing cases: before any mutant runs, so that one
        that ends the process costs only the score."""
        if on_kept and any(first_failure(row) for row in result.checks):
            # a process that dies now dies shrinking: the result and our bug, as they are
            on_kept(SHRINKING, (result, [internal] if internal else []))
        return with_smallest(result, prepared.info, prepared.spec, case, alone,
                             cache.setdefault(SHRUNK, set()), options)

    result, error = run_case(prepared.info, prepared.spec, case, prepared.bound[case.name],
                             options, first=task.first, smallest=task.smallest,
                             on_check=on_check, reference=prepared.reference,
                             on_mutants=on_mutants, shrunk=shrunk)
    return result, [error] if error else []


def run_case(info: Target, spec: Spec, case: Case, bound: Bound, options: RunOptions,
             first: bool = True, smallest: bool = False,
             on_check: Callable[[str], None] | None = None, reference: Any = None,
             on_mutants: Callable[[CaseResult, ErrorEntry | None], None] | None = None,
             shrunk: Callable[[CaseResult, ErrorEntry | None], CaseResult] | None = None
             ) -> tuple[CaseResult | None, ErrorEntry | None]:
    """Run one case; returns its result, or an input error (a factory that failed).
    Static checks (lint) read the class, not the case: they run on the ``first`` case only.
    ``shrunk`` adds the smallest failing cases to the result. With ``--mutate``, the mutants
    run after that, once the case's result is made, which is said first to ``on_mutants``:
    whatever a mutant does, the case's checks and status stay as they are."""
    started = time.perf_counter()
    ctx = CheckContext(info=info, spec=spec, case=case,
                       maker=InputMaker(case, bound, info,
                                        case_seed(options.seed, info.target, case.name),
                                        options.device_for(spec)),
                       tolerance=options.tolerance_for(spec, case), mode=options.mode,
                       seed=options.seed, device=options.device_for(spec),
                       smallest=smallest, first=first, reference=reference)
    checks = schedule.rows(spec, case, options, info.capabilities, first=first)
    running = leftovers.snapshot()
    rows = _Rows(state=casenotes.state_changes(info, torchstate.restore(), before=True))
    inputs: tuple[Any, ...] = ()
    checked_all = False
    try:
        if on_check:
            on_check("inputs")
        inputs = ctx.args("working").info()
        ctx.args("double")  # both roles made up front: running out of memory is said once
        # an op's tensor lists spread into inputs of their own, known once the inputs are made
        ctx = dataclasses.replace(ctx, info=opcalls.for_case(info, ctx.maker.groups))
        ctx = _run_checks(ctx, checks, options, on_check, rows)
        rows.about += casenotes.nothing_verified_row(ctx, rows.nothing_verified)
        checked_all = True
    except InputError as exc:
        return None, ErrorEntry(info.target, spec.path, exc.code, str(exc),
                                location=exc.location)
    except Exception as exc:  # noqa: BLE001 -- out of memory, or a bug of ours
        rows.setup_failed(casenotes.inputs_failed(exc, ctx), ctx)
    rows.restore()
    marked = casenotes.guesses_marked(consequences.case_marked(
        [*rows.checks, *rows.about]), spec)
    checked, about = marked[:len(rows.checks)], marked[len(rows.checks):]
    about += casenotes.unfinished_row(spec)
    about += casenotes.global_state_row(info, rows.state, rows.changed)
    about += casenotes.left_running_row(ctx, running)
    result = CaseResult(target=info.target, spec=spec.path, case=case.name,
                        status=worst([c.status for c in [*checked, *about]], Status.SKIP),
                        duration_s=time.perf_counter() - started, inputs=inputs,
                        checks=tuple(checked), inferred=spec.inferred, about_case=tuple(about))
    if shrunk is not None:
        result = shrunk(result, rows.internal)
    if options.mutate and checked_all:
        if on_mutants:
            on_mutants(result, rows.internal)
        mutants, why = _mutants(ctx, checks, options, rows)
        result = dataclasses.replace(result, mutants=mutants, mutants_not_judged=why)
    return result, rows.internal


def _computes_in(ctx: CheckContext, options: RunOptions) -> CheckContext:
    """``ctx`` with the dtype the case's target computes in inside (the spec's ``computes_in:``,
    else detected from a forward call) and, for float32 inside, the finite-difference
    defaults that suit it (``FLOAT32_INSIDE_TOLERANCE``)."""
    said = ctx.spec.computes_in
    inside = said if said is not None else _computes.detect(ctx.info, ctx.args("double"))
    if inside in (None, "float64"):
        return ctx
    return dataclasses.replace(ctx, computes_in=inside, tolerance=options.tolerance_for(
        ctx.spec, ctx.case, FLOAT32_INSIDE_TOLERANCE if inside == "float32" else None))


def _mutants(ctx: CheckContext, checks: list[Check], options: RunOptions, rows: _Rows
             ) -> tuple[tuple[MutantRun, ...], str | None]:
    """With ``--mutate``: this case against each mutant of the target's backward (a mutant
    the shared Jacobian comparison does not kill runs through the case's checks again), and
    why they were not judged where judging them raised (out of memory, or a bug of ours in
    the mutants: the case's verdicts and the exit code are as without ``--mutate``)."""
    from gradverify.mutants.engine import case_mutants

    again = [c for c in checks if not c.static]
    plain = dataclasses.replace(options, mutate=False)

    def rerun(info: Target) -> list[CheckResult]:
        rerun_rows = _Rows(state=[])
        _run_checks(dataclasses.replace(ctx, info=info), again, plain, None, rerun_rows)
        rerun_rows.restore()
        return rerun_rows.checks

    try:
        return case_mutants(ctx, rows.checks, rerun), None
    except Exception as exc:  # noqa: BLE001 -- the score only: never the case's verdict
        return (), f"not judged: judging them raised {_one_line(exc)}"
    finally:
        rows.restore()


def _one_line(exc: BaseException) -> str:
    """``Type: first line of the message`` (cut: it becomes a score's note, one line in a
    table)."""
    text = str(exc).strip().splitlines()
    return type(exc).__name__ + (f": {text[0][:200]}" if text else "")


@dataclass
class _Rows:
    """What one case's run collects as it goes."""

    state: list[Finding]
    """Global state changed before the case (by an import): GV012."""
    checks: list[CheckResult] = field(default_factory=list)
    about: list[CheckResult] = field(default_factory=list)
    """Rows about the case as a whole (``CaseResult.about_case``)."""
    internal: ErrorEntry | None = None
    """The first bug of gradverify's met (exit 4)."""
    changed: list[str] = field(default_factory=list)
    """What the Function changed in torch's global state, restored before each check."""
    nothing_verified: str | None = None
    """Why the case verifies nothing, from the first check that said so (GV013)."""

    def restore(self) -> None:
        self.changed += [c for c in torchstate.restore() if c not in self.changed]

    def add(self, ctx: CheckContext, result: CheckResult, internal: str | None) -> None:
        if internal is not None and self.internal is None:
            self.internal = ErrorEntry(ctx.info.target, ctx.spec.path, "GV011", internal,
                                       internal=True)
        self.checks.append(result)

    def setup_failed(self, row: CheckResult, ctx: CheckContext) -> None:
        """The case's inputs could not be made: a row about the case, no check ran."""
        traceback_text = row.findings[0].evidence.traceback \
            if row.findings[0].code == "GV011" else None
        if traceback_text is not None and self.internal is None:
            self.internal = ErrorEntry(ctx.info.target, ctx.spec.path, "GV011",
                                       str(traceback_text), internal=True)
        self.about.append(row)


def _run_checks(ctx: CheckContext, checks: list[Check], options: RunOptions,
                on_check: Callable[[str], None] | None, rows: _Rows) -> CheckContext:
    """Each check of the case in order, after forward and backward were probed once (a raise,
    a value that is not finite, a refusal of float64: ``run.classify``), each on the baseline
    (torch's defaults), whatever the previous one's calls of the Function did; whether it
    runs is the schedule's decision (``schedule.decide``). Each check gets a context of its
    own (its options and mode, the verdicts so far); the results stay here. Returns the
    case's context (``computes_in`` found)."""
    if on_check:
        on_check("forward")  # a process that dies now dies in the Function's forward
    error = classify.forward_error(ctx)
    if error is not None and error.code == "GV025":  # the interpreter's limit: nothing runs
        rows.about.append(casenotes.interpreter_row(error))
        return ctx
    if error is None:
        if on_check:
            on_check("backward")  # the same, in its backward
        error = classify.backward_refusal(ctx)
    if error is None:
        ctx = _computes_in(ctx, options)
    forward = schedule.Forward(
        error=error, not_finite=error is not None and error.code == "GV023",
        judged_in_working_dtype=error is not None and error.refuses_float64 is not None
        and bool(ctx.spec.reference) and any(c.judges_in_working_dtype for c in checks))
    if forward.not_finite and error is not None:
        rows.about.append(casenotes.not_finite_row(error))
    results: dict[str, CheckResult] = {}
    verdicts: dict[Trait, Status] = {}
    for check in checks:
        if on_check and not forward.not_finite:
            on_check(check.name)
        rows.restore()
        decision = schedule.decide(check, ctx.info, results, forward)
        if decision.carry and error is not None:
            forward = dataclasses.replace(forward, carrier=check.name)
            rows.add(ctx, schedule.carrier_row(check, error, first_clause(error.message)),
                     None)
            continue
        if decision.skip is not None and decision.forward:
            rows.add(ctx, schedule.skipped_row(check, decision.skip), None)
            continue
        own = dataclasses.replace(
            ctx, options=MappingProxyType(dict(options.check_options(check.name, ctx.spec,
                                                                     ctx.case))),
            mode=options.mode_for(check.name, ctx.spec, ctx.case),
            earlier=MappingProxyType(dict(verdicts)))
        result, outcome, internal = _run_one(own, check, results, decision)
        if outcome.nothing_verified and rows.nothing_verified is None:
            rows.nothing_verified = outcome.summary
        schedule.record(results, verdicts, check, result)
        rows.add(ctx, result, internal)
    return ctx


def _run_one(ctx: CheckContext, check: Check, results: Mapping[str, CheckResult],
             decision: schedule.Decision = schedule.RUN
             ) -> tuple[CheckResult, Outcome, str | None]:
    """One check: skipped when a prerequisite failed, its exceptions classified, its status
    turned into xfail/xpass by the spec's ``expect:``; ``results``, the earlier checks' rows,
    decide which of its findings an earlier one explains. Returns the result, the check's own
    outcome and, for a bug of gradverify's, its traceback."""
    t0 = time.perf_counter()
    error = None
    if decision.skip is not None:
        outcome = Outcome.skip(decision.skip)
    else:
        try:
            outcome = check.run(ctx)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 -- classified just below (SystemExit too)
            outcome, error = classify.classify(exc, check.name, ctx.info)
    outcome.findings = consequences.marked(check, outcome.findings, results)
    status = outcome.status if error is None else Status.ERROR
    if error is None and any(f.code == "GV016" for f in outcome.findings):
        status = Status.ERROR  # out of memory: the check could not run
    reason = ctx.case.expect.get(check.name) or ctx.spec.expect.get(check.name)
    if status == Status.FAIL and not reason:
        outcome.findings, reason = consequences.declared(check, outcome.findings, results)
    if reason and status == Status.FAIL:
        status = Status.XFAIL
    elif reason and status in (Status.PASS, Status.WARN):
        status = Status.XPASS
    return CheckResult(
        name=check.name, status=status, duration_s=time.perf_counter() - t0,
        summary=_failure_summary(status, outcome) or outcome.summary
        or ("ok" if status == Status.PASS else status.value),
        findings=tuple(outcome.findings), mode=outcome.mode, expect=reason,
        data=outcome.data), outcome, error


def _failure_summary(status: Status, outcome: Outcome) -> str | None:
    """What a row that did not pass says: its first error (or warning) finding, so that a FAIL
    row never says things went fine."""
    wanted = Severity.WARNING if status == Status.WARN else Severity.ERROR
    found = [f for f in outcome.findings if f.severity == wanted]
    if not found or status in (Status.PASS, Status.SKIP, Status.XPASS):
        return None
    more = f" (+{len(found) - 1} more)" if len(found) > 1 else ""
    return first_clause(found[0].message) + more


