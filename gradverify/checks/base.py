"""What every check is: data (name, default, codes, options) plus one ``run``.

This module and every check module import torch only inside ``run``, so the registry can be
read (for ``explain``, ``--only`` validation and spec validation) without importing torch.
"""
from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from gradverify.results import CheckResult, Finding, Severity, Status

if TYPE_CHECKING:
    from gradverify.codes import Code
    from gradverify.context import CheckContext
    from gradverify.targets import Capability, Target


@dataclass(frozen=True)
class Option:
    """A per-check option settable under a spec's ``checks:``."""

    name: str
    kind: type
    help: str
    choices: tuple[Any, ...] | None = None


class Check(abc.ABC):
    """Base of every check: what the runner needs to know about it is declared here, with its
    default, and each check module's class overrides what differs. ``run`` is the check."""

    name: ClassVar[str]
    default: ClassVar[bool] = True
    """On unless turned off (True), or opt-in (False)."""
    summary: ClassVar[str]
    """One line: what the check verifies."""
    codes: ClassVar[tuple[Code, ...]] = ()
    """The codes it reports, documented; the registry collects them."""
    options: ClassVar[tuple[Option, ...]] = ()
    """Options settable under ``checks:`` in a spec or ``[tool.gradverify]``."""
    requires: ClassVar[tuple[str, ...]] = ("contract",)
    """Checks whose failure means this one cannot run (else: skip, with that reason): a
    contract failure is a backward result autograd rejects. Not a check that found another
    defect whose results this one would not repeat (gradgradcheck runs after gradcheck's)."""
    invalidates: ClassVar[Mapping[str, tuple[str, ...]]] = MappingProxyType({})
    """Code -> later checks whose results are consequences of that finding (skipped)."""
    explains_protection: ClassVar[tuple[str, ...]] = ()
    """Codes whose defect makes autograd refuse a later backward (the version-counter error):
    another check's finding that reports that refusal, in the same case, is marked as its
    consequence (each root cause reported once)."""
    judges_gradient: ClassVar[bool] = False
    """Compares backward's result with the true derivative (gradcheck): a spec that declares
    it an expected failure declares that backward is not the gradient."""
    assumes_gradient: ClassVar[tuple[str, ...]] = ()
    """Codes whose premise is that backward returns each input's true gradient: where a check
    that ``judges_gradient`` is declared an expected failure and names the same input, such a
    finding is a consequence of that declaration, and a row of nothing else an expected
    failure too."""
    static: ClassVar[bool] = False
    """Reads the class, not a case's calls: runs on a target's first case only, and even when
    forward raises."""
    needs_reference: ClassVar[bool] = False
    """Runs only when the spec names a ``reference:``."""
    needs_accelerator: ClassVar[bool] = False
    """Runs only with ``--device cuda`` (or when named by ``--only``)."""
    needs: ClassVar[Mapping[Capability, str]] = MappingProxyType({})
    """The target capabilities (``gradverify.targets.Capability``) the check needs, each with
    the reason a skipped row gives when the target lacks it ("": the target kind's own words,
    ``targets.why_lacking``). Checked in order; the first one lacking is the reason."""
    made_for: ClassVar[Capability | None] = None
    """A capability the check is made for (an op's schema): a target without it has no row,
    unless the check is named by ``--only`` (then it skips, saying why)."""

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
