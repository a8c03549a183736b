"""The custom op kind: a ``torch.library.custom_op`` (``CustomOpDef``), an op's name
``ns::op[.overload]`` (or ``torch.ops.ns.op``), an ``OpOverload`` or a single-overload packet;
and the ops a module registers by name with ``torch.library``.

Its adapter's ``backward(ctx, *grads)``, where the op's autograd was registered with
``register_autograd``, is the registered backward called the way the engine calls it, so the
checks of backward's contract apply to ops as they do to Functions. Imports torch lazily."""
from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from gradverify import torchcompat
from gradverify.errors import TargetError
from gradverify.targets import op_calls
from gradverify.targets.holders import Holder
from gradverify.targets.introspection import SOURCE_ERRORS, adapter, file_of, location_of
from gradverify.targets.load import import_module
from gradverify.targets.model import MISSING, Capability, Formula, Param, Schema, Target

GENERATED = "GeneratedBackwardFor_"
"""torch's name for the autograd.Function it builds around a registered backward."""

SCHEMA_CAPABILITIES = frozenset({Capability.OWN_AUTOGRAD, Capability.SCHEMA})


OP_NAME_RE = re.compile(r"^([A-Za-z_]\w*)::([A-Za-z_]\w*)(?:\.([A-Za-z_]\w*))?\Z")
"""An operator's name, ``namespace::op`` or ``namespace::op.overload``."""
PYTHON_SPELLING_RE = re.compile(r"torch\.ops\.(\w+)[.:](\w+(?:\.\w+)?)")
"""An op as Python spells it: ``torch.ops.ns.op[.overload]`` (or ``torch.ops.ns:op``)."""


class CustomOpKind:
    """``gradverify.targets.model.Kind`` of custom ops."""

    name = "custom op"
    plural = "custom ops (torch.library.custom_op, or 'namespace::op')"
    short = "custom ops"
    qualified: Mapping[Capability, str] = MappingProxyType({
        Capability.OWN_BACKWARD: "with register_autograd",
        Capability.OWN_CTX: "with register_autograd"})
    listed = True
    capabilities = SCHEMA_CAPABILITIES | {Capability.OWN_BACKWARD, Capability.OWN_CTX}
    lacking: Mapping[Capability, str] = MappingProxyType({
        Capability.OWN_BACKWARD: "it has no backward of its own (none registered with "
                                 "register_autograd)",
        Capability.CLASS_SOURCE: "it is not an autograd.Function class",
        Capability.OWN_CTX: "it has no backward of its own (none registered with "
                            "register_autograd), so nothing saves tensors for one",
        Capability.FORWARD_AD: "custom ops have no forward-mode formula, and torch.func.jvp "
                               "returns a zero tangent through one without saying so",
    })

    @staticmethod
    def detect(obj: Any) -> bool:
        return op_of(obj) is not None

    @staticmethod
    def introspect(obj: Any, name: str, init_args: Mapping[str, Any]) -> Target:
        return _op_target(obj, op_of(obj), name)

    @staticmethod
    def defined_in(obj: Any, module: str) -> bool:
        return module in (getattr(obj, "__module__", None),
                          getattr(getattr(obj, "_init_fn", None), "__module__", None))

    @staticmethod
    def name_of(text: str) -> str | None:
        spelt = PYTHON_SPELLING_RE.fullmatch(text)
        if spelt:
            text = f"{spelt.group(1)}::{spelt.group(2)}"
        return text if OP_NAME_RE.match(text) else None

    @staticmethod
    def by_name(text: str, imports: tuple[str, ...]) -> Target:
        return KIND.introspect(op_by_name(text, imports), text, {})

    @staticmethod
    def listing(obj: Any, name: str) -> tuple[str, list[str]]:
        info = KIND.introspect(obj, name, {})
        traits = ["custom op", "register_autograd" if info.detail(Formula)
                  else "no register_autograd"]
        if info.vmap:
            traits.append("register_vmap")
        return info.target, traits

    @staticmethod
    def named(obj: Any) -> str | None:
        try:
            is_op = op_of(obj) is not None
        except TargetError:  # several overloads: not one op
            return None
        return op_name(obj) if is_op else None

    @staticmethod
    def same_name(a: str, b: str) -> bool:
        """Equal, or one without an overload (``ns::op`` for ``ns::op.default``)."""
        return a == b or ((a.count(".") == 0 or b.count(".") == 0)
                          and a.split(".")[0] == b.split(".")[0])

    @staticmethod
    def backward_holder(target: Target, node: Any) -> Holder | None:
        """The op's definition, where ``register_autograd`` put its backward (found through
        ``node`` for an op registered by name)."""
        schema = target.detail(Schema)
        if not target.has(Capability.OWN_BACKWARD) or schema is None:
            return None
        owner = torchcompat.custom_op_def(schema.name)
        generated = registered_formula(node) if node is not None else None
        if owner is None and generated is not None:
            owner = torchcompat.registered_autograd(generated)
        backward = getattr(owner, "_backward_fn", None)
        return None if backward is None else Holder(owner, "_backward_fn", backward, True, 1)

    @staticmethod
    def bare_call(target: Target, attribute: str | None) -> str | None:
        if attribute is not None:
            return f"call = {attribute}\n"
        namespace, _, op = target.target.partition("::")
        return f"call = torch.ops.{namespace}.{op}\n"

    @staticmethod
    def no_raw_backward(target: Target, node: Any) -> str | None:
        """An autograd kernel written by hand at the Autograd key (not ``register_autograd``)
        is no formula of its own to call; the engine-based checks still see its gradients."""
        if node is None or registered_formula(node) is not None:
            return None
        return ("not for this custom op: its autograd kernel is not a formula registered with "
                "register_autograd, so there is no backward of its own to call")


