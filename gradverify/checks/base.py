"""What every check is: data (name, default, codes, options) plus one ``run``.

This module and every check module import torch only inside ``run``, so the registry can be
read (for ``explain``, ``--only`` validation and spec validation) without importing torch.
"""
from __future__ import annotations

import abc
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from gradverify.results import CheckResult, Finding, Severity, Status
from gradverify.targets import why_lacking

if TYPE_CHECKING:
    from gradverify.case.context import CheckContext
    from gradverify.codes import Code, Symptom
    from gradverify.targets import Capability, Target


@dataclass(frozen=True)
class CheckOption:
    """A per-check option settable under a spec's ``checks:``."""

    name: str
    kind: type
    help: str
    choices: tuple[Any, ...] | None = None


class Trait(enum.Enum):
    """What a check does with a case, declared by the check (``Check.traits``). The
    consequence rules (``Check.consequences``) reach checks by trait, so no check names
    another."""

    CALLS_BACKWARD = "calls backward"
    """Needs a backward whose result autograd accepts."""
    DIFFERENTIATES = "differentiates through the target on real tensors"
    DIFFERENTIATES_FAKE = "differentiates through the target on fake tensors"
    COMPARES_RUNS = "compares runs of the target"
    """Several runs on copies of the same inputs, or against another way of computing it:
    a forward that writes into its input makes every such comparison blame something else."""
    REUSES_INPUTS = "calls the target several times on the same input tensors"
    TRACES = "runs the op's fake implementation (tracing)"
    SECOND_ORDER = "differentiates backward itself"
    JUDGES_GRADIENT = "compares backward's result with the true derivative"
    """A spec that declares such a check an expected failure declares that backward is not
    the gradient (``Consequence.declared``)."""
    ONCE_PER_TARGET = "reads the class, once per target"
    """Runs on a target's first case only, and even when forward raises."""


class Effect(enum.Enum):
    """What a consequence rule does to what it reaches."""

    SKIPS = "skips"
    """The checks it reaches do not run: each row says "skipped", pointing at the cause."""
    MARKS = "marks"
    """The warnings and errors it reaches are marked as consequences of the cause
    (``Finding.consequence_of``): the root cause is said once, with its own advice."""


@dataclass(frozen=True)
class Consequence:
    """One consequence rule of the check that declares it: which of its results (a finding of
    ``codes``, the check failing, or the spec declaring it an expected failure) make which
    other results (the checks with a trait of ``reaches``, the findings that report
    ``symptom``) follow from it. ``gradverify.run.consequences`` applies every rule; a rule
    names no other check and none of its codes."""

    effect: Effect
    codes: frozenset[str] = frozenset()
    """The declaring check's codes whose finding is the cause; empty: the check ending FAIL,
    ERROR or XFAIL (a backward result autograd rejects), unless ``declared``."""
    reaches: frozenset[Trait] = frozenset()
    """The checks it reaches, by what they do; empty: every check."""
    pattern: str | None = None
    """Only a cause finding whose Jacobian shows this pattern (``_jacobian.HINTS``' key)."""
    symptom: Symptom | None = None
    """Only the findings that report this (``codes.Symptom``); None: every warning and error."""
    same_input: bool = False
    """Only the findings about the cause's input."""
    earlier_too: bool = False
    """Reaches the checks that ran before the cause as well as after it, applied once the
    case has ended: a write into the Function's own tensors corrupts every call on them."""
    declared: bool = False
    """The cause is the spec declaring the check an expected failure (its XFAIL row with a
    reason): the findings reached say so, and a row of nothing else is an expected failure
    too."""


