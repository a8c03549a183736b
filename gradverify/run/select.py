"""Which checks run on a case: a pure function of the spec, the case, the options and what the
target has (its capabilities), read from the registry. Imports no torch."""
from __future__ import annotations

from collections.abc import Collection

from gradverify.checks.base import Check
from gradverify.options import RunOptions
from gradverify.registry import REGISTRY
from gradverify.spec.model import Case, Spec
from gradverify.targets.model import Capability


def select(spec: Spec, case: Case, options: RunOptions,
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
