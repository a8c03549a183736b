"""``[tool.gradverify]`` in the nearest ``pyproject.toml`` (upward from the current directory)."""
from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gradverify.errors import InputError, os_path, shown_path
from gradverify.optiontable import BY_NAME, KEYS, OPTIONS
from gradverify.spec.settings import SettingsReader
from gradverify.specmodel import SPEC_SUFFIXES, CheckSetting, Tolerance

if sys.version_info >= (3, 11):  # mypy checks the version CI runs
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@dataclass(frozen=True)
class Config:
    """``[tool.gradverify]``: the options it sets, each read as ``optiontable.OPTIONS`` says
    (no option is declared here)."""

    root: Path
    """The directory of the pyproject.toml (or the current directory without one)."""
    file: Path | None = None
    given: Mapping[str, Any] = field(default_factory=dict)
    """The options the file sets, by option name, each read and checked by its validator."""

    def value(self, name: str) -> Any:
        """The option's value in the file; else its default (None for a run option, whose
        default ``RunOptions`` applies under the flags)."""
        option = BY_NAME[name]
        if not option.keys:
            raise KeyError(f"{name!r} has no [tool.gradverify] key")
        return self.given.get(name, None if option.run else option.default)

    @property
    def specs(self) -> tuple[str, ...]:
        return tuple(self.value("specs"))

    @property
    def exclude(self) -> tuple[str, ...]:
        return tuple(self.value("exclude"))

    @property
    def checks(self) -> Mapping[str, CheckSetting]:
        return self.value("checks") or {}

    @property
    def tolerance(self) -> Tolerance:
        return self.value("tolerance") or Tolerance()

    def spec_dirs(self) -> list[Path]:
        return [self.root / os_path(s) for s in self.specs]

    def excluded(self, path: Path, named: Path | None = None) -> bool:
        """Whether ``exclude`` drops ``path`` found below the directory ``named`` on the command
        line. Naming an excluded directory (or one inside it) explicitly runs it anyway."""
        resolved = path.resolve()
        top = named.resolve() if named is not None else None
        for pattern in map(os_path, self.exclude):
            base = (self.root / pattern).resolve()
            if top is not None and (top == base or base in top.parents):
                continue
            if resolved == base or base in resolved.parents or resolved.match(pattern):
                return True
        return False


def spec_files(directory: Path, config: Config,
               unreadable: list[tuple[Path, str]] | None = None) -> list[Path]:
    """Spec files below a directory, sorted, without the configured excludes (the directory
    itself may be excluded: naming it explicitly overrides that). A folder that cannot be read
    is added to ``unreadable``, with why: its specs are never skipped without a word."""
    found = []

    def failed(exc: OSError) -> None:
        folder = Path(exc.filename)
        if unreadable is not None and not config.excluded(folder, directory):
            unreadable.append((folder, (exc.strerror or str(exc)).lower()))

    for root, _, names in os.walk(directory, onerror=failed):
        for name in names:
            path = Path(root) / name
            if path.suffix in SPEC_SUFFIXES and path.is_file() \
                    and not config.excluded(path, directory):
                found.append(path)
    return sorted(found)


def unreadable_folder(folder: Path, why: str) -> str:
    return (f"{shown_path(folder)}: cannot read this folder ({why}): the spec files in it are "
            "not run")


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
    """``[tool.gradverify]`` read by the validator that reads specs (``SettingsReader``): a value
    is accepted, or refused with the same message, in either file."""
    read = SettingsReader(f"{shown_path(file) if file else 'pyproject.toml'}: [tool.gradverify]")
    read.known_keys(section, KEYS, None, "")
    values: dict[str, Any] = {}
    for option in OPTIONS:  # each key read as the option table says
        for key in reversed(option.keys):  # the documented spelling last: it wins
            if key in section and option.read is not None:
                values[option.name] = option.read(read, section[key], key)
    return Config(root=root, file=file, given=values)
