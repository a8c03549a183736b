"""Findings about a case as a whole rather than one check: global state the target changed
(GV012), a case that verified nothing (GV013), inputs outside forward's domain (GV023), threads
and processes left running (GV015),
running out of memory (GV016), an internal error while setting the case up (GV011), an
unfinished spec (GV019), and findings that are consequences of another check's finding in the
same case, of a deviation the spec declares, or perhaps of a value ``gradverify init``
guessed."""
from __future__ import annotations

from dataclasses import replace

from gradverify import torchstate
from gradverify.case.binding import case_tensors
from gradverify.case.context import CheckContext
from gradverify.results import (
    CheckResult,
    Evidence,
    Finding,
    Location,
    Severity,
    Status,
    first_clause,
)
from gradverify.run import leftovers
from gradverify.specmodel import Spec
from gradverify.targets import Target
from gradverify.targets.names import parse_target


def nothing_verified_row(ctx: CheckContext, nothing: str | None) -> list[CheckResult]:
    """GV013, when a check found that the case has no gradient to check although it should
    (``nothing``: why, as that check said)."""
    if not nothing:
        return []
    return [CheckResult(
        name="verification", status=Status.WARN, duration_s=0.0,
        summary=f"nothing was verified: {nothing}", findings=(Finding(
            "GV013", Severity.WARNING,
            f"nothing was verified: {nothing}; every gradient check skipped",
            location=ctx.forward_location,
            hint="make a floating input require grad in the spec (requires_grad: true), "
                 "and return at least one differentiable output"),))]


def not_finite_row(finding: Finding) -> CheckResult:
    """GV023: forward returned NaN or inf on the case's inputs, said once for the case."""
    return CheckResult(name="inputs", status=Status.WARN, duration_s=0.0,
                       summary="forward is not finite on these inputs", findings=(finding,))


def interpreter_row(finding: Finding) -> CheckResult:
    """GV025: Triton's interpreter cannot run the target's kernels, said once for the case,
    which is skipped (a limit of the interpreter, not the target's failure)."""
    return CheckResult(name="interpreter", status=Status.SKIP, duration_s=0.0,
                       summary="Triton's interpreter cannot run the kernels forward launches",
                       findings=(finding,))


def left_running_row(ctx: CheckContext, before: leftovers.Running) -> list[CheckResult]:
    """GV015: threads or processes the case started and left running. The processes are
    stopped here; threads end with the worker process (or stay, with --no-isolate)."""
    threads, processes = leftovers.since(before)
    if not threads and not processes:
        return []
    leftovers.kill(processes)
    what = leftovers.describe(threads, processes)
    return [CheckResult(
        name="left_running", status=Status.WARN, duration_s=0.0,
        summary=f"left {what} running", findings=(Finding(
            "GV015", Severity.WARNING,
            f"the case left {what} running after it finished"
            + ("; gradverify stopped the processes" if processes else ""),
            location=ctx.forward_location,
            hint="join threads and wait for processes before forward returns, or start them "
                 "once, as daemons, outside the Function"),))]


def inputs_failed(exc: BaseException, ctx: CheckContext) -> CheckResult:
    """The case could not be set up: out of memory (GV016, while making its inputs), or a
    bug of ours (GV011)."""
    if out_of_memory(exc):
        finding = oom_finding(exc, ctx, "making the inputs")
    else:
        import traceback

        finding = Finding("GV011", Severity.ERROR,
                          f"internal error setting up case {ctx.case.name!r}: "
                          f"{type(exc).__name__}: {exc}",
                          hint="this is a bug in gradverify; please report it with the traceback",
                          evidence=Evidence(
                              traceback="".join(traceback.format_exception(exc))))
    return CheckResult("inputs", Status.ERROR, 0.0, first_clause(finding.message), (finding,))


def out_of_memory(exc: BaseException) -> bool:
    text = str(exc)
    return isinstance(exc, MemoryError) or (isinstance(exc, RuntimeError) and (
        "can't allocate memory" in text or "out of memory" in text.lower()
        or "failed to allocate" in text.lower()))


