"""Targets that are not ``torch.autograd.Function`` classes: custom ops (a ``CustomOpDef``, an
op's name ``ns::op``, an ``OpOverload``/``OpOverloadPacket``), plain functions and
``nn.Module`` classes (DESIGN §2b).

Each becomes a ``FunctionInfo`` like a Function class's, whose ``cls`` is an adapter with the
one method every check calls, ``apply(*values)``: the checks see every kind through one door.
An op's adapter also has ``backward(ctx, *grads)`` when the op's autograd was registered with
``register_autograd``: the registered backward, called the way the engine calls it, so the
checks of backward's contract apply to ops as they do to Functions. Imports torch lazily.
"""
from __future__ import annotations

import ast
import functools
import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gradverify import opcalls, torchcompat
from gradverify.errors import TargetError
from gradverify.modulecalls import (
    RandomUse,
    buffer_copy,
    build_module,
    same_random_numbers,
    split,
)
from gradverify.target import (
    _MISSING,
    FunctionInfo,
    Param,
    _params,
    import_module,
    is_function_class,
    location_of,
    normalise,
    resolve_named,
)
from gradverify.target import introspect as introspect_function_class

FUNCTION_CLASS = "autograd.Function"
CUSTOM_OP = "custom op"
FUNCTION = "function"
MODULE = "module"
KINDS = (FUNCTION_CLASS, CUSTOM_OP, FUNCTION, MODULE)

GENERATED = "GeneratedBackwardFor_"
"""torch's name for the autograd.Function it builds around a registered backward."""



def resolve(text: str, imports: tuple[str, ...] = (),
            init_args: Mapping[str, Any] | None = None) -> FunctionInfo:
    """Import and introspect a target of any kind; TargetError when gradverify cannot verify
    it. An op's name (``ns::op``, or ``torch.ops.ns:op``) is looked up after importing
    ``imports``; a module class is built from ``init_args``."""
    from gradverify.spec.model import canonical_target, is_op_name

    text = canonical_target(text)
    if is_op_name(text):
        return introspect_other(op_by_name(text, imports), text, {})
    obj, name = resolve_named(text)
    return introspect(obj, name, init_args)


def introspect(obj: Any, target: str | None = None,
               init_args: Mapping[str, Any] | None = None) -> FunctionInfo:
    """The ``FunctionInfo`` of a target object of any kind."""
    name = target or normalise(getattr(obj, "__qualname__", None) or op_name(obj), obj)
    if is_function_class(obj):
        return introspect_function_class(obj, name)
    return introspect_other(obj, name, init_args or {})


def op_name(obj: Any) -> str:
    """``ns::op`` of an op object (its ``repr`` is not a name)."""
    name = getattr(obj, "_qualname", None) or getattr(obj, "_qualified_op_name", None) \
        or getattr(obj, "_name", None)
    return str(name) if name else repr(obj)


def kind_of_object(obj: Any) -> str | None:
    """The kind of a target object, or None when gradverify cannot verify it."""
    if is_function_class(obj):
        return FUNCTION_CLASS
    if _op_of(obj) is not None:
        return CUSTOM_OP
    if inspect.isclass(obj):
        import torch

        return MODULE if issubclass(obj, torch.nn.Module) and obj is not torch.nn.Module \
            else None
    if inspect.isfunction(obj) or inspect.ismethod(obj) or isinstance(obj, functools.partial):
        return FUNCTION
    return None


def _op_of(obj: Any) -> Any:
    """The ``OpOverload`` of a ``CustomOpDef``, ``OpOverload`` or single-overload packet."""

    opdef_type = torchcompat.custom_op_def_type()
    overload_type, packet_type = torchcompat.op_overload_types()
    if opdef_type is not None and isinstance(obj, opdef_type):
        return obj._opoverload
    if isinstance(obj, overload_type):
        return obj
    if isinstance(obj, packet_type):
        overloads = obj.overloads()
        if len(overloads) != 1:
            raise TargetError(f"{obj._qualified_op_name} has several overloads "
                              f"({', '.join(overloads)}); name one: "
                              f"'{obj._qualified_op_name}.{overloads[0]}'", code="GV004")
        return getattr(obj, overloads[0])
    return None


