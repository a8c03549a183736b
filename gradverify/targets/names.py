"""What a TARGET on the command line (or a spec's ``target:``) names, decided in one place:
an op (``ns::op``), a module attribute (``pkg.mod:Name``, ``path/file.py:Name``), a whole
module (``pkg.mod``, ``file.py``, a package folder), or spec files (a ``.yaml`` file, a
folder of specs). Reads the file system only to tell a folder or file that exists from a
name; imports nothing."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gradverify.spec.model import (
    NAMED_SPEC_SUFFIXES,
    SPEC_SUFFIXES,
    canonical_target,
    is_op_name,
    is_target_string,
)

OP = "op"
ATTRIBUTE = "attribute"
MODULE = "module"
SPECS = "specs"
UNKNOWN = "unknown"


@dataclass(frozen=True)
class TargetName:
    text: str
    """As given, with an op spelt as Python spells it (``torch.ops.ns.op``) as ``ns::op``."""
    form: str
    """``op``, ``attribute``, ``module``, ``specs`` or ``unknown``."""

    @property
    def op(self) -> bool:
        return self.form == OP

    @property
    def module(self) -> str:
        """The module part: ``pkg.mod`` or ``path/file.py`` (an op's: empty)."""
        if self.form == ATTRIBUTE:
            return self.text.rpartition(":")[0]
        return self.text if self.form == MODULE else ""

    @property
    def is_path(self) -> bool:
        """The module is named by its file (``path/file.py``), not imported by name."""
        module = self.module
        return module.endswith(".py") or "/" in module or os.sep in module


def parse_target(text: str) -> TargetName:
    """Classify ``text`` (see the module's docstring). A folder named like a spec file is a
    folder; a package folder (an ``__init__.py``, no spec file) is a module; ``x:Name`` is an
    attribute unless a file of that name exists."""
    text = canonical_target(text)
    path = Path(text)
    if is_op_name(text):
        return TargetName(text, OP)
    if path.is_dir() and not is_package_folder(text):
        return TargetName(text, SPECS)
    if text.endswith(NAMED_SPEC_SUFFIXES):
        return TargetName(text, SPECS)
    if ":" in text and not path.exists():
        return TargetName(text, ATTRIBUTE)
    if text.endswith(".py") or (is_target_string(f"{text}:X") and "/" not in text
                                and not path.is_file()):
        return TargetName(text, MODULE)
    return TargetName(text, UNKNOWN)  # a file of another kind (a name without .py or .yaml)


def is_package_folder(name: str) -> bool:
    """Whether ``name`` (a folder in the current directory) is a package named for import
    (``fastops``, with ``fastops/__init__.py``) rather than a folder of specs: it has an
    ``__init__.py`` and no spec file below it."""
    folder = Path(name)
    if not name.isidentifier() or not (folder / "__init__.py").is_file():
        return False
    return not any(p.suffix in SPEC_SUFFIXES for p in folder.rglob("*") if p.is_file())
