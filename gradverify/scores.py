"""What ``--mutate`` measures of a spec, in the data model of a run: each mutant of a
target's backward as one case saw it, and the score merged over a spec's cases
(docs/runs.md). Frozen dataclasses, beside ``results`` (whose case results and report carry
them) and below the checks and the renderers."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gradverify.results import Location


@dataclass(frozen=True)
class MutantRun:
    """One mutant of a target's backward as one case saw it (``gradverify.mutants``)."""

    key: str
    """The mutant's name, the same in every case of the run."""
    mutation: str
    """What changed: ```grad * w` -> `grad```, ``gradient of 'x' negated``."""
    location: Location | None
    verdict: str
    """``killed``, ``survived``, ``unexecuted`` (its line did not run), ``equivalent`` (the
    same function, certainly) or ``inapplicable`` (nothing it could change in this case)."""
    killed_by: str | None = None
    """The check that failed (or warned) on it where the original did not."""
    data: Mapping[str, Any] = field(default_factory=dict)
    """The facts behind why it lived (JSON-safe): the operand a drop removed, the largest
    difference from the original's gradients, the tolerance."""


@dataclass(frozen=True)
class MutantLine:
    """A mutant that was not killed: what changed, where, and why it lived."""

    mutation: str
    location: Location | None
    why: str
    larger: bool = False
    """A survivor a larger case may kill (``record`` grows such a case's dims towards theirs)."""
    gap: str | None = None
    """What no case exercised that this survivor needs (overlap, two blocks), in a few words."""


@dataclass(frozen=True)
class MutationScore:
    """How much one spec proves about one target (``--mutate``): of ``total`` mutants of its
    backward, ``killed`` made some check fail or warn where the original passed. Equivalent
    mutants and those on lines no case runs are listed apart, not counted."""

    target: str
    spec: str | None
    total: int
    killed: int
    survived: tuple[MutantLine, ...] = ()
    equivalent: tuple[MutantLine, ...] = ()
    unexecuted: tuple[MutantLine, ...] = ()
    note: str | None = None
    """What kind of mutants it got, when not every kind (``no source of backward``)."""
