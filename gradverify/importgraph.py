"""Which of the project's files a spec's run imports, read from source with ``ast``, for
``check --changed``: a change to a shared helper, or to a package's ``__init__.py``, reruns the
specs of every target that imports it, directly or through other files.

Nothing is imported (the process that discovers never imports torch or user code). Each file
is parsed once while unchanged (cached by path, modification time and size) and each import
is resolved as Python would, on the file system:

- ``import a.b``, ``from a.b import c`` (``a/b/c.py`` when ``c`` is a module), relative imports
  (``from . import x``, ``from ..util import f``) against the importing file's package;
- a module inside a package imports its package's ``__init__.py`` (and that one its parent's),
  found as the ``__init__.py`` beside it; an ``__init__.py`` that only re-exports (imports, a
  docstring, ``__all__``) uses none of what it imports itself, so a name imported from it is
  followed to the module that defines it (``through``), never to all it re-exports;
- imports inside functions count (forward may import lazily); ``importlib`` calls do not.

Only the project's folders are searched: ``PYTHONPATH``, the current directory, the project
root and its ``src/``, the folders of ``file.py:Name`` targets and the ``sys.path`` entries
inside the project; never installed packages (site-packages) or the standard library. A file
that cannot be parsed adds no imports, and is listed in ``unparsed``. Never imports torch.
"""
from __future__ import annotations

import ast
import functools
import os
import sys
import sysconfig
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gradverify.errors import os_path
from gradverify.files import stamp
from gradverify.specmodel import Spec
from gradverify.targets.names import Form, TargetName, names_read

_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ()))


@dataclass(frozen=True)
class _Import:
    """One ``import`` or ``from ... import`` as written."""

    level: int
    """0 for an absolute import; 1 for ``from .``, 2 for ``from ..``."""
    module: str
    """``a.b`` (empty in ``from . import x``)."""
    names: tuple[str, ...] = ()
    """What ``from ... import`` names (each may be a submodule); empty for ``import a.b``."""


