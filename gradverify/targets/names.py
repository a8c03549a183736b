"""What a TARGET on the command line (or a spec's ``target:``) names, decided in one place:
an op (``ns::op``), a module attribute (``pkg.mod:Name``, ``path/file.py:Name``), a whole
module (``pkg.mod``, ``file.py``, a package folder), or spec files (a ``.yaml`` file, a
folder of specs). Reads the file system only to tell a folder or file that exists from a
name; imports nothing."""
from __future__ import annotations

import enum
import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from gradverify.specmodel import NAMED_SPEC_SUFFIXES, SPEC_SUFFIXES, Spec
from gradverify.targets import kinds


class Form(enum.Enum):
    """What a TARGET names; code that acts on each form matches on it (``Discoverer._one`` and
    ``files_read``: what a run reads is what its discovery reads), and mypy sees a form left
    out (``unhandled``)."""

    NAMED = "named"
    """A name in a kind's own grammar (an op's ``ns::op``)."""
    ATTRIBUTE = "attribute"
    """``pkg.mod:Name`` or ``path/file.py:Name``."""
    MODULE = "module"
    """A whole module: ``pkg.mod``, ``file.py``, a package folder."""
    SPECS = "specs"
    """A spec file or a folder of specs."""
    UNKNOWN = "unknown"
    """A file of another kind, or nothing gradverify can name."""


def unhandled(form: NoReturn) -> NoReturn:
    """Where a ``match`` on a ``Form`` ends: mypy flags a form no case handles."""
    raise AssertionError(f"unhandled target form {form!r}")


@dataclass(frozen=True)
class TargetName:
    text: str
    """As given, with a name in a kind's own grammar spelt as that kind spells it (an op
    spelt as Python spells it, ``torch.ops.ns.op``, as ``ns::op``)."""
    form: Form
    kind: str | None = None
    """For a ``named`` target: the name of the kind whose grammar it is."""

    @property
    def named(self) -> bool:
        """Named by a kind's own grammar (an op's ``ns::op``), not ``module:attribute``."""
        return self.form == Form.NAMED

    @property
    def module(self) -> str:
        """The module part: ``pkg.mod`` or ``path/file.py`` (an op's: empty)."""
        if self.form == Form.ATTRIBUTE:
            return self.text.rpartition(":")[0]
        return self.text if self.form == Form.MODULE else ""

    @property
    def is_path(self) -> bool:
        """The module is named by its file (``path/file.py``), not imported by name."""
        module = self.module
        return module.endswith(".py") or "/" in module or os.sep in module


def in_module(module: str) -> TargetName:
    """A name in ``module`` (``pkg.mod:_``): what finds the files that may define a module
    named alone (a module TARGET, a spec's ``imports:``), as they are found for an attribute."""
    return TargetName(f"{module}:_", Form.ATTRIBUTE)


def parse_target(text: str) -> TargetName:
    """Classify ``text`` (see the module's docstring). A folder named like a spec file is a
    folder; a package folder (an ``__init__.py``, no spec file) is a module; ``x:Name`` is an
    attribute unless a file of that name exists."""
    text = canonical_target(text)
    path = Path(text)
    kind = named_by(text)
    if kind is not None:
        return TargetName(text, Form.NAMED, kind)
    if path.is_dir() and not is_package_folder(text):
        return TargetName(text, Form.SPECS)
    if text.endswith(NAMED_SPEC_SUFFIXES):
        return TargetName(text, Form.SPECS)
    if ":" in text and not path.exists():
        return TargetName(text, Form.ATTRIBUTE)
    if text.endswith(".py") or (is_target_string(f"{text}:X") and "/" not in text
                                and not path.is_file()):
        return TargetName(text, Form.MODULE)
    return TargetName(text, Form.UNKNOWN)  # a file of another kind (no .py or .yaml)


def is_package_folder(name: str) -> bool:
    """Whether ``name`` (a folder in the current directory) is a package named for import
    (``fastops``, with ``fastops/__init__.py``) rather than a folder of specs: it has an
    ``__init__.py`` and no spec file below it."""
    folder = Path(name)
    if not name.isidentifier() or not (folder / "__init__.py").is_file():
        return False
    return not any(p.suffix in SPEC_SUFFIXES for p in folder.rglob("*") if p.is_file())


_MODULE_RE = re.compile(r"^[\w./\\-]+(\.py)?\Z")


def named_by(text: str) -> str | None:
    """The name of the kind whose own grammar ``text`` is a name in (``custom op`` for
    ``ns::op``), or None."""
    return next((kind.name for kind in kinds.KINDS if kind.name_of(text) == text), None)


def same_target_name(a: str, b: str) -> bool:
    """Whether two target names name one target: equal, or two spellings of one name in a
    kind's own grammar (``ns::op`` and ``ns::op.default``: ``Kind.same_name``)."""
    if a == b:
        return True
    kind = named_by(a)
    return kind is not None and kind == named_by(b) and kinds.named(kind).same_name(a, b)


def names_read(spec: Spec) -> list[TargetName]:
    """What a run of ``spec`` imports: its target, its reference, its cases' factories and
    its ``imports:`` modules. Discovery's overwrite guard (``discover.files_read``) and the
    import graph (``importgraph.Readers``) both read a spec through this."""
    named = [parse_target(n) for n in (spec.target, spec.reference,
                                       *(case.factory for case in spec.cases)) if n]
    return named + [in_module(module) for module in spec.imports]


def file_stem(name: str) -> str:
    """A target's name as a file's name: ``Outer_Inner`` for ``Outer.Inner``, the parts of an
    op's ``ns::op`` joined by a dot (a colon breaks pytest's node ids, and Windows)."""
    return re.sub(r"[^\w.-]", "_", name.replace(".", "_").replace("::", "."))


def canonical_target(text: str) -> str:
    """A name in a kind's grammar as that kind spells it (``torch.ops.ns:op`` or
    ``torch.ops.ns.op[.overload]``, as Python spells an op, as ``ns::op[.overload]``); any
    other target as it is, its ``:Name`` normalised as Python normalises identifiers (NFKC:
    ``Café`` typed as ``Cafe`` + a combining accent is the class ``Café``). A file path keeps
    the file system's spelling."""
    for kind in kinds.KINDS:
        spelt = kind.name_of(text)
        if spelt is not None:
            return spelt
    module, sep, name = text.rpartition(":")
    if sep and module:
        return f"{module}:{unicodedata.normalize('NFKC', name)}"
    return text


def is_target_string(text: str) -> bool:
    """``module:Name`` or ``path/file.py:Outer.Inner``: any Python identifiers, Unicode
    included (``uniops:ΔScale``), and a file's path as the file system spells it (``my ops
    dir/ünï códe ops.py:Quad``, as on the command line); or a name in a kind's own grammar
    (an operator's ``ns::op[.overload]``)."""
    if named_by(text) is not None:
        return True
    module, sep, attr = text.rpartition(":")
    path = module.endswith(".py") and module.isprintable()
    return bool(sep and (_MODULE_RE.match(module) or path)
                and all(part.isidentifier() for part in attr.split(".")))