def op_by_name(text: str, imports: tuple[str, ...]) -> Any:
    """``ns::op[.overload]`` to its ``OpOverload``, after importing ``imports``."""
    import torch

    from gradverify.spec.model import OP_NAME_RE

    for name in imports:
        import_module(name)
    match = OP_NAME_RE.match(text)
    assert match is not None
    namespace, name, overload = match.groups()
    hint = (f"; the spec's `imports:` ({', '.join(imports)}) did not register it" if imports
            else "; name the modules whose import registers it under the spec's `imports:`")
    try:
        packet = getattr(getattr(torch.ops, namespace), name)
    except (AttributeError, RuntimeError):
        raise TargetError(f"no operator {namespace}::{name}{hint}", code="GV004",
                          where=text) from None
    if overload is None:
        return _op_of(packet)
    if overload not in packet.overloads():
        raise TargetError(f"{namespace}::{name} has no overload {overload!r} (it has "
                          f"{', '.join(packet.overloads())})", code="GV004", where=text)
    return getattr(packet, overload)


@dataclass(frozen=True)
class ModuleParameter:
    """A module target's parameter (``weight``, ``layer.bias``): a differentiable input whose
    value is the built module's."""

    name: str


def introspect_other(obj: Any, name: str, init_args: Mapping[str, Any]) -> FunctionInfo:
    """A ``FunctionInfo`` for a custom op, a plain function or an ``nn.Module`` class."""
    kind = kind_of_object(obj)
    if kind == CUSTOM_OP:
        return _op_info(obj, _op_of(obj), name)
    if kind == MODULE:
        return _module_info(obj, name, init_args)
    if kind == FUNCTION:
        return _function_info(obj, name)
    what = f"class {obj.__qualname__}" if inspect.isclass(obj) else type(obj).__name__
    article = "an" if what[:1].lower() in "aeiou" else "a"
    raise TargetError(f"{name} is {article} {what}; gradverify verifies torch.autograd.Function "
                      "classes, custom ops (torch.library.custom_op, or 'namespace::op'), "
                      "plain functions and torch.nn.Module classes", code="GV005", where=name)


def _adapter(name: str, apply: Callable[..., Any], module: str, source: Any,
             backward: Callable[..., Any] | None = None,
             random_use: RandomUse | None = None) -> type:
    """``source``: the user's function behind the target (what ``init`` reads as forward);
    ``random_use``: whether its calls draw random numbers (``draws_random``). Outputs in
    lists and tuples (an op's ``Tensor[]``, a function returning a list) come out flat, one
    output each, as autograd and torch's gradcheck see them."""

    def flat_apply(*values: Any) -> Any:
        return opcalls.flat_outputs(apply(*values))

    members: dict[str, Any] = {"apply": staticmethod(flat_apply), "__module__": module,
                               "__qualname__": name, "forward": staticmethod(source),
                               "random_use": random_use}
    if backward is not None:
        members["backward"] = staticmethod(backward)
    return type(name.rsplit(".", 1)[-1].replace(":", "_"), (), members)


# ----------------------------------------------------------------------------- custom ops


