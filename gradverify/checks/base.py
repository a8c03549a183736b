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

if TYPE_CHECKING:
    from gradverify.case.context import CheckContext
    from gradverify.codes import Code
    from gradverify.targets import Capability, Target


@dataclass(frozen=True)
class CheckOption:
    """A per-check option settable under a spec's ``checks:``."""

    name: str
    kind: type
    help: str
    choices: tuple[Any, ...] | None = None


class Trait(enum.Enum):
    """What a check does with a case, declared by the check (``Check.traits``). The schedule
    (``gradverify.run.schedule``) reads them: a finding of an earlier check invalidates
    traits (``Check.invalidates``), and a failed check blocks them (``Check.blocks``), so no
    check names another."""

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
    the gradient (``Check.assumes_gradient``)."""
    ONCE_PER_TARGET = "reads the class, once per target"
    """Runs on a target's first case only, and even when forward raises."""


REFUSES_FLOAT64 = "refuses_float64"
"""Key of a finding's data (forward's GV008, backward's GV026, from ``run.classify``): the
target raises on the float64 copies of a case's inputs but runs on the working-dtype ones, a
kernel without float64 support that only the checks judging in the working dtype can verify.
Its value says what raised ("backward raised KeyError: torch.float64")."""


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
    blocks: ClassVar[frozenset[Trait]] = frozenset()
    """Traits of the checks that cannot run once this one failed (expectedly or not): a
    backward result autograd rejects blocks every check that calls backward."""
    invalidates: ClassVar[Mapping[str, frozenset[Trait]]] = MappingProxyType({})
    """Code -> traits of the later checks whose results would be consequences of that
    finding: they are skipped, pointing at it."""
    explains: ClassVar[Mapping[tuple[str, str | None], tuple[str, ...]]] = MappingProxyType({})
    """(code, the finding's ``data["pattern"]`` or None) -> codes of later checks' findings on
    the same input that follow from it: marked as its consequence, the root said once."""
    explains_protection: ClassVar[tuple[str, ...]] = ()
    """Codes whose defect makes autograd refuse a later backward (the version-counter error):
    another check's finding that reports that refusal, in the same case, is marked as its
    consequence (each root cause reported once)."""
    explains_reruns: ClassVar[Mapping[str, frozenset[Trait]]] = MappingProxyType({})
    """Code -> traits of the checks, run before it or after, whose warnings and errors in the
    same case follow from that finding: a write into the inputs, a saved tensor or the
    incoming gradient changes what every later call on those tensors computes (a raw kernel
    write goes past autograd's version check), so each such check would blame something
    else. Marked as its consequence, the root said once."""
    assumes_gradient: ClassVar[tuple[str, ...]] = ()
    """Codes whose premise is that backward returns each input's true gradient: where a check
    that judges the gradient (``Trait.JUDGES_GRADIENT``) is declared an expected failure and
    names the same input, such a finding is a consequence of that declaration, and a row of
    nothing else an expected failure too."""
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
        from gradverify.targets import why_lacking

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