def oom_finding(exc: BaseException, ctx: CheckContext, during: str) -> Finding:
    sizes = ", ".join(f"{name}: {list(shape)}" for name, shape, _ in
                      case_tensors(ctx.maker.bound, ctx.case.dims)) or "from its factory"
    total = sum(n for _, _, n in case_tensors(ctx.maker.bound, ctx.case.dims))
    first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
    return Finding("GV016", Severity.ERROR,
                   f"out of memory {during} of case {ctx.case.name!r} ({sizes}; "
                   f"{total / 1024**3:.2f} GiB in float64): {first}",
                   hint="use smaller shapes: gradient bugs show on a few elements per dim")


def global_state_row(info: Target, before: list[Finding], during: list[str]
                     ) -> list[CheckResult]:
    """GV012: the global state changed before the case (``before``, by an import) or by it
    (``during``); gradverify restored it."""
    state = before + state_changes(info, during, before=False)
    if not state:
        return []
    return [CheckResult(name="global_state", status=Status.WARN, duration_s=0.0,
                        summary="global state was changed; gradverify restored it",
                        findings=tuple(state))]


def state_changes(info: Target, changes: list[str], *, before: bool) -> list[Finding]:
    """GV012 findings: what the target's import (before the case) or the case itself changed in
    torch's global state. Changes made by another module's import are reported on that
    module's targets, never here: they were undone right after that import."""
    findings = []
    # the module named by the target (a re-export imports it too), or the class's own
    named = parse_target(info.target).module
    module = next((m for m in (named, getattr(info.function, "__module__", ""))
                   if torchstate.IMPORT_CHANGES.get(m)), "")
    if before and module:
        changed = torchstate.IMPORT_CHANGES[module]
        replaced = [c for c in changed if c.startswith("torch.") and ":" in c]
        findings.append(Finding(
            "GV012", Severity.WARNING,
            f"importing {module!r} changed global state ({'; '.join(changed)}): every Function "
            "checked after it in the same process would have seen it"
            + ("; among them functions gradverify verifies with, which would have let checks "
               "pass without running" if replaced else "") + "; gradverify restored it",
            hint="do not change torch's global settings, torch's functions or the working "
                 "directory at import time; use context managers (torch.no_grad(), "
                 "torch.autocast(...), unittest.mock.patch) around the code that needs them"))
    if changes:
        when = ("before this case (by code outside any Function)" if before else
                "while this case ran: forward or backward changed it and did not restore it")
        findings.append(Finding(
            "GV012", Severity.WARNING,
            f"global state changed {when}: {'; '.join(changes)}; gradverify restored it",
            location=info.forward_location,
            hint="use context managers (with torch.no_grad(): ...) instead of global setters "
                 "inside forward/backward, so the caller's settings survive the call"))
    return findings


def unfinished_row(spec: Spec) -> list[CheckResult]:
    """GV019: the spec still holds a TODO comment (``gradverify init`` left it)."""
    if not spec.todo:
        return []
    line, text = spec.todo[0]
    where = Location(spec.path, line) if spec.path else None  # a spec read from a file
    return [CheckResult(
        name="spec", status=Status.WARN, duration_s=0.0, summary="the spec is unfinished",
        findings=(Finding(
            "GV019", Severity.WARNING,
            f"the spec is unfinished: it still holds `{text}`; what it checks was "
            "guessed, so a failure may come from a guess rather than from the code",
            location=where,
            hint="set the shapes and values forward expects (the spec's comments say what was "
                 "guessed), then delete the TODO"),))]


def guesses_marked(rows: list[CheckResult], spec: Spec) -> list[CheckResult]:
    """A contract error about an argument ``gradverify init`` guessed says that the guess may
    be the cause, and where it is."""
    if not spec.guessed and not spec.todo:
        return rows
    marked = []
    for row in rows:
        findings = tuple(_guess_hint(f, spec) if row.name == "contract"
                         and f.severity == Severity.ERROR else f for f in row.findings)
        marked.append(replace(row, findings=findings) if findings != row.findings else row)
    return marked


def _guess_hint(finding: Finding, spec: Spec) -> Finding:
    name = (finding.input or "").split("[")[0]
    if name in spec.guessed:
        line, comment = spec.guessed[name]
        where = Location(spec.path, line) if spec.path else None  # a spec read from a file
        cause = (f"'{name}' was guessed by gradverify init ({where}: {comment}); a wrong guess "
                 "gives this error: check that value first")
    elif spec.todo:
        cause = "the spec is unfinished (GV019): its guessed inputs may cause this"
    else:
        return finding
    return replace(finding, suspect=cause)
