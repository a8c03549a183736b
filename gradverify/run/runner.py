"""A run: the plan's cases as tasks (--case, --shard), run in-process or in worker processes,
collected into one report."""
from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import math
import platform
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from gradverify._version import __version__
from gradverify.discover import Job, Plan, resolve_deferred
from gradverify.errors import RunInterrupted, interrupt_signal
from gradverify.mutants.merge import scores
from gradverify.options import RunOptions
from gradverify.registry import REGISTRY
from gradverify.results import (
    IN_PROCESS_TIMEOUT,
    CaseResult,
    CheckResult,
    ErrorEntry,
    Finding,
    Report,
    ReportSettings,
    Severity,
    Status,
    first_clause,
    worst,
)
from gradverify.run import caches
from gradverify.run.execute import execute
from gradverify.run.pool import Pool
from gradverify.run.tasks import (
    UNSUPPORTED_ROW,
    Task,
    TaskOutcomes,
    TasksInterrupted,
    mark_interrupted,
)
from gradverify.specmodel import Case, TensorArg
from gradverify.targets import triton_launches


def versions() -> dict[str, str]:
    import torch

    return {"gradverify": __version__, "torch": str(torch.__version__),
            "python": platform.python_version()}


def run(plan: Plan, options: RunOptions,
        progress: Callable[[int, int, str], None] | None = None, pool: Any = None,
        started: float | None = None) -> Report:
    """Run every selected case of the plan, in-process or in worker processes (``pool``, a
    ``gradverify.run.pool.Pool``, may be started early by the caller; ``started``, a
    ``time.perf_counter()`` value, then counts that early start in the duration). An interrupt
    raises ``RunInterrupted`` with the report of what finished."""
    started = time.perf_counter() if started is None else started
    outcomes: TaskOutcomes = {}
    if options.isolate:
        with contextlib.nullcontext(pool) if pool is not None else Pool(options) as pool:
            plan = pool.discover(plan)
            tasks = plan_tasks(plan.jobs, options)
            lowered = pool.fit(len(tasks))
            if lowered:
                plan.notes.append(lowered)
            try:
                outcomes = pool.run(tasks, progress)
            except TasksInterrupted as exc:
                report = _report(plan, tasks, exc.outcomes, options, pool.versions.get("torch"),
                                 started)
                raise RunInterrupted(report, exc.signum) from exc
            torch_version = pool.versions.get("torch")
    else:
        with caches.in_this_process():  # its imports may import torch's compiler
            plan = resolve_deferred(plan)  # (verify() and the plugin resolve none here)
        if options.is_set("timeout"):
            plan.notes.append(IN_PROCESS_TIMEOUT)
        tasks = plan_tasks(plan.jobs, options)
        cache: dict[int, Any] = {}
        torch_version = versions()["torch"] if plan.jobs else None
        try:
            run_tasks(tasks, options, cache, outcomes, progress)
        except KeyboardInterrupt as exc:
            report = _report(plan, tasks, mark_interrupted(tasks, outcomes, exc), options,
                             torch_version, started)
            raise RunInterrupted(report, interrupt_signal(exc)) from exc
    return _report(plan, tasks, outcomes, options, torch_version, started)


def run_tasks(tasks: list[Task], options: RunOptions, cache: dict[int, Any],
              outcomes: dict[int, Any],
              progress: Callable[[int, int, str], None] | None = None) -> None:
    """Run tasks in this process, one after the other, into ``outcomes`` (by task index), with
    torch's compiler cache in a folder of the run (``run/caches.py``)."""
    with caches.in_this_process():
        _run_tasks(tasks, options, cache, outcomes, progress)


def _run_tasks(tasks: list[Task], options: RunOptions, cache: dict[int, Any],
               outcomes: dict[int, Any],
               progress: Callable[[int, int, str], None] | None = None) -> None:
    for task in tasks:
        if progress:
            progress(task.index, len(tasks), f"{task.job.target} {task.case}")
        # What the Function prints goes to stderr, so a report on stdout stays parseable.
        with contextlib.redirect_stdout(sys.stderr):
            outcomes[task.index] = execute(task, options, cache)


def run_job(job: Job, options: RunOptions, cache: dict[int, Any] | None = None,
            pool: Any = None) -> tuple[list[CaseResult], list[ErrorEntry]]:
    """Every selected case of one job as a run gives them: the smallest case marked, the
    findings across its cases added (GV124). In the ``pool``'s worker processes (a
    ``gradverify.run.pool.Pool``: crashes and hangs become that case's error), else in this
    process. The pytest plugin's one way to run."""
    tasks = plan_tasks([job], options)
    outcomes: dict[int, Any] = {}
    if pool is not None:
        # a worker keeps each job's preparation by its index: a job new to the pool, a new one
        index = pool.new_job_index()
        tasks = [replace(t, job_index=index) for t in tasks]
        outcomes = pool.run(tasks, None)
    else:
        run_tasks(tasks, options, {} if cache is None else cache, outcomes)
    return _collect(tasks, outcomes)


def _report(plan: Plan, tasks: list[Task], outcomes: Mapping[int, Any], options: RunOptions,
            torch_version: str | None, started: float) -> Report:
    results, errors = _collect([t for t in tasks if t.index in outcomes], outcomes)
    mutants = scores(results, every=options.mutate)  # the cases' verdicts, merged per spec
    results = [replace(r, mutants=()) for r in results]
    version_info = {"gradverify": __version__, "python": platform.python_version()}
    if torch_version:
        version_info["torch"] = torch_version
    if triton_launches.interpreted():  # the report header says so
        version_info["triton"] = "interpreter (TRITON_INTERPRET=1)"
    return Report(
        settings=ReportSettings(device=options.device, seed=options.seed, mode=options.mode,
                          strict=options.strict, empty_ok=options.changed),
        # one error once: a worker that could not start is said by discovery and by its cases
        results=tuple(results), errors=tuple(dict.fromkeys([*plan.errors, *errors])),
        duration_s=time.perf_counter() - started, versions=version_info,
        notes=tuple(plan.notes) + tuple(_unmatched_cases(plan.jobs, options))
        + (("--only (or `only =` in pyproject.toml) names no check: nothing was selected",)
           if options.only == () else ())
        + tuple(_unsupported(results)), mutants=mutants)


