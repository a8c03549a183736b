"""pytest plugin: ``pytest --gradverify [PATH ...]`` collects spec files as test items.

Items are ``spec.yaml::Target::case::check``, and ``::case`` for what is found about a case as a
whole (GV012, GV013, GV015, GV019). A target's cases run once, together, by the command line's
own ``run_job``, in worker processes as ``gradverify check`` runs them (a crash or a hang is
that case's error, never the session's; ``--gradverify-no-isolate`` runs them in this process).
Each check reports as its own item, so ``-k``, ``--junitxml`` and pytest-xdist work unchanged
(use ``--dist loadscope`` to keep a target's items on one worker). Without ``--gradverify`` the
plugin collects nothing, so it never touches other YAML files.
"""
from __future__ import annotations

import sys
import warnings
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest

from gradverify import torchstate
from gradverify.errors import InputError, SpecError, UsageError
from gradverify.mutants.merge import scores
from gradverify.report.safe import bounded, safe
from gradverify.report.text import finding_text, score_lines
from gradverify.results import (
    IN_PROCESS_TIMEOUT,
    CheckResult,
    ErrorEntry,
    Severity,
    Status,
    failing,
    worst,
)
from gradverify.run import caches
from gradverify.syspath import ensure_cwd_on_path

if TYPE_CHECKING:
    from _pytest._code.code import TerminalRepr  # pytest's own type for repr_failure

    from gradverify.config import Config
    from gradverify.options import RunOptions
    from gradverify.scores import MutationScore


class GradverifyWarning(UserWarning):
    """A check that warned (the finding text is the message)."""


class CheckFailed(Exception):
    """A check failed or errored; the message is its findings, cut and made encodable as
    every report's texts are (``report.safe``: an import error's message may be 20 MB)."""

    def __init__(self, message: str) -> None:
        super().__init__(bounded(message))


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gradverify", "verify custom autograd Functions")
    from gradverify.optiontable import OPTIONS

    for option in OPTIONS:  # one flag each; one with a pyproject key defaults to it (None)
        if option.pytest:
            group.addoption(option.pytest, action="store_true",
                            default=None if option.keys else False, help=option.pytest_help)


_CONFIG = pytest.StashKey["Config"]()
_OPTIONS = pytest.StashKey["RunOptions"]()
_SCORES = pytest.StashKey["list[MutationScore]"]()


def _config(config: pytest.Config) -> Config:
    return config.stash[_CONFIG]


def _options(config: pytest.Config) -> RunOptions:
    """The run's options, from ``[tool.gradverify]`` as the command line reads them."""
    return config.stash[_OPTIONS]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gradverify: a gradverify check of a spec case")
    if not config.getoption("gradverify"):
        return
    _forget_unloaded_submodules()
    from gradverify import config as config_mod
    from gradverify.options import RunOptions
    from gradverify.optiontable import pytest_given

    try:  # once per session: a bad setting stops it before anything is collected
        config.stash[_CONFIG] = config_mod.load(Path(str(config.rootpath)))
        config.stash[_OPTIONS] = replace(RunOptions.from_config(
            config.stash[_CONFIG], **pytest_given(config.getoption)), user_paths=_user_paths())
        if not _options(config).isolate and _options(config).is_set("timeout"):
            config.issue_config_time_warning(GradverifyWarning(IN_PROCESS_TIMEOUT), stacklevel=2)
        config.stash[_SCORES] = []
    except (InputError, UsageError) as exc:
        code = f"  [{exc.code}]" if isinstance(exc, InputError) else ""
        raise pytest.UsageError(f"gradverify: {exc}{code}") from None
    source = getattr(config, "args_source", None)
    explicit = source == pytest.Config.ArgsSource.ARGS if source is not None else bool(config.args)
    if not explicit:
        folders = [str(d) for d in _config(config).spec_dirs() if d.is_dir()]
        config.args[:] = folders or config.args


def _forget_unloaded_submodules() -> None:
    """Drop gradverify's submodules that were taken out of ``sys.modules`` from the packages
    that still name them. A session before this one in the same process may have been undone
    that way (pytester's in-process runs restore ``sys.modules``, not package attributes):
    ``from gradverify import config`` would then find the last session's module while
    ``from gradverify.config import ...`` imports a new one, and the two sessions' classes,
    mixed in one task, no longer pickle for the workers."""
    for name, package in list(sys.modules.items()):
        if not isinstance(package, ModuleType) or \
                (name != "gradverify" and not name.startswith("gradverify.")):
            continue
        for attr, value in list(vars(package).items()):
            if isinstance(value, ModuleType) and value.__name__ == f"{name}.{attr}" and \
                    sys.modules.get(value.__name__) is not value:
                delattr(package, attr)


