"""The smallest failing case of each failed check: its case shrunk (``run.shrink``) while the
check still fails the same way (the same check, the same code, about the same input), each
candidate run in this process as a case of its own with that check alone; and, asked for, the
bare-torch script that reproduces it (``run.repro``). Runs where the case ran (a worker, or the
caller's process), after the case, once per (target, check, code) in a process."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from gradverify.case.binding import Bound, bind
from gradverify.case.inputs import InputMaker, case_seed
from gradverify.errors import InputError
from gradverify.options import RunOptions
from gradverify.registry import REGISTRY
from gradverify.results import CaseResult, CheckResult, Finding, Severity, Smallest, Status
from gradverify.run import repro as repros
from gradverify.run.shrink import (
    CASE_RUNS,
    CASE_SECONDS,
    Budget,
    case_yaml,
    resized,
    shrink_sizes,
    simplifications,
    simplified,
    simplify,
    sizes_of,
)
from gradverify.specmodel import Case, Spec
from gradverify.targets import Target

RunCase = Callable[[Case, Bound, str], CaseResult | None]
"""Runs a case with one check alone (``execute.run_case``): its result, or None."""
NOT_SHRUNK = frozenset({"GV011", "GV016"})
"""Our own bug, out of memory: nothing about the case to shrink."""


@dataclass(frozen=True)
class Failure:
    """What "fails the same way" means for one failed check."""

    check: str
    code: str
    input: str | None

    def seen_in(self, result: CaseResult | None) -> Finding | None:
        """The finding of ``result`` that fails this check with this code about this input."""
        row = next((c for c in result.checks if c.name == self.check), None) if result else None
        if row is None or row.status != Status.FAIL:
            return None
        return next((f for f in row.findings if f.code == self.code and f.input == self.input
                     and f.severity == Severity.ERROR), None)


def first_failure(row: CheckResult) -> Finding | None:
    """The finding a failed row is shrunk for: its first error that is a root cause."""
    if row.status != Status.FAIL or row.name not in REGISTRY or REGISTRY[row.name].static:
        return None
    return next((f for f in row.findings if f.severity == Severity.ERROR
                 and f.consequence_of is None and f.code not in NOT_SHRUNK), None)


def with_smallest(result: CaseResult, info: Target, spec: Spec, case: Case, run: RunCase,
                  done: set[tuple[str, str, str]], options: RunOptions) -> CaseResult:
    """``result`` with the smallest failing case on the first root-cause finding of each
    failed check; ``done`` holds the (target, check, code) shrunk before, which are not
    shrunk again."""
    rows = []
    case_budget = Budget(runs=CASE_RUNS, seconds=CASE_SECONDS)
    for row in result.checks:
        finding = first_failure(row)
        key = (info.target, row.name, finding.code) if finding else None
        if finding is None or key is None or key in done:
            rows.append(row)
            continue
        done.add(key)
        failure = Failure(row.name, finding.code, finding.input)
        found = smallest(failure, info, spec, case, run, options,
                         Budget(within=case_budget, cost=row.duration_s))
        findings = tuple(replace(f, smallest=found) if f is finding else f
                         for f in row.findings)
        rows.append(replace(row, findings=findings) if found else row)
    return replace(result, checks=tuple(rows))


def smallest(failure: Failure, info: Target, spec: Spec, case: Case, run: RunCase,
             options: RunOptions, budget: Budget | None = None) -> Smallest | None:
    """The smallest case found that fails as ``failure`` says, as a spec case (None when
    even the case, run again under its new name or its own, does not fail so)."""
    budget = budget or Budget()
    last: dict[str, Any] = {}

    device = options.device_for(spec)

    def fails(candidate: Case) -> bool:
        try:
            bound = bind(candidate, info, spec)
        except InputError:
            return False
        if device != "cpu" and not _forward_runs_on_cpu(candidate, bound, info, options):
            return False
        result = run(candidate, bound, failure.check)
        finding = failure.seen_in(result)
        if finding is None or result is None:
            return False
        last["result"], last["finding"] = result, finding
        return True

    name = f"{case.name.split('[', 1)[0]}-smallest"
    if not (budget.take() and fails(replace(case, name=name))):
        name = case.name  # the values of the case's own name are the ones that fail
        if not (budget.take() and fails(case)):
            return None
    sizes = shrink_sizes(sizes_of(case), lambda s: fails(resized(case, s, name)), budget)
    small = resized(case, sizes, name)
    small = simplified(small, simplify(simplifications(small),
                                       lambda kept: fails(simplified(small, kept)), budget))
    # every candidate that failed was kept: the last one run is the smallest
    inputs = tuple((i.name, i.shape) for i in last["result"].inputs if i.shape is not None)
    script, why = repros.script(failure.check, last["finding"], info, spec.imports, small,
                                bind(small, info, spec), options.seed,
                                options.tolerance_for(spec, small), options.device_for(spec),
                                reference=spec.reference) \
        if options.repro else (None, None)
    return Smallest(case=case_yaml(small), name=small.name, shapes=inputs, tried=budget.spent,
                    repro=script, no_repro=why)


def _forward_runs_on_cpu(candidate: Case, bound: Bound, info: Target,
                         options: RunOptions) -> bool:
    """Whether forward runs on a candidate's inputs made on the CPU. Tried first when the run
    is on an accelerator: shrinking a size under literal index values (``values: [4, 1]``)
    makes an out-of-range index, which raises IndexError on the CPU but trips a device-side
    assert on CUDA, and that poisons the process for every case after it."""
    import torch

    from gradverify.checks import _calls

    maker = InputMaker(candidate, bound, info,
                       case_seed(options.seed, info.target, candidate.name), "cpu")
    try:
        with torch.no_grad():
            _calls.apply(info, maker.args("double"))
    except Exception:  # noqa: BLE001 -- user code, or inputs it refuses: not a candidate
        return False
    return True