class Check(abc.ABC):
    """Base of every check: what the runner needs to know about it is declared here, with its
    default, and each check module's class overrides what differs. ``run`` is the check."""

    name: ClassVar[str]
    default: ClassVar[bool] = True
    """On unless turned off (True), or opt-in (False)."""
    composition: ClassVar[bool] = False
    """An opt-in check of a costly composition (torch.compile, autocast): ``--compose``
    (pyproject's ``compose = true``, ``verify(compose=True)``, a spec's ``compose: all``)
    turns every such check on."""
    summary: ClassVar[str]
    """One line: what the check verifies."""
    codes: ClassVar[tuple[Code, ...]] = ()
    """The codes it reports, documented; the registry collects them."""
    options: ClassVar[tuple[CheckOption, ...]] = ()
    """Options settable under ``checks:`` in a spec or ``[tool.gradverify]``."""
    traits: ClassVar[frozenset[Trait]] = frozenset({Trait.CALLS_BACKWARD})
    """What the check does with a case; the schedule decides from these."""
    consequences: ClassVar[tuple[Consequence, ...]] = ()
    """What its results make consequences of them (``Consequence``): the checks skipped, the
    findings marked."""
    needs_reference: ClassVar[bool] = False
    """Runs only when the spec names a ``reference:``."""
    judges_in_working_dtype: ClassVar[bool] = False
    """Judges the target on the case's working-dtype inputs: a Function that refuses float64
    (forward or backward raises on the float64 copies only) does not stop it, while it stops
    every check that needs float64 (``run.schedule``)."""
    needs_accelerator: ClassVar[bool] = False
    """Runs only with ``--device cuda`` (or when named by ``--only``)."""
    needs: ClassVar[Mapping[Capability, str]] = MappingProxyType({})
    """The target capabilities (``gradverify.targets.Capability``) the check needs, each with
    the reason a skipped row gives when the target lacks it ("": the target kind's own words,
    ``targets.why_lacking``). Checked in order; the first one lacking is the reason."""
    made_for: ClassVar[Capability | None] = None
    """A capability the check is made for (an op's schema): a target without it has no row,
    unless the check is named by ``--only`` (then it skips, saying why)."""

    @property
    def static(self) -> bool:
        """Reads the class, not a case's calls (``Trait.ONCE_PER_TARGET``)."""
        return Trait.ONCE_PER_TARGET in self.traits

    def not_applicable(self, info: Target) -> str | None:
        """Why this check does not apply to target ``info``, or None."""
        wanted = [*self.needs.items(), *([(self.made_for, "")] if self.made_for else [])]
        for capability, reason in wanted:
            if not info.has(capability):
                article = "an" if info.kind[:1].lower() in "aeiou" else "a"
                return (f"not for {article} {info.kind}: "
                        f"{reason or why_lacking(info, capability)}")
        return None

    @abc.abstractmethod
    def run(self, ctx: CheckContext) -> Outcome:
        """Run the check on one case and say what it found."""

    def across_cases(self, results: Sequence[CheckResult]) -> list[Finding]:
        """Findings about this check's rows in every case of one spec (in case order), added to
        the first row: what no single case can tell. No findings by default."""
        return []


@dataclass
class Outcome:
    """What a check's ``run`` returns; ``execute.run_case`` turns it into a frozen
    ``CheckResult``."""

    findings: list[Finding] = field(default_factory=list)
    summary: str = ""
    mode: str | None = None
    skipped: str | None = None
    """Set (to the reason) when the check did not apply."""
    data: dict[str, Any] = field(default_factory=dict)
    nothing_verified: bool = False
    """Skipped because the case has no gradient to check although it should have one (no
    input requires grad, ...): the case verifies nothing (GV013)."""

    def add(self, finding: Finding) -> None:
        self.findings.append(finding)

    @property
    def status(self) -> Status:
        if self.skipped is not None:
            return Status.SKIP
        severities = {f.severity for f in self.findings}
        if Severity.ERROR in severities:
            return Status.FAIL
        if Severity.WARNING in severities:
            return Status.WARN
        return Status.PASS

    @classmethod
    def skip(cls, reason: str, *findings: Finding, nothing_verified: bool = False) -> Outcome:
        return cls(findings=list(findings), summary=reason, skipped=reason,
                   nothing_verified=nothing_verified)
