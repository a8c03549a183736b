"""What a module or a package defines that gradverify verifies, for ``init``, ``list`` and
``check`` given a module's name.

A module is its own targets (``kinds.targets_in``: defined there, in source order). A package is
its own and those of every submodule below it, imported in name order: a target is found once,
under the module that defines it, whether ``__init__`` re-exports it or not. A submodule that
cannot be imported is reported, not fatal; ``__main__`` and ``conftest`` are never imported (one
runs a program, the other is pytest's).
"""
from __future__ import annotations

import pkgutil
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from gradverify.errors import InputError
from gradverify.targets import import_module, targets_in
from gradverify.targets.names import named_by

NEVER_IMPORTED = ("__main__", "conftest")


@dataclass(frozen=True)
class Defined:
    """A target a module defines: ``attr`` is its attribute, or ``ns::op`` for an op
    registered by name (whose spec imports ``module``)."""

    module: str
    attr: str
    obj: Any

    @property
    def named(self) -> bool:
        """Registered by a name of its kind's own grammar (an op's ``ns::op``), not held by
        an attribute."""
        return named_by(self.attr) is not None

    @property
    def target(self) -> str:
        return self.attr if self.named else f"{self.module}:{self.attr}"


@dataclass(frozen=True)
class Unimported:
    """A submodule that could not be imported, and why (one line)."""

    module: str
    reason: str


def defined_in(module: ModuleType) -> tuple[list[Defined], list[Unimported]]:
    """The targets ``module`` defines, and for a package those of its submodules."""
    found: list[Defined] = []
    failed: list[Unimported] = []
    for each in [module, *submodules(module, failed)]:
        found += [d for d in (Defined(each.__name__, attr, obj) for attr, obj in targets_in(each))
                  if not (d.named and any(f.attr == d.attr for f in found))]
    return found, failed


def submodules(package: ModuleType, failed: list[Unimported]) -> list[ModuleType]:
    """Every module below a package (none for a plain module), imported, in name order; the
    ones that cannot be imported are added to ``failed``."""
    path = getattr(package, "__path__", None)
    if path is None:
        return []
    names = []
    for info in pkgutil.walk_packages(path, package.__name__ + ".", onerror=lambda name: None):
        if info.name.rpartition(".")[2] not in NEVER_IMPORTED:
            names.append(info.name)
    modules = []
    for name in sorted(names):
        try:
            modules.append(import_module(name))
        except InputError as exc:
            failed.append(Unimported(name, " ".join(exc.message.split())))
    return modules
