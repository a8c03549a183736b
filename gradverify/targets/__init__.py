"""Targets: what gradverify verifies, one module per kind, listed in ``KINDS``
(docs/architecture.md).

A kind (``model.Kind``) detects its objects and introspects one into a frozen ``Target``
whose ``function.apply`` calls it on a case's values and whose ``capabilities`` say which
checks apply. Nothing outside this package knows a kind: code asks a target what it has
(``Target.has``), and names its kind only in messages. Adding a kind is a module here and a
line in ``KINDS``. Imports torch lazily.
"""
from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from typing import Any

from gradverify.errors import TargetError
from gradverify.targets import custom_op, kinds, triton_launches
from gradverify.targets.custom_op import registered_formula
from gradverify.targets.introspection import line_of, location_of
from gradverify.targets.load import import_module, normalise, resolve_named, resolve_object
from gradverify.targets.model import (
    MISSING,
    Built,
    Capability,
    Formula,
    Kind,
    Param,
    Schema,
    Target,
)
from gradverify.targets.module import ModuleParameter, module_parameter
from gradverify.targets.names import TargetName, parse_target, same_target_name

KINDS = kinds.KINDS
"""Every kind, in the order they are tried (a Function class is also a class): read here,
registered in ``targets/kinds.py`` (the functions below read it there, at call time)."""

__all__ = [
    "KINDS",
    "MISSING",
    "Built",
    "Capability",
    "Formula",
    "Kind",
    "ModuleParameter",
    "Param",
    "Schema",
    "Target",
    "TargetName",
    "described",
    "draws_random",
    "grammar_name_of",
    "import_module",
    "introspect",
    "kind_for",
    "kind_of",
    "location_of",
    "may_have",
    "module_parameter",
    "normalise",
    "parse_target",
    "registered_formula",
    "resolve",
    "resolve_object",
    "same_target_name",
    "targets_in",
    "who_has",
    "why_lacking",
]


def described(*, listed: bool = False, last: str = "and") -> str:
    """What gradverify verifies, in the kinds' own words: every kind, or (``listed``) those
    a module's targets include, the last joined by ``last``."""
    plurals = [k.plural for k in kinds.KINDS if (k.listed or not listed) and k.plural]
    return ", ".join(plurals[:-1]) + (f" {last} " if len(plurals) > 1 else "") + plurals[-1]


def kind_of(obj: Any) -> Kind | None:
    """The kind of a target object, or None when gradverify cannot verify it (TargetError
    for an op packet of several overloads: name one)."""
    return next((kind for kind in kinds.KINDS if kind.detect(obj)), None)


def may_have(obj: Any, capability: Capability) -> bool:
    """Whether a target of ``obj``'s kind may have ``capability``, without introspecting it
    (which builds a module): ``PARAMETERS``, a module class built from ``init_args``."""
    try:
        kind = kind_of(obj)
    except TargetError:
        return False
    return kind is not None and capability in kind.capabilities


def kind_for(target: Target) -> Kind:
    """The kind that introspected ``target``: what its backward, its bare call and its
    names are is that kind's to say."""
    return kinds.named(target.kind)


def grammar_name_of(obj: Any) -> str | None:
    """``obj``'s name in its kind's own grammar (an op's ``ns::op``; not a packet of several
    overloads), else None."""
    try:
        kind = kind_of(obj)
    except TargetError:  # several overloads: no one name
        return None
    return None if kind is None else kind.named(obj)


_ANY_KIND = {Capability.TRITON: "targets whose forward or backward launches Triton kernels"}
"""Capabilities a target of any kind may get (its code launches Triton kernels)."""


def who_has(capability: Capability) -> str:
    """The kinds of target that have ``capability``, in their own words, for messages."""
    if capability in _ANY_KIND:
        return _ANY_KIND[capability]
    words = [f"{k.short} {k.qualified[capability]}" if capability in k.qualified else k.short
             for k in kinds.KINDS if capability in k.capabilities and k.short]
    return " and ".join(dict.fromkeys(words))


def resolve(text: str, imports: tuple[str, ...] = (),
            init_args: Mapping[str, Any] | None = None) -> Target:
    """Import and introspect a target of any kind; TargetError when gradverify cannot verify
    it. An op's name (``ns::op``, or ``torch.ops.ns:op``) is looked up after importing
    ``imports``; a module class is built from ``init_args``."""
    name = parse_target(text)
    if name.named:
        assert name.kind is not None  # named: in its kind's own grammar
        kind = kinds.named(name.kind)
        return _with_launches(kind.by_name(name.text, imports))
    obj, shown = resolve_named(name.text)
    return introspect(obj, shown, init_args)


def introspect(obj: Any, target: str | None = None,
               init_args: Mapping[str, Any] | None = None) -> Target:
    """The ``Target`` of an object of any kind; TargetError when it is none."""
    name = target or normalise(getattr(obj, "__qualname__", None) or custom_op.op_name(obj), obj)
    kind = kind_of(obj)
    if kind is None:
        what = f"class {obj.__qualname__}" if inspect.isclass(obj) else type(obj).__name__
        article = "an" if what[:1].lower() in "aeiou" else "a"
        raise TargetError(f"{name} is {article} {what}; gradverify verifies "
                          f"{described()}", code="GV005", where=name)
    return _with_launches(kind.introspect(obj, name, init_args or {}))


def _with_launches(target: Target) -> Target:
    """``target`` with the TRITON capability when its code launches Triton kernels (a kind
    of its own, such as a triton op, or any other)."""
    if not triton_launches.launches(target.function):
        return target
    return dataclasses.replace(target, capabilities=target.capabilities
                               | {Capability.TRITON})


def why_lacking(target: Target, capability: Capability) -> str:
    """Why ``target`` lacks ``capability``, in its kind's words."""
    return kind_for(target).lacking.get(capability) or f"made for {who_has(capability)} only"


def draws_random(target: Target) -> bool:
    """Whether the calls of a target so far drew random numbers (functions and modules are
    watched: ``module_calls.same_random_numbers``)."""
    use = getattr(target.function, "random_use", None)
    return bool(use is not None and use.drew)


def targets_in(source: Any) -> list[tuple[str, Any]]:
    """(attribute name, object) of what a Python module defines that gradverify verifies, in
    source order: what each kind counts as the module's own (Function classes, custom ops and
    ``nn.Module`` classes; not plain functions: every helper is one); then the ops it
    registers by name with ``torch.library`` (``custom_op.library_ops``), as (``ns::op``,
    the op)."""
    found = []
    own = set()  # the ops found by object: not found again by name
    for attr, obj in vars(source).items():
        try:
            kind = kind_of(obj)
        except TargetError:  # an op packet of several overloads: not this module's own
            continue
        if kind is not None and kind.defined_in(obj, source.__name__):
            found.append((attr, obj))
            if kind is custom_op.KIND:
                own.add(custom_op.op_name(obj))
    found.sort(key=lambda item: line_of(getattr(item[1], "_init_fn", item[1])) or 0)
    for name in custom_op.library_ops(source):
        if name not in own:
            try:
                found.append((name, custom_op.op_by_name(name, ())))
            except TargetError:  # several overloads: name one in a spec
                continue
    return found
