"""The autograd.Function class kind: a ``torch.autograd.Function`` subclass with static
forward and backward (ctx style or setup_context style)."""
from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from gradverify import torchcompat
from gradverify.errors import TargetError
from gradverify.targets.holders import Holder
from gradverify.targets.introspection import (
    SOURCE_ERRORS,
    location_of,
    params_of,
    underlying,
    unwrap,
)
from gradverify.targets.load import normalise
from gradverify.targets.model import Capability, Formula, Target, UnnamedKind

if TYPE_CHECKING:
    from torch.autograd import Function

CAPABILITIES = frozenset({Capability.OWN_AUTOGRAD, Capability.OWN_BACKWARD,
                          Capability.CLASS_SOURCE, Capability.OWN_CTX, Capability.FORWARD_AD})


class FunctionClassKind(UnnamedKind):
    """``gradverify.targets.model.Kind`` of autograd.Function classes."""

    name = "autograd.Function"
    plural = "torch.autograd.Function classes"
    short = "autograd.Function classes"
    listed = True
    capabilities = CAPABILITIES
    lacking: Mapping[Capability, str] = MappingProxyType({})

    @staticmethod
    def listing(obj: Any, name: str) -> tuple[str, list[str]]:
        info = class_target(obj, name)
        formula = info.need(Formula)
        traits = ["forward(ctx, ...)" if formula.style == "ctx" else "setup_context"]
        if formula.once_differentiable:
            traits.append("backward @once_differentiable")
        if formula.has_jvp:
            traits.append("jvp")
        if info.vmap:
            traits.append("vmap rule" if info.vmap == "staticmethod" else "generate_vmap_rule")
        return info.target, traits

    @staticmethod
    def detect(obj: Any) -> bool:
        return is_function_class(obj)

    @staticmethod
    def introspect(obj: Any, name: str, init_args: Mapping[str, Any]) -> Target:
        return class_target(obj, name)

    @staticmethod
    def defined_in(obj: Any, module: str) -> bool:
        return getattr(obj, "__module__", None) == module

    @staticmethod
    def backward_holder(target: Target, node: Any) -> Holder | None:
        """The class (or the base below torch's) that defines ``backward`` (else ``vjp``)."""
        cls = target.function
        for name in ("backward", "vjp"):
            for klass in cls.__mro__:
                if klass in torchcompat.function_machinery():
                    break
                if name in vars(klass):
                    return Holder.of_class(cls, name)
        return None

    @staticmethod
    def bare_call(target: Target, attribute: str | None) -> str | None:
        return None if attribute is None else f"call = {attribute}.apply\n"


KIND = FunctionClassKind()


def is_function_class(obj: Any) -> bool:
    """A ``torch.autograd.Function`` subclass that is not torch's own machinery."""
    from torch.autograd import Function


    return inspect.isclass(obj) and issubclass(obj, Function) \
        and obj not in torchcompat.function_machinery()


def class_target(obj: Any, target: str | None = None) -> Target:
    """A Function class's ``Target``. (Every kind of target: ``gradverify.targets.introspect``.)"""
    from torch.autograd import Function

    name = target or normalise(getattr(obj, "__qualname__", repr(obj)), obj)
    cls: type[Function] = obj
    setup_context = _overrides(cls, "setup_context", Function)
    forward = inspect.getattr_static(cls, "forward", None)
    forward_fn = underlying(forward)
    if forward_fn is None or not _overrides(cls, "forward", Function):
        raise TargetError(f"{name} does not define forward", code="GV005", where=name)
    if not _overrides(cls, "backward", Function) and not _overrides(cls, "vjp", Function):
        raise TargetError(f"{name} does not define backward", code="GV005", where=name)
    skip = (0 if setup_context else 1) + (1 if isinstance(forward, classmethod) else 0)
    params = params_of(forward_fn, skip)
    backward = inspect.getattr_static(cls, "backward", None) or inspect.getattr_static(cls, "vjp")
    backward_fn = underlying(backward)
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
    except SOURCE_ERRORS:
        source_file = None
    try:
        source = inspect.getsource(cls)
    except SOURCE_ERRORS:
        source = ""
    formula = Formula(
        style="setup_context" if setup_context else "ctx", once_differentiable=once,
        has_jvp=_overrides(cls, "jvp", Function) or _overrides(cls, "forward_ad", Function),
        backward_arity=arity, uses_mark_dirty=_names_mark_dirty(source))
    return Target(
        function=cls, target=name, params=params, forward_location=location_of(forward_fn),
        backward_location=location_of(unwrap(backward_fn)), source_file=source_file,
        kind=KIND.name, capabilities=CAPABILITIES, called=f"{cls.__qualname__}.forward",
        vmap=vmap, details=(formula,))


def _overrides(cls: type, name: str, base: type) -> bool:
    machinery = torchcompat.function_machinery()
    for klass in cls.__mro__:
        if klass is base or klass in machinery:
            return False
        if name in vars(klass):
            return True
    return False


def _is_once_differentiable(fn: Any) -> bool:
    """torch's ``once_differentiable`` wraps with ``functools.wraps``: every wrapper it makes
    runs one code object, found by wrapping a function of our own."""
    from torch.autograd.function import once_differentiable

    wrapper = once_differentiable(lambda ctx, *grads: None).__code__
    while fn is not None and hasattr(fn, "__wrapped__"):
        if getattr(fn, "__code__", None) is wrapper:
            return True
        fn = fn.__wrapped__
    return False


def _backward_arity(fn: Any, is_classmethod: bool) -> int | None:
    fn = unwrap(fn)
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    if any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in params):
        return None
    skip = 2 if is_classmethod else 1  # (cls,) ctx
    return sum(1 for p in params[skip:] if p.kind in (inspect.Parameter.POSITIONAL_ONLY,
                                                      inspect.Parameter.POSITIONAL_OR_KEYWORD))


def _names_mark_dirty(source: str) -> bool:
    """Whether the class's code reads ``mark_dirty`` (``ctx.mark_dirty(x)``): in its code, not
    in a comment or a docstring that mentions it; the text itself where it does not parse."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return "mark_dirty" in source
    return any(isinstance(node, ast.Attribute) and node.attr == "mark_dirty"
               for node in ast.walk(tree))
