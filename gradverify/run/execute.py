"""One case, checks in order: prerequisites, expectations, timing, global state and the
classification of errors (its job made ready by ``run.prepare``). Runs in a worker process, or
in-process without isolation."""
from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from gradverify import frames, torchstate
from gradverify.checks.base import Check, Outcome
from gradverify.context import CheckContext
from gradverify.errors import InputError
from gradverify.options import RunOptions
from gradverify.registry import REGISTRY
from gradverify.results import CaseResult, CheckResult, ErrorEntry, Finding, Severity, Status, worst
from gradverify.run import casenotes, leftovers
from gradverify.run.prepare import prepare
from gradverify.run.tasks import Task, Unsupported
from gradverify.spec.binding import Bound
from gradverify.spec.inputs import InputMaker, case_seed
from gradverify.spec.model import Case, Spec
from gradverify.targets import Capability, Target
from gradverify.targets import op_calls as opcalls


def execute(task: Task, options: RunOptions, cache: dict[int, Any],
            on_check: Callable[[str], None] | None = None
            ) -> tuple[CaseResult | None, list[ErrorEntry]]:
    """Run one task; ``cache`` keeps each job's preparation across its cases."""
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
    result, error = run_case(prepared.info, prepared.spec, case, prepared.bound[case.name],
                             options, first=task.first, smallest=task.smallest,
                             on_check=on_check, reference=prepared.reference)
    return result, [error] if error else []


def selected_checks(spec: Spec, case: Case, options: RunOptions,
                    capabilities: Collection[Capability]) -> list[Check]:
    """The checks that run on ``case``: switched on at some level (``RunOptions``), made for a
    target with the ``capabilities`` (op checks for ops), with a reference to compare against
    where they need one, and on an accelerator where they need one (unless named by
    ``--only``)."""
    chosen = []
    for name, check in REGISTRY.items():
        if not options.check_enabled(name, check.default, spec, case):
            continue
        if check.made_for and check.made_for not in capabilities \
                and (options.only is None or name not in options.only):
            continue  # no row: an op check says nothing about a Function class
        if check.needs_reference and not spec.reference:
            continue  # nothing to compare against
        if check.needs_accelerator and options.device == "cpu" \
                and (options.only is None or name not in options.only):
            continue  # runs with --device cuda
        chosen.append(check)
    return chosen


def run_case(info: Target, spec: Spec, case: Case, bound: Bound, options: RunOptions,
             first: bool = True, smallest: bool = False,
             on_check: Callable[[str], None] | None = None, reference: Any = None
             ) -> tuple[CaseResult | None, ErrorEntry | None]:
    """Run one case; returns its result, or an input error (a factory that failed).
    Static checks (lint) read the class, not the case: they run on the ``first`` case only."""
    started = time.perf_counter()
    ctx = CheckContext(info=info, spec=spec, case=case,
                       maker=InputMaker(case, bound, info,
                                        case_seed(options.seed, info.target, case.name),
                                        options.device),
                       tolerance=options.tolerance_for(spec, case), mode=options.mode,
                       seed=options.seed, device=options.device, verbose=options.verbose,
                       smallest=smallest, reference=reference)
    checks = [c for c in selected_checks(spec, case, options, info.capabilities)
              if first or not c.static]
    running = leftovers.snapshot()
    rows = _Rows(state=casenotes.state_changes(info, torchstate.restore(), before=True))
    inputs: tuple[Any, ...] = ()
    try:
        if on_check:
            on_check("inputs")
        inputs = ctx.args("working").info()
        ctx.args("double")  # both roles made up front: running out of memory is said once
        ctx.info = opcalls.for_case(info, ctx.maker.groups)  # an op's tensor lists spread
        _run_checks(ctx, checks, options, on_check, rows)
        rows.checks += casenotes.nothing_verified_row(ctx, rows.nothing_verified)
    except InputError as exc:
        return None, ErrorEntry(info.target, spec.path, exc.code, str(exc),
                                location=exc.location)
    except Exception as exc:  # noqa: BLE001 -- out of memory, or a bug of ours
        rows.setup_failed(casenotes.inputs_failed(exc, ctx), ctx)
    rows.restore()
    rows.checks = casenotes.guesses_marked(casenotes.consequences_marked(rows.checks), spec)
    rows.checks += casenotes.unfinished_row(spec)
    rows.checks += casenotes.global_state_row(info, rows.state, rows.changed)
    rows.checks += casenotes.left_running_row(ctx, running)
    return CaseResult(target=info.target, spec=spec.path, case=case.name,
                      status=worst([c.status for c in rows.checks], Status.SKIP),
                      duration_s=time.perf_counter() - started, inputs=inputs,
                      checks=tuple(rows.checks), inferred=spec.inferred), rows.internal


