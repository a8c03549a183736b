"""The data model of a run, below the checks and the renderers: statuses, findings, the results
of checks and cases, and the report with the one place that turns them into an exit code
(``Report.exit_code``). Frozen dataclasses that the formatters render and never change; the
report does not render itself (``raise_for_failures`` takes its text from the renderer the
API gives it: ``Report.text``).
"""
from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gradverify.scores import MutantRun, MutationScore


class ExitCode(enum.IntEnum):
    OK = 0
    FAILED = 1  # a check failed, or could not run because the Function raised
    USAGE = 2  # command-line usage error
    INPUT = 3  # invalid spec, or a target that cannot be imported / is not a Function
    INTERNAL = 4  # a bug in gradverify itself
    NOTHING_SELECTED = 5  # no specs, or the filters matched nothing
    HANGUP = 129  # SIGHUP (128 + 1): the report holds what finished
    INTERRUPTED = 130  # SIGINT (128 + 2)
    TERMINATED = 143  # SIGTERM (128 + 15), as CI systems and `timeout` send on cancel


class Status(str, enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    WARN = "warn"
    SKIP = "skip"
    XFAIL = "xfail"
    XPASS = "xpass"
    ERROR = "error"

    @property
    def rank(self) -> int:
        """Badness, for "a case's status is its worst check's"."""
        return _RANK[self]


_RANK = {
    Status.SKIP: 0,
    Status.PASS: 1,
    Status.XFAIL: 2,
    Status.WARN: 3,
    Status.XPASS: 4,
    Status.FAIL: 5,
    Status.ERROR: 6,
}


class Severity(str, enum.Enum):
    ERROR = "error"  # makes its check fail
    WARNING = "warning"  # makes its check warn
    INFO = "info"  # a note; never changes a status


def worst(statuses: list[Status], default: Status = Status.PASS) -> Status:
    return max(statuses, key=lambda s: s.rank) if statuses else default


@dataclass(frozen=True)
class Location:
    """A place in a source file: where a finding points, where a spec is invalid. Made where
    the place is known (a traceback frame, a ``def`` line, a YAML node), so that no renderer
    parses one back out of a message; every text form prints it as ``file:line``."""

    file: str
    """The path as messages show it (relative to the current directory when under it)."""
    line: int | None = None
    """1-based; None when only the file is known."""

    def __str__(self) -> str:
        return self.file if self.line is None else f"{self.file}:{self.line}"

    @classmethod
    def parse(cls, text: str) -> Location:
        """``file:line`` (or a bare ``file``) as a Location: for a place torch hands over as
        text (a fake kernel's recorded source, ``op_fake``)."""
        file, colon, line = text.rpartition(":")
        if colon and file and line.isdigit():
            return cls(file, int(line))
        return cls(text)


@dataclass(frozen=True)
class Smallest:
    """The smallest case found that still fails the same way as a finding (the same check,
    code and input), shrunk from the case that failed (``gradverify.run.smallest``)."""

    case: str
    """The case as an item of a spec's ``cases:`` list (YAML), ready to paste into the spec."""
    name: str
    """Its name (``vector-smallest``); its random values are seeded from it, as in a spec."""
    shapes: tuple[tuple[str, tuple[int, ...]], ...]
    """Each tensor input's name and shape in that case."""
    tried: int
    """Candidate cases run to find it."""
    repro: str | None = None
    """With ``--repro``: a standalone script that shows the failure with bare torch only."""
    no_repro: str | None = None
    """With ``--repro``, when no script could be written: why."""


EVIDENCE_CAP = 32
"""The most rows and the most columns of a Jacobian block a finding's evidence keeps (32 x 32
entries): the rows and columns with mismatching entries first, the worst first; the rest are
cut and the block says ``truncated``."""


@dataclass(frozen=True)
class JacobianBlock:
    """One (output, input) block of a Jacobian, analytical beside numerical: the numbers
    behind a gradient finding, whatever the verbosity (the renderers decide what to show)."""

    output: str
    """The output, as the message names it (``output 0``, ``grad 'x'``)."""
    input: str
    """Forward's parameter name of the input (columns)."""
    analytical: tuple[tuple[float, ...], ...]
    """[rows][cols]: from backward. Non-finite entries stay NaN or inf (strings in JSON)."""
    numerical: tuple[tuple[float, ...], ...]
    """[rows][cols]: from central finite differences."""
    rows: tuple[tuple[int, ...], ...]
    """Each row's output element index (``()`` for a 0-d output or a projected row)."""
    cols: tuple[tuple[int, ...], ...]
    """Each column's input element index."""
    projected: bool = False
    """The single row is a random projection of the output, not one of its elements."""
    truncated: bool = False
    """More rows or columns were compared than ``EVIDENCE_CAP`` keeps."""

    def errors(self) -> list[list[float]]:
        """|analytical - numerical| per entry; NaN where either side is not finite."""
        return [[abs(a - n) for a, n in zip(arow, nrow)]
                for arow, nrow in zip(self.analytical, self.numerical)]


@dataclass(frozen=True)
class Evidence:
    """What a check saw, as data: the Jacobian blocks that disagree, the traceback of a
    crash. Always filled the same way, whatever ``-q``/``-v`` say."""

    blocks: tuple[JacobianBlock, ...] = ()
    traceback: str | None = None
    """The text of the traceback that the finding is about (an internal error), if any."""


def first_clause(message: str) -> str:
    """A finding's message up to its first ``;``: what a check row's summary says of it, whole
    (the console cuts it in a row, where the finding below says the rest)."""
    return message.split("; ")[0]


@dataclass(frozen=True)
class Declaration:
    """A check the spec declares an expected failure (``expect: {check: reason}``)."""

    check: str
    reason: str


@dataclass(frozen=True)
class Finding:
    """One problem (or note) found by a check."""

    code: str
    """Stable code, ``GVnnn``; ``gradverify explain CODE`` documents it."""
    severity: Severity
    message: str
    """One line with concrete names and numbers."""
    input: str | None = None
    """Forward's parameter name of the input concerned, if any."""
    output: int | None = None
    """Index of the output concerned, if any."""
    hint: str | None = None
    """How to fix it."""
    location: Location | None = None
    """The Function's code concerned (usually backward's ``def``, or the line that raised)."""
    data: Mapping[str, Any] = field(default_factory=dict)
    """Numbers behind the message (JSON-safe): the worst entry, counts; for the renderers and
    the check that made it. What other layers read of a finding is a field of its own."""
    pattern: str | None = None
    """The shape of a mismatch of Jacobians (``checks._jacobian.recognise``: ``transposed``,
    ``not multiplied by the incoming gradient``), which consequences match on."""
    refuses_float64: str | None = None
    """Forward's GV008 or backward's GV026 (``run.classify``): the target raises on the
    float64 copies of a case's inputs but runs on the working-dtype ones, a kernel without
    float64 support that only the checks judging in the working dtype can verify; what raised
    (``backward raised KeyError: torch.float64``)."""
    consequence_of: str | None = None
    """``GV222 (mutation)``: this finding follows from that defect of the same case, reported
    there; the renderers say so after the message, and point the hint at it instead of advice
    of its own (``report.text.said``, ``advice``)."""
    declared: Declaration | None = None
    """With ``consequence_of``: the defect it follows from is one the spec declares an
    expected failure (``expect:``), for this reason."""
    suspect: str | None = None
    """A guess of the spec's that may cause it (a value ``gradverify init`` guessed, where it
    is): the renderers say it before the hint (``report.text.advice``)."""
    smallest: Smallest | None = None
    """For a failure: the smallest case that still fails so (and its repro, if asked)."""
    evidence: Evidence = field(default_factory=Evidence)
    """The numbers and text behind the message (``Evidence``), independent of verbosity."""

    def following(self, root: str, declared: Declaration | None = None) -> Finding:
        """This finding, marked as a consequence of ``root`` (``GV222 (mutation)``), which
        the spec may declare an expected failure."""
        return replace(self, consequence_of=root, declared=declared)


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: Status
    duration_s: float
    summary: str
    """One line for the table: what was checked or why it was skipped."""
    findings: tuple[Finding, ...] = ()
    mode: str | None = None
    """gradcheck/gradgradcheck only: ``slow`` or ``fast``."""
    expect: str | None = None
    """The spec's ``expect:`` reason when this check was expected to fail."""
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class InputInfo:
    name: str
    kind: str  # tensor | none | bool | int | float | str | tuple | list | other
    shape: tuple[int, ...] | None = None
    dtype: str | None = None
    requires_grad: bool | None = None


@dataclass(frozen=True)
class CaseResult:
    target: str
    spec: str | None
    case: str
    status: Status
    duration_s: float
    inputs: tuple[InputInfo, ...] = ()
    checks: tuple[CheckResult, ...] = ()
    """One row per check selected for the case, in run order."""
    inferred: bool = False
    """True when no spec was found and the inputs were inferred from forward's signature."""
    mutants: tuple[MutantRun, ...] = ()
    """With ``--mutate``: what this case did to each mutant of the target's backward; the run
    merges them into ``Report.mutants`` (and the report's results do not carry them)."""
    mutants_not_judged: str | None = None
    """With ``--mutate``: why this case's mutants were not judged (one crashed, hung or
    exhausted the process that ran them, which ran them after the case's own checks). The
    case's checks and status stand as without ``--mutate``."""
    about_case: tuple[CheckResult, ...] = ()
    """What is found about the case as a whole, not by one check (``run.casenotes``): its
    inputs could not be made, it verified nothing, its spec is unfinished, it changed torch's
    global state, it left processes running, its spec needs a newer torch. Each is a row
    named for what it is about; reports show them after the checks (``rows``)."""

    @property
    def rows(self) -> tuple[CheckResult, ...]:
        """Every row a report shows for the case: the checks', then those about the case."""
        return self.checks + self.about_case


@dataclass(frozen=True)
class ErrorEntry:
    """A spec or target that could not be run at all."""

    target: str | None
    spec: str | None
    code: str
    message: str
    internal: bool = False
    """True for a bug in gradverify (exit 4); the message then carries the traceback."""
    usage: bool = False
    """True for what the run was asked that this machine cannot do (a device it lacks,
    GV024): a usage error (exit 2)."""
    location: Location | None = None
    """The place in a spec file (or pyproject.toml) the error is about, when one is known; the
    message starts with it."""


IN_PROCESS_TIMEOUT = ("timeout is not enforced in-process (--no-isolate, "
                      "--gradverify-no-isolate, verify()): a case runs until it ends")
"""Said once by an in-process run given a ``timeout``: only a worker process can be stopped."""


def failing(status: Status, strict: bool) -> bool:
    """The one rule for what fails a run: a failed or errored check; under ``--strict``, also a
    warning and an unexpected pass. The exit code, JUnit, GitHub annotations and the pytest
    plugin all ask here."""
    return status in (Status.FAIL, Status.ERROR) or (strict and status in (Status.WARN,
                                                                           Status.XPASS))


@dataclass(frozen=True)
class ReportSettings:
    """What a report says its run used (``RunOptions`` are what the run was told: flags over
    ``Config``, the ``[tool.gradverify]`` table, over the defaults)."""

    device: str = "cpu"
    seed: int = 0
    mode: str = "auto"
    strict: bool = False
    empty_ok: bool = False
    """Nothing selected is success (pre-commit with no relevant changed file)."""


@dataclass(frozen=True)
class Report:
    settings: ReportSettings
    results: tuple[CaseResult, ...] = ()
    errors: tuple[ErrorEntry, ...] = ()
    duration_s: float = 0.0
    versions: Mapping[str, str] = field(default_factory=dict)
    """gradverify, torch and python versions."""
    notes: tuple[str, ...] = ()
    """Messages about what was (not) selected; they never change the exit code."""
    mutants: tuple[MutationScore, ...] = ()
    """With ``--mutate``: each target's mutation score, per spec; never changes the exit
    code (a measure of the spec, not a defect of the target)."""
    text: Callable[[Report], str] | None = field(default=None, compare=False, repr=False)
    """The plain renderer, given by the API that returns the report (``verify()``): the
    message of ``raise_for_failures``. The model imports no renderer."""

    def counts(self) -> dict[str, int]:
        counts = {s.value: 0 for s in Status}
        for case in self.results:
            for check in case.rows:
                counts[check.status.value] += 1
        return counts

    @property
    def exit_code(self) -> ExitCode:
        """The one place that turns a report into an exit code."""
        if any(e.internal for e in self.errors):
            return ExitCode.INTERNAL
        if any(e.usage for e in self.errors):
            return ExitCode.USAGE
        if self.errors:
            return ExitCode.INPUT
        if not self.results:
            return ExitCode.OK if self.settings.empty_ok else ExitCode.NOTHING_SELECTED
        if any(self.failed(c) for case in self.results for c in case.rows):
            return ExitCode.FAILED
        return ExitCode.OK

    def failed(self, check: CheckResult) -> bool:
        """Whether this check fails the run (``failing``, with the run's ``--strict``)."""
        return failing(check.status, self.settings.strict)

    @property
    def ok(self) -> bool:
        return self.exit_code == ExitCode.OK

    def raise_for_failures(self) -> None:
        """Raise ``VerificationFailed`` (an AssertionError) with the plain report if not ok."""
        if not self.ok:
            raise VerificationFailed(self.text(self) if self.text else _failed_rows(self))


class VerificationFailed(AssertionError):
    """Raised by ``Report.raise_for_failures``; its message is the plain-text report."""


def _failed_rows(report: Report) -> str:
    """What failed, one line each: the message of a report built without a renderer."""
    return "\n".join(f"{case.target} :: {case.case}: {check.name} {check.status.value}"
                     for case in report.results for check in case.rows
                     if check.status in (Status.FAIL, Status.ERROR)) + \
        "".join(f"\n{error.code}: {error.message}" for error in report.errors)
