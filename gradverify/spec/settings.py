"""The settings that a spec and ``[tool.gradverify]`` share (tolerances, check switches and
check options) and the plain values of the configuration, read by one validator: the same value
is accepted, or refused with the same message, in either file."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gradverify.choices import check_device
from gradverify.errors import UsageError, did_you_mean, one_of
from gradverify.registry import REGISTRY, unknown_check
from gradverify.spec.yamlio import Reader, join_key, kind_of
from gradverify.specmodel import TOLERANCE_KEYS, CheckSetting, Tolerance

if TYPE_CHECKING:
    from gradverify.checks.base import CheckOption


class SettingsReader(Reader):
    """``yamlio.Reader`` with the settings of a run."""

    def tolerance(self, value: Any, line: int | None, key: str) -> Tolerance:
        data = self.mapping(value, line, key, "tolerances like {atol: 1.0e-5, rtol: 1.0e-3}")
        self.known_keys(data, TOLERANCE_KEYS, line, key)
        values = {k: float(self.number(v, self.line_of(data, k, line), join_key(key, k), minimum=0,
                                       positive=(k == "eps")))
                  for k, v in data.items()}
        return Tolerance(**values)

    def checks(self, value: Any, line: int | None, key: str) -> dict[str, CheckSetting]:
        data = self.mapping(value, line, key, "check switches like {gradgradcheck: false}")
        result: dict[str, CheckSetting] = {}
        for name, raw in data.items():
            at = self.line_of(data, name, line)
            self.check_name(name, at, join_key(key, name))
            if isinstance(raw, bool):
                result[name] = CheckSetting(enabled=raw)
                continue
            if raw is None:
                raw = {}
            options = self.mapping(raw, at, join_key(key, name),
                                   "true, false or a mapping of options")
            allowed = {o.name: o for o in REGISTRY[name].options}
            parsed: dict[str, Any] = {}
            enabled = True
            for opt, opt_value in options.items():
                opt_at = self.line_of(options, opt, at)
                opt_key = join_key(key, name, opt)
                if opt == "enabled":
                    enabled = self.boolean(opt_value, opt_at, opt_key)
                    continue
                if opt not in allowed:
                    names = [*sorted(allowed), "enabled"]
                    raise self.fail(f"unknown option {opt!r} for check {name!r}"
                                    f"{did_you_mean(opt, names)}; {one_of(names)}", opt_at, opt_key)
                parsed[opt] = self.option(allowed[opt], opt_value, opt_at, opt_key)
            result[name] = CheckSetting(enabled=enabled, options=parsed)
        return result

    def option(self, option: CheckOption, value: Any, line: int | None, key: str) -> Any:
        """The value of a check's option under ``checks:``."""
        if option.choices is not None:
            return self.choice(value, option.choices, line, key)
        if option.kind is bool:
            return self.boolean(value, line, key)
        if option.kind in (int, float):
            return self.number(value, line, key, integer=option.kind is int)
        if option.kind is str:
            return self.string(value, line, key)
        return value

    def strings(self, value: Any, line: int | None, key: str) -> tuple[str, ...]:
        """A string, or a list of strings."""
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list):
            raise self.fail(f"expected a string or a list of strings, got {kind_of(value)}",
                            line, key)
        for index, item in enumerate(items):
            if not isinstance(item, str) or not item:
                got = "an empty string" if item == "" else kind_of(item)
                raise self.fail(f"item {index} should be a non-empty string, got {got}",
                                line, key)
        return tuple(items)

    def check_name(self, name: Any, line: int | None, key: str) -> str:
        """The name of a check (validated against the registry)."""
        problem = unknown_check(name)
        if problem is not None:
            raise self.fail(problem, line, key)
        return str(name)

    def check_names(self, value: Any, line: int | None, key: str) -> tuple[str, ...]:
        return tuple(self.check_name(name, line, key) for name in self.strings(value, line, key))

    def boolean(self, value: Any, line: int | None, key: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(f"expected true or false, got {kind_of(value)}", line, key)
        return value

    def device(self, value: Any, line: int | None, key: str) -> str:
        """A device's spelling (``cuda:1``), as ``--device`` takes it (``choices``)."""
        try:
            return check_device(self.string(value, line, key))
        except UsageError as exc:
            raise self.fail(str(exc).partition(": ")[2], line, key) from None

    def choice(self, value: Any, choices: Sequence[Any], line: int | None, key: str) -> Any:
        if value not in choices:
            names = [str(c) for c in choices]
            raise self.fail(f"invalid value {value!r}{did_you_mean(str(value), names)}; "
                            f"{one_of(names)}", line, key)
        return value
