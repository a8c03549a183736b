"""Resolve ``mod:Class`` / ``file.py:Class`` targets and introspect them into ``FunctionInfo``."""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from gradverify.errors import TargetError, did_you_mean, shown_path
from gradverify.syspath import add_user_path, ensure_cwd_on_path

if TYPE_CHECKING:
    from torch.autograd import Function

_MISSING = inspect.Parameter.empty

USER_INTERRUPTS = False
"""True where real interrupts arrive as ``errors.Interrupted`` (the command line's handler; a
worker, in its own session, gets none): a plain KeyboardInterrupt raised while importing user
code is then the code's own, an import failure."""


def _real_interrupt(exc: KeyboardInterrupt) -> bool:
    from gradverify.errors import Interrupted

    return not USER_INTERRUPTS or isinstance(exc, Interrupted)


@dataclass(frozen=True)
class Param:
    name: str
    default: Any = _MISSING
    annotation: Any = _MISSING
    kind: str = "positional"  # positional | var_positional | keyword_only | var_keyword

    @property
    def required(self) -> bool:
        return self.default is _MISSING and self.kind == "positional"


@dataclass(frozen=True)
class FunctionInfo:
    """Everything the checks need to know about a target, found once: a Function class, or a
    custom op, plain function or module seen through an adapter (``gradverify.kinds``)."""

    cls: Any
    target: str
    """How the user named it, normalised (``pkg.mod:Class``)."""
    style: str
    """``ctx`` (forward(ctx, ...)) or ``setup_context``."""
    params: tuple[Param, ...]
    """forward's parameters, without ctx."""
    once_differentiable: bool
    has_jvp: bool
    vmap: str | None
    """``generate_vmap_rule``, ``staticmethod`` or None."""
    forward_location: str | None
    backward_location: str | None
    backward_arity: int | None
    """Number of gradient parameters backward takes; None when it takes ``*grads``."""
    uses_mark_dirty: bool
    source_file: str | None
    kind: str = "autograd.Function"
    """``gradverify.kinds.KINDS``: autograd.Function, custom op, function or module."""
    op: Any = None
    """A custom op's ``OpOverload``."""
    mutates: tuple[str, ...] = ()
    """The arguments a custom op's schema declares it writes to."""
    module: Any = None
    """A module target's instance (built from the spec's ``init_args``)."""
    parameters: tuple[str, ...] = ()
    """A module target's parameter names: the last ``len(parameters)`` of ``params``."""
    list_inputs: bool = False  # autograd differentiates it through its lists' tensors

    @property
    def name(self) -> str:
        return self.cls.__qualname__

    @property
    def writes_inputs(self) -> bool:  # declared: mark_dirty, an op's mutates_args
        return self.uses_mark_dirty or bool(self.mutates)

    @property
    def positional(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.kind == "positional")


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
    from gradverify import torchstate

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
    error's own location, else the innermost frame that is neither importlib's nor ours."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return (f"importing {name!r} raised {type(exc).__name__}: {exc.msg} at "
                f"{shown_path(exc.filename)}:{exc.lineno}")
    ours = os.path.dirname(os.path.abspath(__file__))
    frames = traceback.extract_tb(exc.__traceback__)
    user = [f for f in frames if "importlib" not in f.filename
            and not os.path.abspath(f.filename).startswith(ours + os.sep)]
    where = f" at {shown_path(user[-1].filename)}:{user[-1].lineno}" if user else ""
    if isinstance(exc, SystemExit):
        status = exc.code if isinstance(exc.code, int) or exc.code is None else repr(exc.code)
        return (f"importing {name!r} exited (sys.exit({'' if status is None else status})){where}"
                "; a module must not exit when imported: put script code under "
                "`if __name__ == \"__main__\":`")
    from gradverify import torchcompat

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


def resolve(text: str) -> FunctionInfo:
    """Import and introspect a Function class; raise TargetError when it is not one. A class
    re-exported from another module is reported under the name the user gave. (Every kind of
    target: ``gradverify.kinds.resolve``.)"""
    obj, name = resolve_named(text)
    return introspect(obj, target=name)


def normalise(text: str, obj: Any) -> str:
    """``module:qualname`` of a class the caller holds (no name was typed), else ``text``."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if module and qualname and not module.startswith("_gradverify_user_") \
            and "<locals>" not in qualname:
        return f"{module}:{qualname}"
    return text


def is_function_class(obj: Any) -> bool:
    """A ``torch.autograd.Function`` subclass that is not torch's own machinery."""
    from torch.autograd import Function

    from gradverify import torchcompat

    return inspect.isclass(obj) and issubclass(obj, Function) \
        and obj not in torchcompat.function_machinery()


