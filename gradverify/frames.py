"""Whose code a frame runs, decided once. Every message that points at "the user's line" asks
here: a check's location for a Function that raised, where forward saved or changed a tensor,
how far ``gradverify init``'s trial call got, whether an exception escaped from gradverify's own
code (our bug, exit 4) or from the user's, where an import failed, which Function classes
``record`` describes, and which frames of a recorded script's traceback are the launcher's.

The rule: a file is the user's unless it is

- gradverify's: the package, its shipped examples included;
- torch's: torch and functorch;
- an installed package's: site-packages, dist-packages and the environment's scripts (pytest,
  click, numpy, the ``gradverify`` command itself);
- Python's: the standard library and importlib's frozen bootstrap;
- no file at all: ``<string>``, ``<stdin>``, the code torch.fx generates.

One exception, for the callers that know a target: the target's own source file is the user's
wherever it lies (an installed package's Function, or one of gradverify's examples), because it
is the code under test.

Callers differ only where they must, each by a named parameter: ``target`` (the checks, the
error classifier, the saved-tensor probe, ``gradverify init``); ``in_target`` (``gradverify
init`` compares line numbers, which compare only within the target's file); ``installed`` (the
import reporter: the module it imports may be an installed package). ``record`` asks of a class's
module (``owner_of_module``) and skips only torch's and gradverify's: an installed library's
Functions are recorded. The launcher of a recorded script drops the frames above the script
that gradverify, Python (runpy) or no file (its ``python -c`` boot code) hold.
"""
from __future__ import annotations

import enum
import functools
import os
import site
import sys
import sysconfig
import traceback
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from importlib.util import find_spec
from types import CodeType, FrameType, TracebackType
from typing import Any

from gradverify.errors import shown_path
from gradverify.results import Location


class Owner(enum.Enum):
    """Who wrote the code a file holds."""

    USER = "user"
    GRADVERIFY = "gradverify"
    TORCH = "torch"
    INSTALLED = "installed"
    """A third-party package installed in the environment, or one of its scripts."""
    PYTHON = "python"
    """The standard library, frozen modules included."""
    NO_FILE = "no file"
    """Code compiled from a string: there is no line to open."""


_PACKAGES = {"gradverify": Owner.GRADVERIFY, "torch": Owner.TORCH, "functorch": Owner.TORCH}
"""Top-level packages that are not the user's, by import name."""
_INSTALL_FOLDERS = frozenset({"site-packages", "dist-packages"})


@dataclass(frozen=True)
class SourceLine:
    """A line of a source file, as a frame of a traceback or of the stack names it."""

    file: str
    """As the code object names it (absolute, or relative to the directory at import)."""
    line: int

    def __str__(self) -> str:
        """``file:line`` as messages show it, relative to the current directory when under it."""
        return f"{shown_path(self.file)}:{self.line}"

    def location(self) -> Location:
        """As the report's model holds a place (the file as messages show it)."""
        return Location(shown_path(self.file), self.line)

    def text(self) -> str:
        """The line's source, read by the path the code object gives (whatever the current
        directory is now); empty when the file cannot be read."""
        import linecache

        return linecache.getline(self.file, self.line).strip()


def owner(source: str | CodeType) -> Owner:
    """Who wrote a file (or a code object's file): the one rule, in the module docstring."""
    filename = source.co_filename if isinstance(source, CodeType) else source
    if not filename or filename.startswith("<"):  # <string>, <eval_with_key>.3
        return Owner.PYTHON if filename.startswith("<frozen ") else Owner.NO_FILE
    return _owner_of_file(os.path.abspath(filename))


@functools.lru_cache(maxsize=4096)
def _owner_of_file(filename: str) -> Owner:
    path = os.path.realpath(filename)
    # gradverify and torch first: either may be installed in site-packages; then the installed
    # folders, since site-packages usually lies inside the standard library's folder
    for package, folder in _package_folders():
        if _under(path, folder):
            return _PACKAGES[package]
    if _INSTALL_FOLDERS.intersection(path.split(os.sep)) or \
            any(_under(path, folder) for folder in _folders(("purelib", "platlib", "scripts"))):
        return Owner.INSTALLED
    if any(_under(path, folder) for folder in _folders(("stdlib", "platstdlib"))):
        return Owner.PYTHON
    return Owner.USER


def owner_of_module(name: str) -> Owner:
    """Who wrote a module, by its dotted name: ``torch.*``, ``functorch.*`` and
    ``gradverify.*`` by name (a module of theirs may have no file), any other by its file; one
    without a file (a class made in ``exec``'d code) is the user's."""
    known = _PACKAGES.get(name.partition(".")[0])
    if known is not None:
        return known
    file = getattr(sys.modules.get(name), "__file__", None)
    return owner(file) if isinstance(file, str) else Owner.USER


def is_user_file(filename: str, target: str | None = None, *, installed: bool = False) -> bool:
    """Whether a file is the user's: the rule of the module docstring. ``target``: the source
    file of the code under test, the user's wherever it lies. ``installed``: count installed
    packages as the user's too (the import reporter: the module it imports may be an installed
    package, and then its own failing line is the one to show)."""
    if target is not None and _same_file(filename, target):
        return True
    found = owner(filename)
    return found is Owner.USER or (installed and found is Owner.INSTALLED)