def _op_info(obj: Any, op: Any, name: str) -> FunctionInfo:
    if not torchcompat.custom_ops_supported():
        needed = torchcompat.CUSTOM_OPS_TORCH
        raise TargetError(f"{name} is a custom op; gradverify checks custom ops with torch's "
                          f"opcheck, which needs {torchcompat.too_old(needed)}: upgrade torch, "
                          "or skip this spec on older torch with requires_torch: "
                          f"\"{'.'.join(map(str, needed))}\"", code="GV017", where=name)

    schema = op._schema
    params = tuple(Param(a.name, a.default_value if a.has_default_value() else _MISSING,
                         str(a.type)) for a in schema.arguments)
    opdef_type = torchcompat.custom_op_def_type()
    opdef = obj if opdef_type is not None and isinstance(obj, opdef_type) \
        else torchcompat.custom_op_def(op._name)
    backward_fn = getattr(opdef, "_backward_fn", None)
    registered = backward_fn is not None or (
        opdef is None and torchcompat.has_dispatch_kernel(op._name, "Autograd"))

    def apply(*values: Any) -> Any:
        args, kwargs = opcalls.op_arguments(op, values)
        return op(*args, **kwargs)

    impl = getattr(opdef, "_init_fn", None)
    shown = name if "::" in name else op._name
    return FunctionInfo(
        cls=_adapter(shown, apply, getattr(impl, "__module__", "torch.ops"), impl,
                     _registered_backward if registered else None),
        target=name, style="register_autograd" if registered else "none", params=params,
        once_differentiable=False, has_jvp=False,
        vmap="register_vmap" if _has_vmap(op, opdef) else None,
        forward_location=location_of(impl) if impl else None,
        backward_location=location_of(backward_fn) if backward_fn else None,
        backward_arity=None, uses_mark_dirty=False, source_file=_file_of(impl),
        kind=CUSTOM_OP, op=op,
        mutates=tuple(a.name for a in schema.arguments
                      if a.alias_info is not None and a.alias_info.is_write))


def registered_formula(ctx: Any) -> Any:
    """The autograd.Function torch generated around an op's ``register_autograd`` formula that
    ``ctx`` (a graph node of a Python Function) belongs to, or None."""
    forward_cls = getattr(ctx, "_forward_cls", None)
    return forward_cls if forward_cls is not None \
        and forward_cls.__name__.startswith(GENERATED) else None


def _registered_backward(ctx: Any, *grads: Any) -> tuple[Any, ...]:
    """The backward registered with ``register_autograd``, called as the engine calls it (with
    ``ctx.needs_input_grad`` for the op's own arguments); one gradient per op argument."""
    forward_cls = registered_formula(ctx)
    if forward_cls is None:
        raise TypeError("the op's outputs do not come from its registered autograd formula")
    result = forward_cls.backward(ctx, *grads)
    return tuple(result[:-1])  # the last is for torch's own metadata argument


def _has_vmap(op: Any, opdef: Any) -> bool:

    if opdef is not None:
        return getattr(opdef, "_vmap_fn", None) is not None
    return torchcompat.has_dispatch_kernel(op._name, "FuncTorchBatched")


def _file_of(fn: Any) -> str | None:
    try:
        return inspect.getsourcefile(fn) if fn is not None else None
    except (OSError, TypeError):
        return None


# ----------------------------------------------------------------------------- functions


def _function_info(fn: Callable[..., Any], name: str) -> FunctionInfo:
    params = _params(fn, 0)
    use = RandomUse()

    def apply(*values: Any) -> Any:
        args, kwargs = split(params, values)
        with same_random_numbers(values, use):
            return fn(*args, **kwargs)

    return FunctionInfo(
        cls=_adapter(name.split(":")[-1], apply, getattr(fn, "__module__", "") or "", fn,
                     random_use=use),
        target=name, style="none", params=params, once_differentiable=False,
        has_jvp=False, vmap=None, forward_location=location_of(fn), backward_location=None,
        backward_arity=None, uses_mark_dirty=False, source_file=_file_of(fn), kind=FUNCTION,
        list_inputs=True)


# ----------------------------------------------------------------------------- modules