def _user_paths() -> tuple[str, ...]:
    """The folders on this session's sys.path that are neither Python's nor installed packages
    (pytest's rootdir and ``pythonpath``, a conftest's own): the workers import from them too,
    as the tests in this process do."""
    import os
    import sysconfig

    python = {os.path.realpath(sysconfig.get_path(k)) for k in ("stdlib", "platstdlib")}
    return tuple(p for p in sys.path if p and os.path.isdir(p) and "-packages" not in p
                 and os.path.realpath(p) not in python
                 and os.path.dirname(os.path.realpath(p)) not in python)


_POOL = pytest.StashKey[Any]()


def _pool(config: pytest.Config) -> Any:
    """The session's worker processes, started at the first case (each xdist worker has its
    own); cases run there exactly as ``gradverify check`` runs them, timeouts included."""
    if _POOL not in config.stash:
        from gradverify.run.pool import Pool

        config.stash[_POOL] = Pool(_options(config)).__enter__()
    return config.stash[_POOL]


def pytest_unconfigure(config: pytest.Config) -> None:
    pool = config.stash.get(_POOL, None)
    if pool is not None:
        pool.__exit__(None, None, None)
        del config.stash[_POOL]


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    config = parent.config
    if not config.getoption("gradverify") or file_path.suffix not in (".yaml", ".yml"):
        return None
    gv_config = _config(config)
    named = [Path(a.split("::")[0]).resolve() for a in config.args]
    under = [n for n in named if n == file_path.resolve() or n in file_path.resolve().parents]
    if not any(n == file_path.resolve() for n in under) and gv_config.excluded(
            file_path, under[0] if under else None):
        return None
    return SpecFile.from_parent(parent, path=file_path)


class SpecFile(pytest.File):
    def collect(self) -> Any:
        from gradverify.spec.file import load_file
        ensure_cwd_on_path()
        try:
            specs = load_file(self.path)
        except InputError as exc:
            # One failing item, not a collection error: the rest of the session runs.
            yield BrokenSpec.from_parent(self, name="spec", message=f"{exc}  [{exc.code}]",
                                         line=exc.line if isinstance(exc, SpecError) else None)
            return
        for spec in specs:
            if spec.target is None:
                yield BrokenSpec.from_parent(
                    self, name=f"spec[{spec.line}]" if spec.line else "spec",
                    message=f"{spec.where}: target: missing  [GV002]", line=spec.line)
                continue
            yield TargetNode.from_parent(self, name=spec.target, spec=spec)


