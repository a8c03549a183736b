"""What ``gradverify init`` writes specs for: one named target, or every target a module
defines, the ops it registers by name with ``torch.library`` included (there is no
``CustomOpDef`` object to find for those). In a module, a target that cannot be introspected
(an ``nn.Module`` that only holds parameters, with no ``forward``) is skipped with a note; the
others are written.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from gradverify.errors import InputError, TargetError
from gradverify.packages import defined_in
from gradverify.targets import (
    Capability,
    Target,
    described,
    import_module,
    introspect,
    may_have,
    parse_target,
    resolve,
    resolve_object,
)
from gradverify.targets.names import Form, named_by


@dataclass(frozen=True)
class Found:
    """A target to write a spec for."""

    info: Target
    imports: tuple[str, ...] = ()
    """The spec's ``imports:``: the modules whose import registers an op named ``ns::op``."""


@dataclass(frozen=True)
class Skipped:
    """A target of a module that gradverify could not introspect, and why (one line)."""

    target: str
    reason: str


def find(target: str, imports: tuple[str, ...] = ()) -> tuple[list[Found], list[Skipped]]:
    """The targets a name gives, after importing ``imports``: ``mod:Name`` or ``ns::op`` (an
    error when it cannot be introspected), or every Function class, custom op, op registered
    with ``torch.library`` and ``nn.Module`` class of a module or ``.py`` file."""

    for module in imports:
        import_module(module)
    name = parse_target(target)
    if name.named:
        try:
            return [Found(resolve(name.text, imports), imports)], []
        except TargetError as exc:
            if imports or not exc.message.startswith("no operator"):
                raise
            raise TargetError("no operator of this name is registered: pass --import MODULE, "
                              "the module whose import registers it (the spec lists it under "
                              "imports:)", code=exc.code, where=target) from None
    if name.form == Form.ATTRIBUTE:
        obj = resolve_object(target)
        init_args = guess_init_args(obj) if may_have(obj, Capability.PARAMETERS) else None
        return [Found(resolve(target, init_args=init_args))], []
    found, skipped = _in_module(import_module(target))
    if not found and not skipped:
        raise TargetError(f"{target} defines nothing gradverify verifies by module (no "
                          f"{described(listed=True, last='or')}); a plain function is named "
                          f"as {target}:function", code="GV022", where=target)
    if not found:
        raise TargetError(f"{target}: no target could be introspected: "
                          + "; ".join(f"{s.target}: {s.reason}" for s in skipped),
                          code="GV022", where=target)
    return found, skipped


def _in_module(module: ModuleType) -> tuple[list[Found], list[Skipped]]:
    """The targets of a module, or of a package and every module below it."""
    found: list[Found] = []
    defined, failed = defined_in(module)
    skipped = [Skipped(f.module, f"not imported: {f.reason}") for f in failed]
    for each in defined:
        obj = each.obj
        if named_by(each.attr):  # registered by name (torch.library): no object to name
            _by_name(each.attr, each.module, found, skipped)
            continue
        name = each.target
        try:  # a Function class is named as its module and qualname say
            found.append(Found(introspect(
                obj, None if may_have(obj, Capability.CLASS_SOURCE) else name,
                init_args=guess_init_args(obj) if may_have(obj, Capability.PARAMETERS) else None)))
        except InputError as exc:
            skipped.append(Skipped(name, _one_line(exc, name)))
    return found, skipped


def guess_init_args(cls: type) -> dict[str, Any]:
    """Constructor arguments for ``gradverify init`` on a module class: each required one
    guessed from its annotation or name (sizes 4, numbers 0.5, flags False)."""
    try:
        params = list(inspect.signature(cls).parameters.values())
    except (TypeError, ValueError):
        return {}
    guessed: dict[str, Any] = {}
    for p in params:
        if p.default is not inspect.Parameter.empty or p.kind in (
                inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        annotation = str(p.annotation)
        if "bool" in annotation:
            guessed[p.name] = False
        elif "float" in annotation or p.name in ("eps", "alpha", "beta", "p", "dropout"):
            guessed[p.name] = 0.5
        else:
            guessed[p.name] = 4
    return guessed


def _by_name(op: str, module: str, found: list[Found], skipped: list[Skipped]) -> None:
    """An op a module registers by name: its spec names it ``ns::op`` and imports the module."""
    if module.startswith("_gradverify_user_"):
        skipped.append(Skipped(op, "its module was imported from a path outside the current "
                                   "directory, which a spec's imports: cannot name: run init "
                                   "from the project's root"))
        return
    try:
        found.append(Found(resolve(op, (module,)), (module,)))
    except InputError as exc:
        skipped.append(Skipped(op, _one_line(exc, op)))


def _one_line(exc: InputError, target: str) -> str:
    """The reason on one line, without the target's name that the note gives first."""
    text = " ".join(exc.message.split())
    if text.startswith(target):
        text = text[len(target):].lstrip(": ")
    return f"{text}  [{exc.code}]"