def innermost_user_frame(exc: BaseException, target: str | None = None, *,
                         installed: bool = False, in_target: bool = False) -> SourceLine | None:
    """The innermost of the user's frames on the exception's traceback; when it has none, on
    its cause's (or context's), and so on down the chain: torch's ``opcheck`` and torch.compile
    wrap the user's error in one of their own, raised from torch's frames. ``target`` and
    ``installed`` as for ``is_user_file``. ``in_target``: only frames of the target's own file
    count (``gradverify init`` compares how far calls got by line number, and line numbers
    compare only within one file)."""
    def counts(file: str) -> bool:
        if in_target:
            return target is not None and _same_file(file, target)
        return is_user_file(file, target, installed=installed)

    for link in _chain(exc):
        found = None
        for frame, line in traceback.walk_tb(link.__traceback__):
            if counts(frame.f_code.co_filename):
                found = SourceLine(frame.f_code.co_filename, line or 0)
        if found is not None:
            return found
    return None


def calling_user_frame(target: str | None = None) -> SourceLine | None:
    """The innermost of the user's frames on the current stack, outside any traceback: the
    user's line that called, through torch, the gradverify code that asks. ``target`` as for
    ``is_user_file``."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if is_user_file(frame.f_code.co_filename, target):
            return SourceLine(frame.f_code.co_filename, frame.f_lineno or 0)
        frame = frame.f_back
    return None


def raised_in_gradverify(exc: BaseException, target: str | None = None) -> bool:
    """Whether the exception was raised in gradverify's own code (its innermost frame is
    gradverify's): a bug of ours, where one raised in the user's code, torch's or Python's
    (called with what the user's code gave them) is the user's. ``target`` as for
    ``is_user_file``: one of gradverify's examples under test raising is the Function's."""
    innermost = None
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        innermost = frame.f_code.co_filename
    return innermost is not None and owner(innermost) is Owner.GRADVERIFY and \
        not (target is not None and _same_file(innermost, target))


def traceback_codes(exc: BaseException) -> list[CodeType]:
    """The code objects the exception's traceback passes through, outermost first."""
    return [frame.f_code for frame, _ in traceback.walk_tb(exc.__traceback__)]


def without_outer(tb: TracebackType | None, owners: Collection[Owner]) -> TracebackType | None:
    """The traceback from its outermost frame whose file none of ``owners`` wrote (None when
    they wrote every frame): a traceback without the frames of whatever started the code."""
    while tb is not None and owner(tb.tb_frame.f_code) in owners:
        tb = tb.tb_next
    return tb


def without_inner(tb: TracebackType | None, code: CodeType) -> TracebackType | None:
    """The traceback without its innermost frames that run ``code`` (a signal handler that
    raised on the program's behalf; nested when a second signal arrived while it ran): it
    ends where the program was. The frames are relinked, so ``tb`` itself is changed."""
    frames_in = []
    while tb is not None:
        frames_in.append(tb)
        tb = tb.tb_next
    keep = len(frames_in)
    while keep > 1 and frames_in[keep - 1].tb_frame.f_code is code:
        keep -= 1
    if keep < len(frames_in):
        frames_in[keep - 1].tb_next = None
    return frames_in[0] if frames_in else None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception, its cause (or context), theirs, ...; each once."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _same_file(filename: str, target: str) -> bool:
    return filename == target or os.path.realpath(filename) == os.path.realpath(target)


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


@functools.cache
def _package_folders() -> tuple[tuple[str, str], ...]:
    """(import name, real folder) of each package in ``_PACKAGES`` that is installed; found
    without importing it (torch may not be imported yet)."""
    found = []
    for name in _PACKAGES:
        module = sys.modules.get(name)
        file = getattr(module, "__file__", None)
        if file is None:
            try:
                spec = find_spec(name)
            except (ImportError, ValueError):
                spec = None
            file = spec.origin if spec is not None else None
        if file:
            found.append((name, os.path.dirname(os.path.realpath(file))))
    return tuple(found)


@functools.cache
def _folders(kinds: tuple[str, ...]) -> tuple[str, ...]:
    """The real folders sysconfig names for ``kinds`` (and site's, for the installed ones)."""
    paths = sysconfig.get_paths()
    folders = {paths[k] for k in kinds if k in paths}
    if "purelib" in kinds:
        folders.update(getattr(site, "getsitepackages", list)())
        folders.add(site.getusersitepackages())
    if "stdlib" in kinds:
        folders.add(os.path.dirname(os.__file__))
    return tuple(sorted({os.path.realpath(f) for f in folders if f}))


@dataclass(frozen=True)
class Traced:
    """The last call of a code object during a run: where it returned, and the lines it ran,
    in the order they ran."""

    returned: SourceLine
    lines: tuple[int, ...]


def traced(code: CodeType, run: Callable[[], Any]) -> Traced | None:
    """The last call of ``code`` during ``run()`` (None where it returned nowhere). A trace
    function follows ``code``'s frames alone, on this thread; the caller's is put back."""
    calls: list[list[int]] = []
    returned: list[SourceLine] = []

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            calls[-1].append(frame.f_lineno)
        elif event == "return":
            returned.append(SourceLine(code.co_filename, frame.f_lineno or 0))
        return local

    def starts(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "call" and frame.f_code is code:
            calls.append([])
            return local
        return None

    previous = sys.gettrace()
    sys.settrace(starts)
    try:
        run()
    finally:
        sys.settrace(previous)
    if not returned or len(returned) != len(calls):
        return None
    return Traced(returned[-1], tuple(calls[-1]))