@functools.lru_cache(maxsize=4096)
def _parsed(path: Path, stamp: tuple[int, int]
            ) -> tuple[tuple[_Import, ...], str | None, bool]:
    """The imports of one file, or none and why it could not be read (``stamp``: its
    modification time and size, so that an edited file is read again), and whether it only
    imports (a docstring, imports, ``__all__``: a package ``__init__.py`` that re-exports)."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except SyntaxError as exc:
        return (), f"{exc.msg} at line {exc.lineno}", False
    except (OSError, ValueError, RecursionError) as exc:
        return (), str(exc) or type(exc).__name__, False
    found: list[_Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [_Import(0, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = tuple(alias.name if alias.asname is None else f"{alias.name} as "
                          f"{alias.asname}" for alias in node.names if alias.name != "*")
            found.append(_Import(node.level, node.module or "", names))
    return tuple(found), None, all(_only_names(node) for node in tree.body)


def _only_names(node: ast.stmt) -> bool:
    """An import, the docstring, or ``__all__ = [...]``: a statement that runs no code of its
    own."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return True
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
        return True
    targets = node.targets if isinstance(node, ast.Assign) else \
        [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
    return bool(targets) and all(isinstance(t, ast.Name) and t.id == "__all__" for t in targets)


def _bound(name: str) -> tuple[str, str]:
    """(the name imported, the name it is bound to) of ``from m import a as b``."""
    imported, _, bound = name.partition(" as ")
    return imported, bound or imported


def _module_at(folder: Path, parts: Sequence[str]) -> Path | None:
    """The file of the module ``parts`` below ``folder``: a package's ``__init__.py`` first,
    as Python looks, then ``name.py`` (``parts`` empty: ``folder``'s own package)."""
    if not parts:
        init = folder / "__init__.py"
        return init if init.is_file() else None
    init = folder.joinpath(*parts, "__init__.py")
    if init.is_file():
        return init
    module = folder.joinpath(*parts[:-1], parts[-1] + ".py")
    return module if module.is_file() else None


class ImportGraph:
    """The project's files and what each imports, read as they are asked for."""

    def __init__(self, bases: Iterable[Path]) -> None:
        self.bases = list(dict.fromkeys(base.resolve() for base in bases if base.is_dir()))
        """Where absolute imports are looked for, first one first."""
        self._edges: dict[Path, frozenset[Path]] = {}
        self._found: dict[str, Path | None] = {}
        self.unparsed: dict[Path, str] = {}
        """The files reached that could not be parsed, and why: they import nothing here."""

    def closure(self, files: Iterable[Path]) -> set[Path]:
        """``files`` (those that exist) and every project file they import, directly or not."""
        seen: set[Path] = set()
        todo = [f.resolve() for f in files if f.is_file()]
        while todo:
            file = todo.pop()
            if file not in seen:
                seen.add(file)
                todo += self.imports(file) - seen
        return seen

    def imports(self, file: Path) -> frozenset[Path]:
        """The project files that importing ``file`` imports at once (its package's
        ``__init__.py`` included)."""
        if file not in self._edges:
            found: set[Path] = set()
            package = self._package_init(file)
            if package is not None:
                found.add(package)
            imports, error, only = _parsed(file, stamp(file))
            if error is not None:
                self.unparsed[file] = error
            if not (only and file.name == "__init__.py"):
                # a package __init__ that only re-exports uses none of them itself: a module
                # that imports a name from it depends on the module defining that name
                for each in imports:
                    for imported in (self._relative(file, each) if each.level
                                     else self._absolute(each)):
                        found |= self.through(imported, each.names)
            found.discard(file)
            self._edges[file] = frozenset(found)
        return self._edges[file]

    def through(self, file: Path, names: tuple[str, ...],
                 seen: frozenset[Path] = frozenset()) -> set[Path]:
        """``file``, and where it is a package ``__init__.py`` that only re-exports, the
        modules that define ``names`` in it (all it re-exports, for ``import pkg`` or
        ``from pkg import *``); ``seen``: the ``__init__.py`` files on the way (a cycle
        ends)."""
        if file.name != "__init__.py" or file in seen:
            return {file}
        imports, error, only = _parsed(file, stamp(file))
        if error is not None or not only:
            return {file}
        wanted = {_bound(name)[0] for name in names}
        found = {file}
        for each in imports:
            bound = {_bound(name)[1] for name in each.names}
            if names and not each.names and each.level == 0:
                continue  # `import a.b` binds `a`, never a name asked for
            if names and each.names and not bound & wanted:
                continue
            for imported in (self._relative(file, each) if each.level
                             else self._absolute(each)):
                if imported != file:
                    found |= self.through(imported, tuple(bound & wanted) or each.names,
                                           seen | {file})
        return found

    def find(self, module: str) -> Path | None:
        """The file of the dotted ``module`` in the first base that has it."""
        if module not in self._found:
            parts = module.split(".")
            # the standard library comes before the project's folders on the run's sys.path
            self._found[module] = None if parts[0] in _STDLIB else next(
                (f for f in (_module_at(b, parts) for b in self.bases) if f), None)
        return self._found[module]

    @staticmethod
    def _package_init(file: Path) -> Path | None:
        """The ``__init__.py`` that importing ``file`` runs first: its package's (for a
        package's own ``__init__.py``, its parent package's). Taken even where a base's folder
        has one, which a module imported from that base does not run: one spec too many is
        cheaper than one missed."""
        folder = file.parent.parent if file.name == "__init__.py" else file.parent
        init = folder / "__init__.py"
        return init if init.is_file() else None

    def _absolute(self, each: _Import) -> set[Path]:
        """``import a.b.c`` (the longest part of the name that is a file: ``a.b`` when ``c``
        is compiled) and ``from a.b import c`` (``a/b/c.py`` when ``c`` is a module)."""
        parts = each.module.split(".")
        found = {f for f in (self.find(f"{each.module}.{_bound(name)[0]}")
                             for name in each.names) if f}
        for end in range(len(parts), 0, -1):
            file = self.find(".".join(parts[:end]))
            if file is not None:
                found.add(file)
                break
        return found

    @staticmethod
    def _relative(file: Path, each: _Import) -> set[Path]:
        """``from .mod import x`` and ``from .. import x``, against ``file``'s package."""
        folder = file.parent
        for _ in range(each.level - 1):
            folder = folder.parent
        parts = each.module.split(".") if each.module else []
        candidates = [_module_at(folder, parts),
                      *(_module_at(folder, [*parts, _bound(name)[0]]) for name in each.names)]
        return {c for c in candidates if c is not None}


def target_files(name: TargetName, root: Path, *, search_path: bool = False) -> set[Path]:
    """Files that may define a target's module, found from its name alone (no import): under
    the project root, its ``src/`` and the current directory (and ``sys.path``, if asked)."""
    if name.form != Form.ATTRIBUTE:  # an op's name names no file
        return set()
    module = os_path(name.module)  # read from a spec: as the file system names it
    if name.is_path:
        return {(root / module).resolve(), Path(module).resolve()}
    parts = module.split(".")
    bases = [root, root / "src", Path.cwd()]
    if search_path:
        bases += [Path(p) for p in sys.path if p and Path(p).is_dir()]
    return {(base.joinpath(*parts[:-1], parts[-1] + ".py")).resolve() for base in bases} | \
        {(base.joinpath(*parts, "__init__.py")).resolve() for base in bases}


def project_bases(root: Path, extra: Iterable[Path] = ()) -> list[Path]:
    """Where a run finds the user's modules, first one first: ``PYTHONPATH``, the current
    directory, the project root and its ``src/``, ``extra`` (the folders of ``file.py:Name``
    targets) and the ``sys.path`` entries inside the project; never site-packages, never the
    standard library."""
    here = Path.cwd().resolve()
    inside = (root.resolve(), here)
    on_path = [Path(p).resolve() for p in sys.path if p]
    candidates = [*(Path(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p),
                  here, root, root / "src", *extra,
                  *(p for p in on_path if any(p == i or i in p.parents for i in inside))]
    stdlib = {Path(sysconfig.get_path(key)).resolve() for key in ("stdlib", "platstdlib")}
    return [p for p in dict.fromkeys(c.resolve() for c in candidates)
            if p.is_dir() and not {"site-packages", "dist-packages"} & set(p.parts)
            and not any(p == s or s in p.parents for s in stdlib)]


class Readers:
    """Which specs' runs read a file: the specs whose target, reference, factory or
    ``imports:`` module is that file or imports it, directly or not. Every file the specs reach
    is read once, then each question walks the imports backwards from the file asked about."""

    def __init__(self, specs: Sequence[Spec], root: Path) -> None:
        self.specs = list(specs)
        self._starts: list[frozenset[Path]] = []
        extra: list[Path] = []
        for spec in self.specs:
            named = names_read(spec)
            files = {n: target_files(n, root) for n in named}
            self._starts.append(frozenset().union(*files.values()))
            extra += [f.parent for n, found in files.items() if n.is_path
                      for f in found if f.is_file()]
        graph = ImportGraph(project_bases(root, extra))
        for i, spec in enumerate(self.specs):  # a target re-exported by its package's
            # __init__ (`pkg:Fn` from `from .ops import Fn`) is defined where it comes from
            heads = tuple(n.text.rpartition(":")[2].split(".")[0] for n in names_read(spec)
                          if n.form == Form.ATTRIBUTE)
            self._starts[i] = self._starts[i].union(
                *(graph.through(f, heads) for f in self._starts[i] if f.is_file()))
        self._importers: dict[Path, set[Path]] = {}
        for file in graph.closure(f for start in self._starts for f in start):
            for imported in graph.imports(file):
                self._importers.setdefault(imported, set()).add(file)
        self.unparsed = graph.unparsed
        """The files reached that could not be parsed, and why."""

    def of(self, path: Path) -> list[Spec]:
        """The specs whose runs read ``path`` (resolved)."""
        reached: set[Path] = set()
        todo = [path]
        while todo:
            file = todo.pop()
            if file not in reached:
                reached.add(file)
                todo += self._importers.get(file, set()) - reached
        return [spec for spec, start in zip(self.specs, self._starts) if start & reached]
