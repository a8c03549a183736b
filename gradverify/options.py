"""What a run is asked to do, built in one place: a flag (command line or ``verify()``) over the
spec, over ``[tool.gradverify]``, over the default.

``RunOptions.from_config(config, **flags)`` is the one constructor, used by the command line,
``verify()`` and the pytest plugin; the levels that belong to a spec and a case (tolerances,
check switches and check options) are resolved at the case by its methods. The choices of each
option are listed here, once (gradcheck's ``MODES`` with the rest of its modes, in
``checks/_modes.py``).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from gradverify.checks._modes import MODES
from gradverify.choices import (
    DEFAULT_DEVICE,
    DEFAULT_MODE,
    DEFAULT_SEED,
    DEFAULT_TIMEOUT,
    MAX_TIMEOUT,
    check_device,
    choice,
    parse_jobs,
    parse_shard,
)
from gradverify.errors import UsageError
from gradverify.spec.model import Case, CheckSetting, ResolvedTolerance, Spec, Tolerance

if TYPE_CHECKING:
    from gradverify.config import Config

@dataclass(frozen=True)
class RunOptions:
    """The options of one run, every level above the spec resolved."""

    seed: int = DEFAULT_SEED
    device: str = DEFAULT_DEVICE
    mode: str = DEFAULT_MODE
    only: tuple[str, ...] | None = None
    """Run only these checks (the flag, else ``only =``); None: every selected check."""
    skip: tuple[str, ...] = ()
    cases: tuple[str, ...] = ()
    """Glob patterns on case names; empty means every case."""
    tolerance: Tolerance = field(default_factory=Tolerance)
    """Flag tolerances: over every spec."""
    config_tolerance: Tolerance = field(default_factory=Tolerance)
    """``[tool.gradverify] tolerance``: under every spec."""
    config_checks: Mapping[str, CheckSetting] = field(default_factory=dict)
    """``[tool.gradverify] checks``: under every spec."""
    strict: bool = False
    isolate: bool = False
    """Run cases in worker processes (crashes and hangs become that case's error)."""
    jobs: int = 1
    jobs_auto: bool = False
    """``-j auto``: as many as the cores, lowered to the cases without a note."""
    timeout: float = DEFAULT_TIMEOUT
    """Seconds per case before its worker is killed (isolated runs only)."""
    shard: tuple[int, int] | None = None
    """(K, N): run the K-th of N stable slices of the cases (1-based)."""
    changed: bool = False
    """TARGETs are changed files (pre-commit); nothing to check is success."""
    user_paths: tuple[str, ...] = ()
    """Folders the caller imports from besides the current directory (the pytest plugin's
    ``sys.path``: its rootdir, ``pythonpath``): worker processes add them after the standard
    library before they import a target."""
    repro: bool = False
    """``--repro DIR``: failures shrunk get a bare-torch script (``run.repro``), which the
    command line writes under DIR."""
    mutate: bool = False
    """Run mutants of each target's backward against its cases (``gradverify.mutants``)."""
    mode_flag: bool = False
    """``mode`` came from a flag (``--fast``/``--slow``, ``verify(mode=)``): it is over every
    check's own ``mode`` option, in specs too."""

    @classmethod
    def from_config(cls, config: Config, *, seed: int | None = None, device: str | None = None,
                    mode: str | None = None, only: Iterable[str] | None = None,
                    skip: Iterable[str] | None = None, cases: Iterable[str] = (),
                    atol: float | None = None, rtol: float | None = None,
                    eps: float | None = None, strict: bool | None = None,
                    jobs: int | str | None = None, timeout: float | None = None,
                    shard: str | None = None, isolate: bool = False, changed: bool = False,
                    repro: bool = False,
                    mutate: bool | None = None) -> RunOptions:
        """The options of a run: each flag given (not None) over ``config`` (pyproject) over
        the default. Raises ``UsageError`` for a value no run can take."""
        from gradverify.registry import unknown_check

        only = tuple(only) if only is not None else config.only
        skip = tuple(skip) if skip is not None else config.skip
        for name in (*(only or ()), *skip):
            problem = unknown_check(name)
            if problem is not None:
                raise UsageError(problem)
        device = check_device(device or config.device or DEFAULT_DEVICE)
        if timeout is not None and not 0 < timeout <= MAX_TIMEOUT:
            raise UsageError(f"timeout: must be > 0 and at most {MAX_TIMEOUT:g} seconds, got "
                             f"{timeout}")
        jobs = jobs if jobs is not None else config.jobs
        config_checks = config.checks
        if mode is not None:  # the flag is over [tool.gradverify], its checks' `mode` included
            config_checks = {name: replace(setting, options={
                k: v for k, v in setting.options.items() if k != "mode"})
                for name, setting in config.checks.items()}
        return cls(
            seed=seed if seed is not None else
            config.seed if config.seed is not None else DEFAULT_SEED,
            device=device, mode=choice("mode", mode or config.mode or DEFAULT_MODE, MODES),
            only=only, skip=skip, cases=tuple(cases),
            tolerance=Tolerance(atol=atol, rtol=rtol, eps=eps),
            config_tolerance=config.tolerance, config_checks=config_checks,
            strict=bool(strict if strict is not None else config.strict),
            isolate=isolate, jobs=parse_jobs(jobs), jobs_auto=jobs == "auto",
            timeout=timeout if timeout is not None else
            config.timeout if config.timeout is not None else DEFAULT_TIMEOUT,
            shard=parse_shard(shard), changed=changed, mode_flag=mode is not None,
            repro=repro, mutate=bool(mutate if mutate is not None else config.mutate))

    # -- the levels of a spec and a case

    def tolerance_for(self, spec: Spec, case: Case) -> ResolvedTolerance:
        """Flag over case over spec over pyproject over gradcheck's defaults."""
        return self.tolerance.over(case.tolerance.over(spec.tolerance.over(
            self.config_tolerance))).resolved()

    def check_enabled(self, name: str, default: bool, spec: Spec, case: Case) -> bool:
        """``only`` decides alone; else case over spec over pyproject over the check's
        default; ``skip`` turns a check off at every level."""
        if name in self.skip:
            return False
        if self.only is not None:
            return name in self.only
        on = default
        for level in (self.config_checks, spec.checks, case.checks):
            if name in level:
                on = level[name].enabled
        return on

    def mode_for(self, name: str, spec: Spec, case: Case) -> str:
        """The gradcheck mode a check runs in: the flag; else the check's own ``mode`` option,
        case over spec over pyproject; else ``mode =`` of pyproject; else auto."""
        if self.mode_flag:
            return self.mode
        own = self.check_options(name, spec, case).get("mode")
        return own if isinstance(own, str) and own in MODES else self.mode

    def check_options(self, name: str, spec: Spec, case: Case) -> dict[str, Any]:
        """The check's options: case over spec over pyproject."""
        options: dict[str, Any] = {}
        for level in (self.config_checks, spec.checks, case.checks):
            if name in level:
                options.update(level[name].options)
        return options
