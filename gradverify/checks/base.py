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

from gradverify.kinds import CUSTOM_OP, FUNCTION, MODULE
from gradverify.results import CheckResult, Finding, Severity, Status

if TYPE_CHECKING:
    from gradverify.codes import Code
    from gradverify.context import CheckContext
    from gradverify.target import FunctionInfo


NO_OWN_BACKWARD: Mapping[str, str] = MappingProxyType({
    FUNCTION: "it has no backward of its own (its gradients come from what it calls: name "
              "the Functions it calls as targets)",
    MODULE: "it has no backward of its own (its gradients come from what forward calls: name "
            "the Functions it calls as targets)"})
"""``Check.not_for`` of the checks that call a target's own backward."""


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
    static: ClassVar[bool] = False
    """Reads the class, not a case's calls: runs on a target's first case only, and even when
    forward raises."""
    needs_reference: ClassVar[bool] = False
    """Runs only when the spec names a ``reference:``."""
    needs_accelerator: ClassVar[bool] = False
    """Runs only with ``--device cuda`` (or when named by ``--only``)."""
    not_for: ClassVar[Mapping[str, str]] = MappingProxyType({})
    """Target kinds (``gradverify.kinds.KINDS``) the check does not apply to, each with the
    reason its skipped row gives."""
    only_for: ClassVar[tuple[str, ...]] = ()
    """The target kinds the check is made for (none: every kind). For other kinds it has no
    row, unless named by ``--only`` (then it skips, saying why)."""
    calls_own_backward: ClassVar[bool] = False
    """Calls the target's own backward: a Function's, or a custom op's registered with
    ``register_autograd``; skipped for an op without one."""

    def not_applicable(self, info: FunctionInfo) -> str | None:
        """Why this check does not apply to ``info``'s kind of target, or None."""
        reason = self.not_for.get(info.kind)
        if not reason and self.only_for and info.kind not in self.only_for:
            reason = f"made for {' and '.join(k + 's' for k in self.only_for)} only"
        if reason:
            return f"not for a {info.kind}: {reason}"
        if self.calls_own_backward and info.kind == CUSTOM_OP and info.style == "none":
            return ("not for this custom op: it has no backward of its own (none registered "
                    "with register_autograd)")
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