KIND = CustomOpKind()
TRITON_OP = "triton op"
"""The kind name of an op made with ``torch.library.triton_op`` (``targets/triton_op.py``),
which this module introspects: the op is a custom op whose implementation is the user's
function of Triton launches."""


def op_name(obj: Any) -> str:
    """``ns::op`` of an op object (its ``repr`` is not a name)."""
    name = getattr(obj, "_qualname", None) or getattr(obj, "_qualified_op_name", None) \
        or getattr(obj, "_name", None)
    return str(name) if name else repr(obj)


def op_of(obj: Any) -> Any:
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
        return op_of(packet)
    if overload not in packet.overloads():
        raise TargetError(f"{namespace}::{name} has no overload {overload!r} (it has "
                          f"{', '.join(packet.overloads())})", code="GV004", where=text)
    return getattr(packet, overload)


def _op_target(obj: Any, op: Any, name: str) -> Target:
    if not torchcompat.custom_ops_supported():
        needed = torchcompat.CUSTOM_OPS_TORCH
        raise TargetError(f"{name} is a custom op; gradverify checks custom ops with torch's "
                          f"opcheck, which needs {torchcompat.too_old(needed)}: upgrade torch, "
                          "or skip this spec on older torch with requires_torch: "
                          f"\"{'.'.join(map(str, needed))}\"", code="GV017", where=name)

    schema = op._schema
    params = tuple(Param(a.name, a.default_value if a.has_default_value() else MISSING,
                         str(a.type)) for a in schema.arguments)
    opdef_type = torchcompat.custom_op_def_type()
    opdef = obj if opdef_type is not None and isinstance(obj, opdef_type) \
        else torchcompat.custom_op_def(op._name)
    backward_fn = getattr(opdef, "_backward_fn", None)
    registered = backward_fn is not None or (
        opdef is None and torchcompat.has_dispatch_kernel(op._name, "Autograd"))

    def apply(*values: Any) -> Any:
        args, kwargs = op_calls.op_arguments(op, values)
        return op(*args, **kwargs)

    user = torchcompat.triton_op_function(opdef)  # a triton_op: torch's wrapper around it
    impl = user or getattr(opdef, "_init_fn", None)
    shown = name if "::" in name else op._name
    declared = Schema(op, mutates=tuple(a.name for a in schema.arguments
                                        if a.alias_info is not None and a.alias_info.is_write))
    return Target(
        function=adapter(shown, apply, getattr(impl, "__module__", "torch.ops"), impl,
                     _registered_backward if registered else None),
        target=name, params=params,
        forward_location=location_of(impl) if impl else None,
        backward_location=location_of(backward_fn) if backward_fn else None,
        source_file=file_of(impl), kind=TRITON_OP if user else KIND.name, called=shown,
        capabilities=SCHEMA_CAPABILITIES | ({Capability.OWN_BACKWARD, Capability.OWN_CTX}
                                            if registered else set()),
        vmap="register_vmap" if _has_vmap(op, opdef) else None,
        details=(declared, Formula("register_autograd")) if registered else (declared,))


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
    except SOURCE_ERRORS:
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