@dataclass
class _Rows:
    """What one case's run collects as it goes."""

    state: list[Finding]
    """Global state changed before the case (by an import): GV012."""
    checks: list[CheckResult] = field(default_factory=list)
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
        traceback_text = row.findings[0].data.get("traceback") \
            if row.findings[0].code == "GV011" else None
        self.add(ctx, row, str(traceback_text) if traceback_text is not None else None)


def _run_checks(ctx: CheckContext, checks: list[Check], options: RunOptions,
                on_check: Callable[[str], None] | None, rows: _Rows) -> None:
    """Each selected check in order, after forward was probed once, each on the baseline
    (torch's defaults), whatever the previous one's calls of the Function did."""
    if on_check:
        on_check("forward")  # a process that dies now dies in the Function's forward
    forward_error = _probe_forward(ctx)
    carrier: str | None = None
    """The check whose row carries forward's error: the root cause is said once, and every
    other check that needs forward is skipped, pointing at it."""
    for check in checks:
        if on_check:
            on_check(check.name)
        rows.restore()
        if forward_error is not None and not check.static \
                and check.not_applicable(ctx.info) is None:
            if carrier is None:
                carrier = check.name
                rows.add(ctx, CheckResult(check.name, Status.ERROR, 0.0,
                                          _first_clause(forward_error.message),
                                          (forward_error,)), None)
            else:
                rows.add(ctx, CheckResult(check.name, Status.SKIP, 0.0,
                                          f"skipped: forward raised (see {carrier})"), None)
            continue
        ctx.options = options.check_options(check.name, ctx.spec, ctx.case)
        ctx.mode = options.mode_for(check.name, ctx.spec, ctx.case)
        result, outcome, internal = _run_one(ctx, check)
        if outcome.nothing_verified and rows.nothing_verified is None:
            rows.nothing_verified = outcome.summary
        ctx.results[check.name] = result
        rows.add(ctx, result, internal)


def _run_one(ctx: CheckContext, check: Check) -> tuple[CheckResult, Outcome, str | None]:
    """One check: skipped when a prerequisite failed, its exceptions classified, its status
    turned into xfail/xpass by the spec's ``expect:``. Returns the result, the check's own
    outcome and, for a bug of gradverify's, its traceback."""
    t0 = time.perf_counter()
    blocked = check.not_applicable(ctx.info) or _blocked_by(check, ctx.results)
    error = None
    if blocked:
        outcome = Outcome.skip(blocked)
    else:
        try:
            outcome = check.run(ctx)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 -- classified just below (SystemExit too)
            outcome, error = _classify(exc, check.name, ctx.info)
    status = outcome.status if error is None else Status.ERROR
    if error is None and any(f.code == "GV016" for f in outcome.findings):
        status = Status.ERROR  # out of memory: the check could not run
    reason = ctx.case.expect.get(check.name) or ctx.spec.expect.get(check.name)
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


def _blocked_by(check: Check, results: Mapping[str, CheckResult]) -> str | None:
    """Why ``check`` cannot run here, or None. A prerequisite failed (expectedly or not:
    autograd rejects backward's result); or an earlier check found a defect that makes this
    one's results consequences of it (forward writing into its input: every later comparison
    of runs would blame something else)."""
    for name in check.requires:
        status = results[name].status if name in results else None
        if status in (Status.FAIL, Status.ERROR, Status.XFAIL):
            return f"skipped: {name} failed"
    for name, result in results.items():
        invalidates = REGISTRY[name].invalidates if name in REGISTRY else {}
        for finding in result.findings:
            if check.name in invalidates.get(finding.code, ()):
                return f"skipped: a consequence of {finding.code} (see {name})"
    return None


