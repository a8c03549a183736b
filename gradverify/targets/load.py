"""Find a target's object from its name: import a dotted module or a ``.py`` file (failures
as one paragraph pointing at the user's line), then walk ``mod:attr.path``."""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from gradverify import frames, torchcompat, torchstate
from gradverify.errors import Interrupted, TargetError, did_you_mean, shown_path
from gradverify.syspath import add_user_path, ensure_cwd_on_path

USER_INTERRUPTS = False
"""True where real interrupts arrive as ``errors.Interrupted`` (the command line's handler; a
worker, in its own session, gets none): a plain KeyboardInterrupt raised while importing user
code is then the code's own, an import failure."""


def _real_interrupt(exc: KeyboardInterrupt) -> bool:
    return not USER_INTERRUPTS or isinstance(exc, Interrupted)


def split_target(text: str) -> tuple[str, str]:
    module, sep, attr = text.rpartition(":")
    if not sep or not module or not attr:
        raise TargetError(f"target {text!r} must look like 'package.module:ClassName' or "
                          "'path/to/file.py:ClassName'", code="GV003")
    return module, _as_typed(attr)


def _as_typed(name: str) -> str:
    """A Python name as typed: under a locale that is not UTF-8 (``LC_ALL=C``) the command line
    arrives with UTF-8 bytes escaped (``\\udcce\\udc94``) where ``Δ`` was meant. (A path keeps
    the escapes: they are how the file system spells it.)"""
    if not any("\udc80" <= char <= "\udcff" for char in name):
        return name
    try:
        return os.fsencode(name).decode("utf-8")
    except UnicodeError:
        return name


def import_module(name: str) -> ModuleType:
    """Import a dotted module or a ``.py`` path; raise TargetError with the reason. What the
    import changed in torch's global state is undone and remembered for the report."""
    before = set(sys.modules)
    try:
        module = _import_module(name)
    except TargetError:
        torchstate.restore()  # a failed import leaves nothing behind either (a chdir, say)
        raise
    if module.__name__ not in before:  # imported now, not found in the cache
        torchstate.after_import(module.__name__)
    return module


def _import_module(name: str) -> ModuleType:
    ensure_cwd_on_path()
    if name.endswith(".py") or os.sep in name or "/" in name:
        return _import_file(Path(name))
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
            raise TargetError(f"cannot import module {name!r}: no module named {exc.name!r} "
                              f"(searched the current directory {os.getcwd()} and sys.path; is "
                              "the package installed, or are you in the right directory?)",
                              code="GV003", where=name) from None
        raise TargetError(_import_failed(name, exc), code="GV003", where=name) from None
    except KeyboardInterrupt as exc:
        if _real_interrupt(exc):
            raise
        raise TargetError(f"importing {name!r} raised KeyboardInterrupt", code="GV003",
                          where=name) from None
    except BaseException as exc:  # noqa: BLE001 -- user code at import, sys.exit() included
        raise TargetError(_import_failed(name, exc), code="GV003", where=name) from None


def _import_failed(name: str, exc: BaseException) -> str:
    """The paragraph for a failed import, pointing at the user's file and line: a syntax
    error's own location, else the innermost of the user's frames (``frames``: an installed
    package counts, the module being imported may be one)."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return (f"importing {name!r} raised {type(exc).__name__}: {exc.msg} at "
                f"{shown_path(exc.filename)}:{exc.lineno}")
    found = frames.innermost_user_frame(exc, installed=True)
    where = f" at {found}" if found else ""
    if isinstance(exc, SystemExit):
        status = exc.code if isinstance(exc.code, int) or exc.code is None else repr(exc.code)
        return (f"importing {name!r} exited (sys.exit({'' if status is None else status})){where}"
                "; a module must not exit when imported: put script code under "
                "`if __name__ == \"__main__\":`")
    return (f"importing {name!r} raised {type(exc).__name__}: {exc}{where}"
            + torchcompat.missing_api_note(exc))


def _import_file(path: Path) -> ModuleType:
    if not path.is_file():
        raise TargetError(f"no such file: {path}", code="GV003", where=str(path))
    resolved = path.resolve()
    # Import as a dotted module when the file lies under the current directory, so that
    # `file.py:Class` and `pkg.file:Class` resolve to the same class object.
    try:
        rel = resolved.relative_to(Path.cwd().resolve()).with_suffix("")
        dotted = ".".join(rel.parts)
        if all(part.isidentifier() for part in rel.parts):
            return _import_module(dotted)
    except ValueError:
        pass
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if file and Path(file).resolve() == resolved:
            return module
    name = f"_gradverify_user_{resolved.stem}_{abs(hash(str(resolved))):x}"
    spec = importlib.util.spec_from_file_location(name, resolved)
    if spec is None or spec.loader is None:
        raise TargetError(f"cannot import {path}: not a Python source file", code="GV003",
                          where=str(path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    add_user_path(str(resolved.parent))
    try:
        spec.loader.exec_module(module)
    except KeyboardInterrupt as exc:
        del sys.modules[name]
        if _real_interrupt(exc):
            raise
        raise TargetError(f"importing {path} raised KeyboardInterrupt", code="GV003",
                          where=str(path)) from None
    except BaseException as exc:  # noqa: BLE001 -- user code, sys.exit() included
        del sys.modules[name]
        raise TargetError(_import_failed(str(path), exc), code="GV003", where=str(path)) from None
    return module


def resolve_object(text: str) -> Any:
    """``mod:attr.path`` to the object, for targets, references and factories."""
    return resolve_named(text)[0]


def resolve_named(text: str) -> tuple[Any, str]:
    """The object and the name to report it under: the target as the user wrote it, except
    that a file path (``pkg/ops.py:F``) is spelt as the module it was imported as
    (``pkg.ops:F``), so that both spellings report and seed alike."""
    module_name, attr = split_target(text)
    module = import_module(module_name)
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            names = [n for n in dir(obj) if not n.startswith("_")]
            raise TargetError(f"{module_name!r} has no attribute {part!r}"
                              f"{did_you_mean(part, names)}", code="GV004", where=text)
        obj = getattr(obj, part)
    path_like = module_name.endswith(".py") or "/" in module_name or os.sep in module_name
    if path_like and not module.__name__.startswith("_gradverify_user_"):
        return obj, f"{module.__name__}:{attr}"
    return obj, f"{module_name}:{attr}"


def normalise(text: str, obj: Any) -> str:
    """``module:qualname`` of a class the caller holds (no name was typed), else ``text``."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if module and qualname and not module.startswith("_gradverify_user_") \
            and "<locals>" not in qualname:
        return f"{module}:{qualname}"
    return text

