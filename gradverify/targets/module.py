"""The module kind: an ``nn.Module`` class, built from the spec's ``init_args`` (seeded) and
called through ``torch.func.functional_call`` with its parameters as differentiable inputs;
buffers are copied per call (``module_calls``)."""
from __future__ import annotations

import ast
import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from gradverify.errors import TargetError
from gradverify.targets.introspection import adapter, file_of, location_of, params_of
from gradverify.targets.model import Built, Capability, Param, Target, UnnamedKind
from gradverify.targets.module_calls import (
    MODULE_SEED,
    RandomUse,
    buffer_copy,
    build_module,
    same_random_numbers,
    split,
)
from gradverify.targets.plain_function import composite_lacking


class ModuleKind(UnnamedKind):
    """``gradverify.targets.model.Kind`` of ``nn.Module`` classes."""

    name = "module"
    plural = "torch.nn.Module classes"
    short = "nn.Module classes"
    listed = True

    @staticmethod
    def listing(obj: Any, name: str) -> tuple[str, list[str]]:
        return name, ["nn.Module"]  # no module is built to list one
    capabilities = frozenset({Capability.KEYWORDS, Capability.PARAMETERS})
    lacking = composite_lacking("what forward calls")

    @staticmethod
    def detect(obj: Any) -> bool:
        if not inspect.isclass(obj):
            return False
        import torch

        return issubclass(obj, torch.nn.Module) and obj is not torch.nn.Module

    @staticmethod
    def introspect(obj: Any, name: str, init_args: Mapping[str, Any]) -> Target:
        return _module_target(obj, name, init_args)

    @staticmethod
    def bare_call(target: Target, attribute: str | None) -> str | None:
        """The module built as gradverify builds it (seeded, from ``init_args``, in float64
        as the gradient checks run it) and called through ``functional_call`` with its
        parameters the last inputs; buffers copied per call; the same random numbers on every
        call (``module_calls``)."""
        built = target.detail(Built)
        if attribute is None or built is None or not _literal(built.init_args):
            return None
        return f'''torch.manual_seed({MODULE_SEED})  # the seed gradverify builds modules after
built = {attribute}(**{dict(built.init_args)!r}).double()  # float64, as the checks run it
PARAMETERS = [name for name, _ in built.named_parameters()]  # inputs after forward's own


def call(*values):
    """forward, with the module's parameters given as the last inputs."""
    torch.manual_seed({MODULE_SEED})  # every call draws the same random numbers (dropout)
    split = len(values) - len(PARAMETERS)
    state = {{name: b.clone() for name, b in built.named_buffers()}}  # a copy per call
    state.update(zip(PARAMETERS, values[split:]))
    return torch.func.functional_call(built, state, values[:split])
'''

    @staticmethod
    def defined_in(obj: Any, module: str) -> bool:
        return getattr(obj, "__module__", None) == module


KIND = ModuleKind()


@dataclass(frozen=True)
class ModuleParameter:
    """A module target's parameter (``weight``, ``layer.bias``): a differentiable input whose
    value is the built module's."""

    name: str


def _module_target(cls: type, name: str, init_args: Mapping[str, Any]) -> Target:
    import torch

    module = build_module(cls, name, init_args)
    forward = type(module).forward
    if forward is torch.nn.Module.forward:
        raise TargetError(f"{name} does not define forward", code="GV005", where=name)
    params = params_of(forward, 1)  # without self
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

    shown = name.split(":")[-1]
    return Target(
        function=adapter(shown, apply, cls.__module__, forward, random_use=use),
        target=name, params=params + tuple(Param(n, ModuleParameter(n)) for n in names),
        forward_location=location_of(forward), backward_location=None,
        source_file=file_of(cls), kind=KIND.name, capabilities=KIND.capabilities,
        called=f"{shown}.forward", list_inputs=True,
        details=(Built(module, names, MappingProxyType(dict(init_args))),))


def module_parameter(target: Target, name: str) -> Any:
    """The built module's value of parameter ``name`` (detached)."""
    built = target.detail(Built)
    assert built is not None, f"{target.target} is not built from init_args"
    return dict(built.instance.named_parameters())[name].detach()


def _literal(init_args: Mapping[str, Any]) -> bool:
    """Whether ``init_args`` read back from their ``repr`` (numbers, strings, lists, dicts)."""
    try:
        return ast.literal_eval(repr(dict(init_args))) == dict(init_args)
    except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
        return False