def _unsupported(results: list[CaseResult]) -> list[str]:
    """One note per target skipped for needing a newer torch (``requires_torch``)."""
    notes: dict[tuple[str | None, str], str] = {}
    for result in results:
        if [c.name for c in result.about_case] == [UNSUPPORTED_ROW]:
            where = f" ({result.spec})" if result.spec else ""
            notes.setdefault((result.spec, result.target),
                             f"{result.target}{where} {result.about_case[0].summary}")
    return list(notes.values())


def plan_tasks(jobs: list[Job], options: RunOptions) -> list[Task]:
    """Cases to run, after --case and --shard, knowing only the specs (no import). An empty
    ``--only`` (an unset variable, ``only = []``) selects nothing: exit 5, as pytest does."""
    tasks: list[Task] = []
    if options.only is not None and not options.only:
        return tasks
    for job_index, job in enumerate(jobs):
        cases = job.spec.cases if job.spec else ()
        names = [c.name for c in cases] if job.spec else ["inferred"]
        selected = [n for n in names if selected_case(n, options.cases)]
        sizes = {c.name: _size(c) for c in cases}
        smallest = min(selected, key=lambda n: sizes.get(n, 0)) if selected else None
        for position, name in enumerate(selected):
            if options.shard and not _in_shard(job, name, options.shard):
                continue
            tasks.append(Task(len(tasks), job_index, job, name, first=position == 0,
                              smallest=name == smallest))
    return tasks


def _unmatched_cases(jobs: list[Job], options: RunOptions) -> list[str]:
    """When --case selects no case of any job: the cases there are, to choose from."""
    if not options.cases or not jobs:
        return []
    names = {job.target: [c.name for c in job.spec.cases] if job.spec else ["inferred"]
             for job in jobs}
    if any(selected_case(n, options.cases) for cases in names.values() for n in cases):
        return []
    shown = "; ".join(f"{target}: {', '.join(cases[:12])}{', ...' if len(cases) > 12 else ''}"
                      for target, cases in names.items())
    return [f"--case {' '.join(options.cases)} matches no case (a case's name, or its name "
            f"before [dims]; globs allowed). The cases are: {shown}"]


def selected_case(name: str, patterns: tuple[str, ...]) -> bool:
    if not patterns:
        return True
    base = name.split("[", 1)[0]
    # a name as the report prints it (`basic[S=3]`) is itself, not a glob's [...] class
    return any(p in (name, base) or fnmatch.fnmatchcase(name, p)
               or fnmatch.fnmatchcase(base, p) for p in patterns)


def _size(case: Case) -> float:
    if case.factory:
        return float("inf")
    return float(sum(math.prod(s if isinstance(s, int) else case.dims[s] for s in arg.shape)
                     for _, arg in case.args if isinstance(arg, TensorArg) and arg.shape
                     and arg.differentiable))


def _in_shard(job: Job, case: str, shard: tuple[int, int]) -> bool:
    k, n = shard
    key = f"{job.target}\0{job.spec.path if job.spec else ''}\0{case}".encode(
        "utf-8", "surrogateescape")  # the same bytes in every locale (see case_seed)
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "little") % n == k - 1


def _collect(tasks: list[Task], outcomes: Mapping[int, tuple[CaseResult | None, list[ErrorEntry]]]
             ) -> tuple[list[CaseResult], list[ErrorEntry]]:
    by_job: dict[int, list[CaseResult]] = {}
    errors: list[ErrorEntry] = []
    for task in tasks:
        result, task_errors = outcomes.get(task.index, (None, []))
        if result is not None:
            by_job.setdefault(task.job_index, []).append(result)
        for error in task_errors:
            if error not in errors:  # a job's binding error comes back from each of its cases
                errors.append(error)
    results = [r for job in sorted(by_job) for r in _across_cases(by_job[job])]
    return results, errors


def _across_cases(results: list[CaseResult]) -> list[CaseResult]:
    """What each check finds about its rows in every case of one spec (``Check.across_cases``),
    added to its row in the first case that has one."""
    for name, check in REGISTRY.items():
        rows = [c for r in results for c in r.checks if c.name == name]
        found = tuple(check.across_cases(rows)) if rows else ()
        if not found:
            continue
        first = next(i for i, r in enumerate(results) if any(c.name == name for c in r.checks))
        checks = tuple(_with_findings(c, found) if c.name == name else c
                       for c in results[first].checks)
        case = results[first]
        status = worst([c.status for c in (*checks, *case.about_case)], Status.SKIP)
        results = [*results[:first], replace(case, checks=checks, status=status),
                   *results[first + 1:]]
    return results


def _with_findings(row: CheckResult, found: tuple[Finding, ...]) -> CheckResult:
    """``row`` with findings about every case added: a warning among them makes a passing row
    warn (its summary says so), as a check's own warning would."""
    warning = next((f for f in found if f.severity == Severity.WARNING), None)
    if warning is None or row.status != Status.PASS:
        return replace(row, findings=row.findings + found)
    return replace(row, findings=row.findings + found, status=Status.WARN,
                   summary=first_clause(warning.message))
