"""The plain function kind: a Python function (or method, or ``functools.partial``) whose
gradients come from what it calls. Its keyword-only arguments are passed by name, and every
call draws the same random numbers (``module_calls.same_random_numbers``)."""
from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from gradverify.targets.introspection import adapter, file_of, location_of, params_of
from gradverify.targets.model import Capability, Target, UnnamedKind
from gradverify.targets.module_calls import RandomUse, same_random_numbers, split


def composite_lacking(calls: str) -> Mapping[Capability, str]:
    """Why a target whose gradients come from what it calls (``calls``: "what it calls")
    lacks each capability: shared by plain functions and modules."""
    return MappingProxyType({
        Capability.OWN_AUTOGRAD: f"its gradients come from {calls}: check the Functions it "
                                 "calls",
        Capability.OWN_BACKWARD: f"it has no backward of its own (its gradients come from "
                                 f"{calls}: name the Functions it calls as targets)",
        Capability.CLASS_SOURCE: "it is not an autograd.Function class",
        Capability.OWN_CTX: "it saves no tensors of its own",
        Capability.FORWARD_AD: "its forward-mode AD is that of the Functions it calls: check "
                               "those",
    })


class PlainFunctionKind(UnnamedKind):
    """``gradverify.targets.model.Kind`` of plain functions."""

    name = "function"
    plural = "plain functions (mod:fn)"
    short = "plain functions"
    listed = False
    capabilities = frozenset({Capability.KEYWORDS})
    lacking = composite_lacking("what it calls")

    @staticmethod
    def detect(obj: Any) -> bool:
        return inspect.isfunction(obj) or inspect.ismethod(obj) \
            or isinstance(obj, functools.partial)

    @staticmethod
    def introspect(obj: Any, name: str, init_args: Mapping[str, Any]) -> Target:
        return _function_target(obj, name)

    @staticmethod
    def defined_in(obj: Any, module: str) -> bool:
        return False  # every helper is a function: a plain function is a target when named

    @staticmethod
    def listing(obj: Any, name: str) -> tuple[str, list[str]]:
        return name, ["function"]


KIND = PlainFunctionKind()


def _function_target(fn: Callable[..., Any], name: str) -> Target:
    params = params_of(fn, 0)
    use = RandomUse()

    def apply(*values: Any) -> Any:
        args, kwargs = split(params, values)
        with same_random_numbers(values, use):
            return fn(*args, **kwargs)

    shown = name.split(":")[-1]
    return Target(
        function=adapter(shown, apply, getattr(fn, "__module__", "") or "", fn,
                         random_use=use),
        target=name, params=params, forward_location=location_of(fn), backward_location=None,
        source_file=file_of(fn), kind=KIND.name, capabilities=KIND.capabilities, called=shown,
        list_inputs=True)