def _first_clause(message: str, limit: int = 120) -> str:
    """A finding's message up to its first ``;``: what a check row's summary says."""
    clause = message.split("; ")[0]
    return clause if len(clause) <= limit else clause[: limit - 3].rsplit(" ", 1)[0] + "..."


def _failure_summary(status: Status, outcome: Outcome) -> str | None:
    """What a row that did not pass says: its first error (or warning) finding, so that a FAIL
    row never says things went fine."""
    wanted = Severity.WARNING if status == Status.WARN else Severity.ERROR
    found = [f for f in outcome.findings if f.severity == wanted]
    if not found or status in (Status.PASS, Status.SKIP, Status.XPASS):
        return None
    more = f" (+{len(found) - 1} more)" if len(found) > 1 else ""
    return _first_clause(found[0].message) + more


def _probe_forward(ctx: CheckContext) -> Finding | None:
    """Call forward once on the float64 inputs; a raise makes every check of the case an error."""
    from gradverify.checks import _calls as calls

    try:
        calls.apply(ctx.info, ctx.args("double"))
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 -- user code, sys.exit() included
        shapes = ", ".join(f"{i.name}: {list(i.shape or ())} {i.dtype}" if i.kind == "tensor"
                           else f"{i.name}: {i.kind}" for i in ctx.args("double").info())
        if ctx.spec.inferred:
            hint = (f"the inputs were inferred (every parameter a float tensor of shape [3, 4]); "
                    f"write a spec: gradverify init {ctx.info.target} -o specs/"
                    + (" --import MODULE (the module that registers the op)"
                       if "::" in ctx.info.target else ""))
        elif _runs_in_working_dtype(ctx):
            hint = ("forward runs on the working-dtype inputs but not on their float64 copies: "
                    "a kernel without float64 support; gradient checks need float64, so verify "
                    "it through a plain-PyTorch `reference: mod:fn` in the spec, which compares "
                    "in the working dtype")
        else:
            hint = "check the spec's shapes, dtypes and argument order against forward"
        return Finding("GV008", Severity.ERROR,
                       f"forward raised {calls.describe_exception(exc)} on the inputs of case "
                       f"{ctx.case.name!r} ({shapes})",
                       location=calls.user_location(exc, ctx.info) or ctx.forward_location,
                       hint=hint)
    return None


def _runs_in_working_dtype(ctx: CheckContext) -> bool:
    from gradverify.checks import _calls as calls

    working = ctx.args("working")
    if [i.dtype for i in working.info()] == [i.dtype for i in ctx.args("double").info()]:
        return False
    try:
        calls.apply(ctx.info, working)
    except KeyboardInterrupt:
        raise
    except BaseException:  # noqa: BLE001 -- user code, sys.exit() included
        return False
    return True


def _classify(exc: BaseException, check: str, info: Target) -> tuple[Outcome, str | None]:
    """An exception that escaped a check: out of memory (GV016), the Function's (status
    error, exit 1) when it was raised outside gradverify's own code, else a gradverify bug
    (exit 4)."""
    from gradverify.checks import _calls as calls

    if casenotes.out_of_memory(exc):
        return Outcome(findings=[Finding(
            "GV016", Severity.ERROR, f"out of memory during {check}: "
            f"{calls.describe_exception(exc)}",
            hint="use smaller shapes: gradient bugs show on a few elements per dim")],
            summary="out of memory"), None

    if not frames.raised_in_gradverify(exc, info.source_file):
        finding = Finding("GV008", Severity.ERROR,
                          f"the Function raised {calls.describe_exception(exc)} during {check}",
                          location=calls.user_location(exc, info) or info.backward_location,
                          hint="this check calls the Function with other inputs or gradients; "
                               "see the location")
        return Outcome(findings=[finding], summary="the Function raised"), None
    text = "".join(traceback.format_exception(exc))
    finding = Finding("GV011", Severity.ERROR,
                      f"internal error in check {check}: {calls.describe_exception(exc)}",
                      hint="this is a bug in gradverify; please report it with the traceback",
                      data={"traceback": text})
    return Outcome(findings=[finding], summary="internal error"), text
