"""A spec's mutation score for one target, in this process (``gradverify.mutants``)."""
from __future__ import annotations

from dataclasses import replace

from gradverify.case.binding import bind
from gradverify.mutants.merge import merge
from gradverify.options import RunOptions
from gradverify.run.execute import run_case
from gradverify.run.runner import selected_case
from gradverify.scores import MutantRun, MutationScore
from gradverify.specmodel import Spec
from gradverify.targets import Target, resolve_object


def score(target: Target, spec: Spec, options: RunOptions) -> MutationScore:
    """The mutation score of ``spec`` for ``target`` (introspected, e.g. by
    ``gradverify.targets.resolve``), every case of the spec run in this process with
    ``options`` (its ``cases`` filter applies). Raises ``SpecError`` for a case that does not
    bind to the target's parameters."""
    options = replace(options, mutate=True)
    reference = resolve_object(spec.reference) if spec.reference else None
    runs: list[MutantRun] = []
    for case in spec.cases:
        if not selected_case(case.name, options.cases):
            continue
        result, _ = run_case(target, spec, case, bind(case, target, spec), options,
                             reference=reference)
        runs += list(result.mutants) if result is not None else []
    return merge(target.target, spec.path, runs)
