"""What a run is asked to do, built in one place: a flag (command line or ``verify()``) over the
spec, over ``[tool.gradverify]``, over the default.

``RunOptions.from_config(config, **flags)`` is the one constructor, used by the command line,
``verify()`` and the pytest plugin; the levels that belong to a spec and a case (tolerances,
check switches and check options) are resolved at the case by its methods. Each option, its
default and its validator are declared once, in ``optiontable.OPTIONS``.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from gradverify.checks._modes import MODES
from gradverify.optiontable import BY_NAME, OPTIONS, default
from gradverify.specmodel import Case, CheckSetting, ResolvedTolerance, Spec, Tolerance

if TYPE_CHECKING:
    from gradverify.config import Config

FLAGS = (*(o.name for o in OPTIONS if o.run), "atol", "rtol", "eps")
"""What ``from_config`` takes: ``verify()``'s keywords and the flags of ``check`` that a run
is given (named as ``RunOptions``' fields)."""


@dataclass(frozen=True)
class RunOptions:
    """The options of one run, every level above the spec resolved."""

    seed: int = default("seed")
    device: str = default("device")
    """The flag's device, else ``device =``, else cpu: a spec's ``device:`` is under the flag
    and over ``device =`` (``device_for``)."""
    mode: str = default("mode")
    only: tuple[str, ...] | None = default("only")
    """Run only these checks (the flag, else ``only =``); None: every selected check."""
    skip: tuple[str, ...] = default("skip")
    cases: tuple[str, ...] = default("cases")
    """Glob patterns on case names; empty means every case."""
    tolerance: Tolerance = field(default_factory=Tolerance)
    """Flag tolerances: over every spec."""
    config_tolerance: Tolerance = field(default_factory=Tolerance)
    """``[tool.gradverify] tolerance``: under every spec."""
    config_checks: Mapping[str, CheckSetting] = field(default_factory=dict)
    """``[tool.gradverify] checks``: under every spec."""
    strict: bool = default("strict")
    isolate: bool = default("isolate")
    """Run cases in worker processes (crashes and hangs become that case's error)."""
    jobs: int = default("jobs")
    jobs_auto: bool = False
    """``-j auto``: as many as the cores, lowered to the cases without a note."""
    timeout: float = default("timeout")
    """Seconds per case before its worker is killed (isolated runs only)."""
    shard: tuple[int, int] | None = default("shard")
    """(K, N): run the K-th of N stable slices of the cases (1-based)."""
    changed: bool = default("changed")
    """TARGETs are changed files (pre-commit); nothing to check is success."""
    user_paths: tuple[str, ...] = ()
    """Folders the caller imports from besides the current directory (the pytest plugin's
    ``sys.path``: its rootdir, ``pythonpath``): worker processes add them after the standard
    library before they import a target."""
    repro: bool = default("repro")
    """``--repro DIR``: failures shrunk get a bare-torch script (``run.repro``), which the
    command line writes under DIR."""
    mutate: bool = default("mutate")
    """Run mutants of each target's backward against its cases (``gradverify.mutants``)."""
    compose: bool = default("compose")
    """Turn on every composition check (``Check.composition``: compile, autocast)."""
    given: frozenset[str] = frozenset()
    """The options a flag gave (``check``'s, ``verify()``'s keywords, the pytest plugin's),
    by name: a flag is over a spec's level where the option has one (``mode`` over each
    check's own ``mode`` option, ``device`` over a spec's ``device:``, ``compose`` over its
    ``compose:``)."""
    configured: frozenset[str] = frozenset()
    """The options ``[tool.gradverify]`` sets, by name."""
    others: Mapping[str, Any] = field(default_factory=dict)
    """The value of each run option of the table that has no field here (``value``)."""

    def value(self, name: str) -> Any:
        """A run option's value by its name in ``optiontable.OPTIONS``."""
        return self.others[name] if name in self.others else getattr(self, name)

    def is_set(self, name: str) -> bool:
        """Whether a flag or ``[tool.gradverify]`` gave the option (else: its default)."""
        return name in self.given or name in self.configured

    @classmethod
    def from_config(cls, config: Config, **flags: Any) -> RunOptions:
        """The options of a run: each flag given (not None; the options of
        ``optiontable.OPTIONS`` that set a field, and ``atol``, ``rtol``, ``eps``) over
        ``config`` (pyproject) over the default, each checked by its option's validator.
        Raises ``UsageError`` for a value no run can take."""
        unknown = sorted(set(flags) - set(FLAGS))
        if unknown:
            raise TypeError(f"RunOptions.from_config() got unexpected flags {unknown}")
        values: dict[str, Any] = {}
        for option in OPTIONS:
            if not option.run:
                continue
            value = flags.get(option.name)
            if value is None and option.keys:
                value = config.value(option.name)
            if value is not None and option.check is not None:
                value = option.check(value)
            values[option.name] = option.default if value is None else value
        config_checks = config.checks
        if flags.get("mode") is not None:  # the flag is over [tool.gradverify]'s checks' `mode`
            config_checks = {name: replace(setting, options={
                k: v for k, v in setting.options.items() if k != "mode"})
                for name, setting in config.checks.items()}
        jobs = flags.get("jobs") if flags.get("jobs") is not None else config.value("jobs")
        values = {**values, "cases": tuple(values["cases"]), "skip": tuple(values["skip"]),
                  "strict": bool(values["strict"]), "mutate": bool(values["mutate"]),
                  "compose": bool(values["compose"])}
        typed = {f.name for f in fields(cls)}
        return cls(**{name: value for name, value in values.items() if name in typed},
                   others={name: value for name, value in values.items() if name not in typed},
                   tolerance=Tolerance(**{name: _checked(name, flags.get(name))
                                          for name in ("atol", "rtol", "eps")}),
                   config_tolerance=config.tolerance, config_checks=config_checks,
                   jobs_auto=jobs == "auto",
                   given=frozenset(name for name, value in flags.items() if value is not None),
                   configured=frozenset(config.given))

    def device_for(self, spec: Spec) -> str:
        """The device a spec's cases run on: the flag; else the spec's ``device:``; else
        ``device =`` of pyproject; else cpu."""
        if "device" in self.given or spec.device is None:
            return self.device
        return spec.device

    # -- the levels of a spec and a case

    def tolerance_for(self, spec: Spec, case: Case, base: Tolerance | None = None
                      ) -> ResolvedTolerance:
        """Flag over case over spec over pyproject over ``base`` (default: gradcheck's
        defaults; a float32-inside kernel's, ``FLOAT32_INSIDE_TOLERANCE``)."""
        return self.tolerance.over(case.tolerance.over(spec.tolerance.over(
            self.config_tolerance))).resolved(base)

    def check_enabled(self, name: str, default: bool, spec: Spec, case: Case, *,
                      composition: bool = False) -> bool:
        """``only`` decides alone; else case over spec over pyproject over the check's
        default, which a composition check has on where ``compose`` is: the flag, over the
        spec's ``compose:``, over pyproject's. ``skip`` turns a check off at every level."""
        if name in self.skip:
            return False
        if self.only is not None:
            return name in self.only
        compose = self.compose if "compose" in self.given or spec.compose is None else spec.compose
        on = default or (composition and compose)
        for level in (self.config_checks, spec.checks, case.checks):
            if name in level:
                on = level[name].enabled
        return on

    def mode_for(self, name: str, spec: Spec, case: Case) -> str:
        """The gradcheck mode a check runs in: the flag; else the check's own ``mode`` option,
        case over spec over pyproject; else ``mode =`` of pyproject; else auto."""
        if "mode" in self.given:
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


def _checked(name: str, value: Any) -> Any:
    """A flag's value as its option's validator takes it (``optiontable.Option.check``)."""
    check = BY_NAME[name].check
    return check(value) if value is not None and check is not None else value