class BrokenSpec(pytest.Item):
    """A spec (or a spec's target) that cannot run: one failing item naming the file and
    line, so that the healthy specs and the user's own tests still run."""

    def __init__(self, *, message: str, line: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.message = message
        self.line = line

    def runtest(self) -> None:
        raise CheckFailed(self.message)

    def repr_failure(self, excinfo: Any, style: Any = None) -> str | TerminalRepr:
        return str(excinfo.value) if isinstance(excinfo.value, CheckFailed) else \
            super().repr_failure(excinfo, style)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, (self.line - 1) if self.line else None, self.name


class UnsupportedTarget(pytest.Item):
    """A spec whose target needs a newer torch (``requires_torch``): one skipped item."""

    def __init__(self, *, reason: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.reason = reason

    def runtest(self) -> None:
        pytest.skip(f"the target needs {self.reason}")

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, self.name


class TargetNode(pytest.Collector):
    def __init__(self, *, spec: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec = spec
        self._prepared: Any = None
        self._results: Any = None

    def results(self) -> tuple[dict[str, Any], list[Any]]:
        """Every case of the target, run once as ``gradverify check`` runs them (``run_job``:
        the smallest case marked, findings across cases, case-level findings): the results
        by case name, and the errors."""
        from gradverify.discover import Job
        from gradverify.run.runner import run_job

        if self._results is None:
            options = _options(self.config)
            job = Job(self.spec.target, self.spec)
            if options.isolate:
                results, errors = run_job(job, options, pool=_pool(self.config))
            else:
                with torchstate.isolated():
                    results, errors = run_job(job, options, {0: self.prepared()})
            self._results = ({r.case: r for r in results}, errors)
            self.config.stash[_SCORES].extend(scores(results))
        return self._results

    def prepared(self) -> Any:
        from gradverify.discover import Job
        from gradverify.run.prepare import prepare

        if self._prepared is None:
            # On torch's defaults, with the verification functions bound before this target's
            # module is imported; the session's own state is given back.
            # (an import that imports torch's compiler makes its cache as it does)
            with torchstate.isolated(), caches.in_this_process():
                self._prepared = prepare(Job(self.spec.target, self.spec))
        return self._prepared

    def collect(self) -> Any:
        from gradverify.run.schedule import rows
        from gradverify.run.tasks import Unsupported

        options = _options(self.config)
        prepared = self.prepared()
        if isinstance(prepared, ErrorEntry):
            yield BrokenSpec.from_parent(self, name="target",
                                         message=f"{prepared.message}  [{prepared.code}]",
                                         line=self.spec.line)
            return
        if isinstance(prepared, Unsupported):
            yield UnsupportedTarget.from_parent(self, name="torch", reason=prepared.reason)
            return
        for index, case in enumerate(prepared.spec.cases):
            checks = [c.name for c in rows(prepared.spec, case, options,
                                           prepared.info.capabilities, first=index == 0)]
            yield CaseNode.from_parent(self, name=node_name(case.name), case=case,
                                       checks=checks)


def node_name(case: str) -> str:
    """A case's name as a node of the item ids: a swept case's ``[B=1]`` as ``(B=1)``. pytest
    reads the first ``[`` of an id as where an item's parameters start: ``::case[B=1]::check``
    made the JUnit name ``case[B=1]::check``, its case lost from the class name."""
    return case.replace("[", "(").replace("]", ")")


class CaseNode(pytest.Collector):
    def __init__(self, *, case: Any, checks: list[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case
        self.checks = checks

    def collect(self) -> Any:
        for name in self.checks:
            yield CheckItem.from_parent(self, name=name)
        # what is found about the case as a whole: global state changed (GV012), nothing
        # verified (GV013), threads or processes left running (GV015), an unfinished spec ...
        yield CheckItem.from_parent(self, name=CASE_ITEM)

    def result(self) -> Any:
        """The case's result (its target's cases run once, together) and its first error."""
        target = self.parent
        assert isinstance(target, TargetNode)
        results, errors = target.results()
        return results.get(self.case.name), errors[0] if errors else None


CASE_ITEM = "case"
"""The item of a case's findings about the case as a whole (rows no registered check owns)."""


class CheckItem(pytest.Item):
    def runtest(self) -> None:
        case = self.parent
        assert isinstance(case, CaseNode)
        result, error = case.result()
        if result is None:
            raise CheckFailed(error.message if error else "the case could not run")
        if self.name == CASE_ITEM:
            _report(_case_row(result, case.checks), _options(self.config).strict)
            return
        check = next((c for c in result.checks if c.name == self.name), None)
        if check is None:
            pytest.skip("not run for this case")
        _report(check, _options(self.config).strict)

    def repr_failure(self, excinfo: Any, style: Any = None) -> str | TerminalRepr:
        if isinstance(excinfo.value, CheckFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        case = self.parent
        assert isinstance(case, CaseNode) and case.parent is not None
        line = case.case.line - 1 if case.case.line else None
        return self.path, line, f"{case.parent.name} {case.name} {self.name}"


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """``--gradverify-mutate``: each spec's mutation score, after the tests."""
    found: list[MutationScore] = config.stash.get(_SCORES, [])
    if found:
        terminalreporter.section("gradverify mutation score")
        for score in found:
            for line in score_lines(safe(score), config.getoption("verbose") > 0):
                terminalreporter.write_line(line)


def _case_row(result: Any, checks: list[str]) -> CheckResult:
    """What a case found about itself as a whole (``CaseResult.about_case``), and any row no
    check item reports (a worker lost before its first check), as one row."""
    own = [row for row in result.checks if row.name not in checks] + list(result.about_case)
    if not own:
        return CheckResult(CASE_ITEM, Status.PASS, 0.0, "nothing found about the case as a whole")
    return CheckResult(CASE_ITEM, worst([r.status for r in own], Status.PASS),
                       sum(r.duration_s for r in own), "; ".join(r.summary for r in own),
                       findings=tuple(f for r in own for f in r.findings))


def _text(check: CheckResult, severities: set[Severity]) -> str:
    check = safe(check)  # whatever text user code put in it, bounded and encodable
    return "\n".join(finding_text(f, check.name, explain=True) for f in check.findings
                     if f.severity in severities) or check.summary


def _report(check: CheckResult, strict: bool) -> None:
    if check.status in (Status.FAIL, Status.ERROR):
        raise CheckFailed(_text(check, {Severity.ERROR}))
    if check.status == Status.SKIP:
        pytest.skip(check.summary)
    if check.status == Status.XFAIL:
        pytest.xfail(check.expect or "expected failure")
    failed = failing(check.status, strict)  # the command line's own rule
    if check.status == Status.XPASS and failed:
        raise CheckFailed(f"expected to fail ({check.expect}) but passed")
    if check.status == Status.WARN:
        text = _text(check, {Severity.WARNING})
        if failed:
            raise CheckFailed(text)
        warnings.warn(GradverifyWarning(text), stacklevel=1)