def introspect(obj: Any, target: str | None = None) -> FunctionInfo:
    """A Function class's ``FunctionInfo``. (Every kind of target: ``gradverify.kinds``.)"""
    from torch.autograd import Function

    name = target or normalise(getattr(obj, "__qualname__", repr(obj)), obj)
    if not is_function_class(obj):
        what = f"class {obj.__qualname__}" if inspect.isclass(obj) else type(obj).__name__
        raise TargetError(f"{name} is a {what}, not a torch.autograd.Function subclass; gradverify "
                          "verifies classes with static forward and backward methods",
                          code="GV005", where=name)
    cls: type[Function] = obj
    setup_context = _overrides(cls, "setup_context", Function)
    forward = inspect.getattr_static(cls, "forward", None)
    forward_fn = _underlying(forward)
    if forward_fn is None or not _overrides(cls, "forward", Function):
        raise TargetError(f"{name} does not define forward", code="GV005", where=name)
    if not _overrides(cls, "backward", Function) and not _overrides(cls, "vjp", Function):
        raise TargetError(f"{name} does not define backward", code="GV005", where=name)
    skip = (0 if setup_context else 1) + (1 if isinstance(forward, classmethod) else 0)
    params = _params(forward_fn, skip)
    backward = inspect.getattr_static(cls, "backward", None) or inspect.getattr_static(cls, "vjp")
    backward_fn = _underlying(backward)
    once = _is_once_differentiable(backward_fn)
    arity = _backward_arity(backward_fn, isinstance(backward, classmethod))
    if getattr(cls, "generate_vmap_rule", False):
        vmap = "generate_vmap_rule"
    elif _overrides(cls, "vmap", Function):
        vmap = "staticmethod"
    else:
        vmap = None
    try:
        source_file = inspect.getsourcefile(cls)
    except (OSError, TypeError):
        source_file = None
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        source = ""
    return FunctionInfo(
        cls=cls, target=name, style="setup_context" if setup_context else "ctx",
        params=params, once_differentiable=once,
        has_jvp=_overrides(cls, "jvp", Function) or _overrides(cls, "forward_ad", Function),
        vmap=vmap, forward_location=location_of(forward_fn),
        backward_location=location_of(_unwrap(backward_fn)), backward_arity=arity,
        uses_mark_dirty="mark_dirty" in source, source_file=source_file,
    )


def _overrides(cls: type, name: str, base: type) -> bool:
    from gradverify import torchcompat

    machinery = torchcompat.function_machinery()
    for klass in cls.__mro__:
        if klass is base or klass in machinery:
            return False
        if name in vars(klass):
            return True
    return False


def _underlying(member: Any) -> Callable[..., Any] | None:
    if isinstance(member, (staticmethod, classmethod)):
        return member.__func__
    return member if callable(member) else None


def _unwrap(fn: Any) -> Any:
    while fn is not None and hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    return fn


def _is_once_differentiable(fn: Any) -> bool:
    # torch's once_differentiable wraps with functools.wraps: the wrapper's code lives in
    # torch/autograd/function.py.
    while fn is not None and hasattr(fn, "__wrapped__"):
        code = getattr(fn, "__code__", None)
        if code and code.co_filename.replace("\\", "/").endswith("torch/autograd/function.py"):
            return True
        fn = fn.__wrapped__
    return False


def _params(fn: Callable[..., Any], skip: int) -> tuple[Param, ...]:
    """forward's parameters without the leading ``cls``/``ctx`` ones."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return ()
    params = list(signature.parameters.values())[skip:]
    kinds = {
        inspect.Parameter.POSITIONAL_ONLY: "positional",
        inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional",
        inspect.Parameter.VAR_POSITIONAL: "var_positional",
        inspect.Parameter.KEYWORD_ONLY: "keyword_only",
        inspect.Parameter.VAR_KEYWORD: "var_keyword",
    }
    return tuple(Param(p.name, p.default, p.annotation, kinds[p.kind]) for p in params)


def _backward_arity(fn: Any, is_classmethod: bool) -> int | None:
    fn = _unwrap(fn)
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    if any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in params):
        return None
    skip = 2 if is_classmethod else 1  # (cls,) ctx
    return sum(1 for p in params[skip:] if p.kind in (inspect.Parameter.POSITIONAL_ONLY,
                                                      inspect.Parameter.POSITIONAL_OR_KEYWORD))


def location_of(fn: Any) -> str | None:
    """``file:line`` of a function's ``def`` line (not of the decorators above it)."""
    fn = _unwrap(fn)
    try:
        file = inspect.getsourcefile(fn)
        source, line = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return None
    if not file:
        return None
    for offset, text in enumerate(source):
        if text.lstrip().startswith(("def ", "async def ")):
            line += offset
            break
    return f"{shown_path(file)}:{line}"


def _line_of(cls: type) -> int | None:
    try:
        return inspect.getsourcelines(cls)[1]
    except (OSError, TypeError):
        return None
