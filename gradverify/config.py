"""``[tool.gradverify]`` in the nearest ``pyproject.toml`` (upward from the current directory)."""
from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gradverify.errors import InputError, did_you_mean
from gradverify.spec import Tolerance

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

KEYS = ("specs", "exclude", "checks", "only", "skip", "tolerance", "seed", "device", "mode",
        "jobs", "timeout", "fail-on-warnings", "strict", "format")


@dataclass(frozen=True)
class Config:
    root: Path
    """The directory of the pyproject.toml (or the current directory without one)."""
    file: Path | None = None
    specs: tuple[str, ...] = ("specs",)
    exclude: tuple[str, ...] = ()
    checks: Mapping[str, bool] = field(default_factory=dict)
    only: tuple[str, ...] | None = None
    skip: tuple[str, ...] = ()
    tolerance: Tolerance = Tolerance()
    seed: int | None = None
    device: str | None = None
    mode: str | None = None
    jobs: str | None = None
    timeout: float | None = None
    strict: bool | None = None
    format: str | None = None

    def spec_dirs(self) -> list[Path]:
        return [self.root / s for s in self.specs]

    def excluded(self, path: Path, named: Path | None = None) -> bool:
        """Whether ``exclude`` drops ``path`` found below the directory ``named`` on the command
        line. Naming an excluded directory (or one inside it) explicitly runs it anyway."""
        resolved = path.resolve()
        top = named.resolve() if named is not None else None
        for pattern in self.exclude:
            base = (self.root / pattern).resolve()
            if top is not None and (top == base or base in top.parents):
                continue
            if resolved == base or base in resolved.parents or resolved.match(pattern):
                return True
        return False


def find_pyproject(start: Path | None = None) -> Path | None:
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def load(start: Path | None = None) -> Config:
    file = find_pyproject(start)
    if file is None:
        return Config(root=(start or Path.cwd()).resolve())
    where = str(file)
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"cannot read pyproject.toml: {exc}", code="GV002", where=where) from None
    section = data.get("tool", {}).get("gradverify", {})
    if not isinstance(section, dict):
        raise InputError("[tool.gradverify] must be a table", code="GV002", where=where)
    return parse(section, root=file.parent, file=file)


def parse(section: Mapping[str, Any], *, root: Path, file: Path | None = None) -> Config:
    where = f"{file or 'pyproject.toml'}: [tool.gradverify]"

    def fail(key: str, message: str) -> InputError:
        return InputError(f"{key}: {message}", code="GV002", where=where)

    for key in section:
        if key not in KEYS:
            raise fail(key, f"unknown key{did_you_mean(key, KEYS)}; allowed: {', '.join(KEYS)}")
    values: dict[str, Any] = {}

    def strings(key: str) -> tuple[str, ...]:
        raw = section[key]
        raw = [raw] if isinstance(raw, str) else raw
        if not isinstance(raw, list) or not all(isinstance(s, str) for s in raw):
            raise fail(key, "expected a string or a list of strings")
        return tuple(raw)

    for key in ("specs", "exclude", "only", "skip"):
        if key in section:
            values[key] = strings(key)
    for key in ("only", "skip"):
        if key in values:
            from gradverify.registry import unknown_check

            for name in values[key]:
                if unknown_check(name):
                    raise fail(key, unknown_check(name))
    if "checks" in section:
        from gradverify.registry import unknown_check

        checks = section["checks"]
        if not isinstance(checks, dict):
            raise fail("checks", "expected a table of check = true/false")
        for name, on in checks.items():
            if unknown_check(name):
                raise fail(f"checks.{name}", unknown_check(name))
            if not isinstance(on, bool):
                raise fail(f"checks.{name}", "expected true or false")
        values["checks"] = dict(checks)
    if "tolerance" in section:
        tol = section["tolerance"]
        if not isinstance(tol, dict):
            raise fail("tolerance", "expected a table with atol, rtol, eps, nondet_tol")
        for k, v in tol.items():
            if k not in ("atol", "rtol", "eps", "nondet_tol"):
                raise fail(f"tolerance.{k}", "unknown key" + did_you_mean(k, ("atol", "rtol", "eps",
                                                                              "nondet_tol")))
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise fail(f"tolerance.{k}", "expected a non-negative number")
        values["tolerance"] = Tolerance(**{k: float(v) for k, v in tol.items()})
    if "fail-on-warnings" in section:  # the documented name; `strict` is the flag's name
        section = {**section, "strict": section["fail-on-warnings"]}
    for key, kind in (("seed", int), ("timeout", (int, float)), ("strict", bool)):
        if key in section:
            v = section[key]
            if (kind is not bool and isinstance(v, bool)) or not isinstance(v, kind):
                raise fail(key, f"expected {'true or false' if kind is bool else 'a number'}")
            values[key] = v
    for key, choices in (("device", ("cpu", "cuda")), ("mode", ("auto", "slow", "fast")),
                         ("format", ("rich", "plain", "json", "junit", "markdown", "github"))):
        if key in section:
            if section[key] not in choices:
                raise fail(key, f"expected one of: {', '.join(choices)}")
            values[key] = section[key]
    if "jobs" in section:
        v = section["jobs"]
        if not (v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and v >= 1)):
            raise fail("jobs", "expected a positive integer or \"auto\"")
        values["jobs"] = str(v)
    return Config(root=root, file=file, **values)