def _module_info(cls: type, name: str, init_args: Mapping[str, Any]) -> FunctionInfo:
    import torch

    module = build_module(cls, name, init_args)
    forward = type(module).forward
    if forward is torch.nn.Module.forward:
        raise TargetError(f"{name} does not define forward", code="GV005", where=name)
    params = _params(forward, 1)  # without self
    names = tuple(n for n, _ in module.named_parameters())
    clash = set(names) & {p.name for p in params}
    if clash:
        raise TargetError(f"{name}: forward's argument {sorted(clash)[0]!r} has the name of a "
                          "parameter of the module", code="GV005", where=name)
    buffers = dict(module.named_buffers())
    count = len(names)
    use = RandomUse()

    def apply(*values: Any) -> Any:
        from torch.func import functional_call

        given = dict(zip(names, values[len(values) - count:]))
        like = next((v for v in (*given.values(), *values) if isinstance(v, torch.Tensor)
                     and v.is_floating_point()), None)
        state = {**{k: buffer_copy(b, like) for k, b in buffers.items()}, **given}
        args, kwargs = split(params, values[: len(values) - count])
        with same_random_numbers(values, use):
            return functional_call(module, state, args, kwargs)

    return FunctionInfo(
        cls=_adapter(name.split(":")[-1], apply, cls.__module__, forward, random_use=use),
        target=name,
        style="none",
        params=params + tuple(Param(n, ModuleParameter(n)) for n in names),
        once_differentiable=False, has_jvp=False, vmap=None,
        forward_location=location_of(forward), backward_location=None, backward_arity=None,
        uses_mark_dirty=False, source_file=_file_of(cls), kind=MODULE, module=module,
        parameters=names, list_inputs=True)


def draws_random(info: FunctionInfo) -> bool:
    """Whether the calls of a function or module target so far drew random numbers."""
    use = getattr(info.cls, "random_use", None)
    return bool(use is not None and use.drew)


def module_parameter(info: FunctionInfo, name: str) -> Any:
    """The built module's value of parameter ``name`` (detached)."""
    return dict(info.module.named_parameters())[name].detach()


def targets_in(module: Any) -> list[tuple[str, Any]]:
    """(attribute name, object) of what a Python module defines that gradverify verifies, in
    source order: Function classes, custom ops and ``nn.Module`` classes (not plain
    functions: every helper is one); then the ops it registers by name with ``torch.library``
    (``library_ops``), as (``ns::op``, the op)."""
    from gradverify.target import _line_of

    found = []
    own = set()  # the ops found by object: not found again by name
    for attr, obj in vars(module).items():
        try:
            kind = kind_of_object(obj) if not inspect.isfunction(obj) else None
        except TargetError:  # an op packet of several overloads: not this module's own
            continue
        defined_here = getattr(obj, "__module__", None) == module.__name__ or (
            kind == CUSTOM_OP and getattr(getattr(obj, "_init_fn", None), "__module__", None)
            == module.__name__)
        if kind in (FUNCTION_CLASS, CUSTOM_OP, MODULE) and defined_here \
                and (kind != FUNCTION_CLASS or is_function_class(obj)):
            found.append((attr, obj))
            if kind == CUSTOM_OP:
                own.add(op_name(obj))
    found.sort(key=lambda item: _line_of(getattr(item[1], "_init_fn", item[1])) or 0)
    for name in library_ops(module):
        if name not in own:
            try:
                found.append((name, op_by_name(name, ())))
            except TargetError:  # several overloads: name one in a spec
                continue
    return found


DEFINED_OP = re.compile(r"^(\w+)::(\w+)")
"""The name ``torch.library.define("ns::op", ...)`` gives its op."""


def library_ops(module: Any) -> list[str]:
    """``ns::op`` of every op a module defines through ``torch.library`` without a
    ``CustomOpDef`` object: those of the ``torch.library.Library`` objects among its globals,
    then those its source names in ``torch.library.define("ns::op", ...)``."""
    import torch

    names: list[str] = []
    for value in vars(module).values():
        if isinstance(value, torch.library.Library):
            names += sorted(getattr(value, "_op_defs", ()))
    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError, SyntaxError):
        tree = None
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Call) and _called(node) == "define" and node.args \
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            match = DEFINED_OP.match(node.args[0].value)
            if match:
                names.append(f"{match.group(1)}::{match.group(2)}")
    return list(dict.fromkeys(names))


def _called(node: ast.Call) -> str:
    func: Any = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
