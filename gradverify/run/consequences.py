"""Every check's consequence rules (``checks.base.Consequence``), applied here and nowhere
else: which checks a case's rows so far skip (``skip_reason``), which findings of a check's row
follow from an earlier row's (``marked``, as the row is made) or from the spec declaring a check
an expected failure (``declared``), and which follow from a write found anywhere in the case
(``case_marked``, once the case has ended). A rule reaches checks by trait and findings by
symptom (``codes.Symptom``): no rule names another check or its codes. Imports no torch."""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace

from gradverify.checks.base import Check, Consequence, Effect
from gradverify.codes import Symptom, refuses_write
from gradverify.registry import CODES, REGISTRY
from gradverify.results import CheckResult, Declaration, Finding, Severity, Status

FAILED = (Status.FAIL, Status.ERROR, Status.XFAIL)
"""A check that ended so did not establish what it blocks (expectedly or not: autograd
rejects backward's result either way)."""


def _rules(row: CheckResult, effect: Effect) -> Iterator[Consequence]:
    check = REGISTRY.get(row.name)
    return (rule for rule in (check.consequences if check is not None else ())
            if rule.effect is effect)


def _reaches(rule: Consequence, check: Check | None) -> bool:
    """Whether ``rule`` reaches ``check`` (None: a row of the case's own, not a check's)."""
    if not rule.reaches:
        return True
    return check is not None and bool(rule.reaches & check.traits)


def _causes(rule: Consequence, row: CheckResult) -> Iterator[Finding]:
    """The findings of ``row`` that cause ``rule`` (a finding of its codes, with its pattern)."""
    return (f for f in row.findings if f.code in rule.codes
            and (rule.pattern is None or f.pattern == rule.pattern))


def reports(finding: Finding, symptom: Symptom | None) -> bool:
    """Whether ``finding`` reports ``symptom`` (None: any): as its code declares
    (``Code.reports``), or, for autograd's refusal of a write, in torch's own words."""
    if symptom is None:
        return True
    if symptom is Symptom.REFUSED_WRITE:
        return refuses_write(finding.message)
    code = CODES.get(finding.code)
    return code is not None and symptom in code.reports


def _follows(finding: Finding, rule: Consequence, cause: Finding | None) -> bool:
    """Whether ``finding`` is reached by ``rule`` caused by ``cause``: a warning or error that
    follows from nothing else yet and reports the rule's symptom, on the cause's input where
    the rule says so."""
    return (finding.severity != Severity.INFO and finding.consequence_of is None
            and reports(finding, rule.symptom)
            and not (rule.same_input and cause is not None and finding.input != cause.input))


def skip_reason(check: Check, results: Mapping[str, CheckResult]) -> str | None:
    """Why ``check`` cannot run after the rows ``results`` (by check name, in order), or None:
    an earlier check whose failure blocks it failed; or an earlier finding makes its results
    consequences of it (forward writing into its input, where every later comparison of runs
    would blame something else)."""
    for name, row in results.items():
        if row.status in FAILED and any(not rule.codes and not rule.declared
                                        and _reaches(rule, check)
                                        for rule in _rules(row, Effect.SKIPS)):
            return f"skipped: {name} failed"
    for name, row in results.items():
        for rule in _rules(row, Effect.SKIPS):
            cause = next(_causes(rule, row), None) if _reaches(rule, check) else None
            if cause is not None:
                return f"skipped: a consequence of {cause.code} (see {name})"
    return None


def marked(check: Check, findings: list[Finding], results: Mapping[str, CheckResult]
           ) -> list[Finding]:
    """``findings`` of ``check``, each marked as the consequence of an earlier row's finding
    that causes it (gradcheck's "not multiplied by the incoming gradient" explains double
    backward's detached incoming gradient on the same input)."""
    for name, row in results.items():
        for rule in _rules(row, Effect.MARKS):
            if rule.earlier_too or rule.declared or not _reaches(rule, check):
                continue
            for cause in _causes(rule, row):
                root = f"{cause.code} ({name})"
                findings = [f.following(root) if _follows(f, rule, cause) else f
                            for f in findings]
    return findings


def declared(check: Check, findings: list[Finding], results: Mapping[str, CheckResult]
             ) -> tuple[list[Finding], str | None]:
    """``check``'s errors that the spec's declaration of an earlier check as an expected
    failure explains (``Consequence.declared``: backward is not the gradient, so what
    assumes it is follows), marked so. Returns the findings and, when every error among them
    is such a consequence, the reason that makes the row an expected failure too (else
    None)."""
    roots: dict[str | None, tuple[str, str, str, Consequence]] = {}
    for name, row in results.items():
        if row.status != Status.XFAIL or not row.expect:
            continue
        for rule in _rules(row, Effect.MARKS):
            if rule.declared and _reaches(rule, check):
                # the declaration is of the whole check, whichever inputs its findings name
                # (torch's message may name one): a finding on the same input is cited where
                # there is one, the check's first error otherwise
                failing = [f for f in row.findings if f.severity == Severity.ERROR]
                for f in reversed(failing or list(row.findings)):
                    entry = (f"{f.code} ({name})", name, row.expect, rule)
                    roots[None] = entry
                    if f.input is not None and rule.same_input:
                        roots[f.input] = entry
    root_of = []
    for f in findings:
        root = roots.get(f.input) or roots.get(None)
        follows = root is not None and f.severity == Severity.ERROR and _follows(f, root[3], None)
        root_of.append(root if follows else None)
    marked_ = [f if root is None else _declared(f, *root[:3])
               for f, root in zip(findings, root_of, strict=True)]
    errors = [root for f, root in zip(findings, root_of, strict=True)
              if f.severity == Severity.ERROR]
    if not errors or None in errors:
        return marked_, None
    _, name, reason, _ = next(root for root in errors if root is not None)
    return marked_, f"follows from the declared expected failure of {name} ({reason})"


def _declared(finding: Finding, root: str, check: str, reason: str) -> Finding:
    """``finding``, marked as a consequence of the spec declaring ``check`` (whose finding is
    ``root``) an expected failure for ``reason``."""
    return finding.following(root, Declaration(check, reason))


def case_marked(rows: list[CheckResult]) -> list[CheckResult]:
    """The case's rows with the findings that a write found anywhere in the case corrupts
    (``Consequence.earlier_too``: gradcheck reruns backward on the saved tensors backward
    wrote into; the next backward fails autograd's version check) marked as its consequence:
    each such rule once, caused by its first finding in the case, reaching every other row."""
    done: set[tuple[str, Consequence]] = set()
    for origin in list(rows):
        for rule in _rules(origin, Effect.MARKS):
            cause = next(_causes(rule, origin), None) if rule.earlier_too else None
            if cause is None or (origin.name, rule) in done:
                continue
            done.add((origin.name, rule))
            root = f"{cause.code} ({origin.name})"
            rows = [_following(row, rule, cause, root) if row.name != origin.name
                    and _reaches(rule, REGISTRY.get(row.name)) else row for row in rows]
    return rows


def _following(row: CheckResult, rule: Consequence, cause: Finding, root: str) -> CheckResult:
    findings = tuple(f.following(root) if _follows(f, rule, cause) else f for f in row.findings)
    return replace(row, findings=findings) if findings != row.findings else row


def blockers(check: Check) -> list[str]:
    """The checks whose failure skips ``check`` (``gradverify explain`` says them)."""
    return [name for name, other in REGISTRY.items()
            if any(rule.effect is Effect.SKIPS and not rule.codes and not rule.declared
                   and rule.reaches & check.traits for rule in other.consequences)]
