"""Putting a mutant in place for the length of a run, and taking it out again: backward is looked
up when the engine calls it, so a Function class's ``backward`` (or a custom op's backward
registered with ``register_autograd``) is swapped on the class (the op's definition); a target
with no backward of its own gets its inputs passed through an identity Function whose backward
changes their gradients."""
from __future__ import annotations

import contextlib
import dataclasses
import inspect
from collections.abc import Callable, Iterator
from typing import Any

from gradverify import torchcompat
from gradverify.targets import Capability, Schema, Target, registered_formula
from gradverify.targets.introspection import underlying

Wrap = Callable[[Callable[..., Any]], Callable[..., Any]]
"""Makes the mutant's backward from the original one."""


class Holder:
    """Where a target's backward lives: (owner, attribute), and how the function sits there."""

    def __init__(self, owner: Any, attribute: str, descriptor: Any, own: bool, skip: int):
        self.owner, self.attribute, self.descriptor, self.own = owner, attribute, descriptor, own
        self.skip = skip
        """Leading parameters of the function that are not gradients (ctx; cls, ctx)."""

    @property
    def function(self) -> Callable[..., Any]:
        found = underlying(self.descriptor)
        assert found is not None
        return found

    @contextlib.contextmanager
    def installed(self, info: Target, wrap: Wrap) -> Iterator[Target]:
        """``info`` with its backward replaced by ``wrap(backward)`` for the ``with`` block."""
        with self.replaced(wrap(self.function)):
            yield info

    @contextlib.contextmanager
    def replaced(self, new: Callable[..., Any]) -> Iterator[None]:
        kind = type(self.descriptor)
        setattr(self.owner, self.attribute,
                kind(new) if kind in (staticmethod, classmethod) else new)
        try:
            yield
        finally:
            if self.own:
                setattr(self.owner, self.attribute, self.descriptor)
            else:
                delattr(self.owner, self.attribute)


def holder(info: Target, node: Any = None) -> Holder | None:
    """Where ``info``'s own backward can be swapped, or None (it has none of its own, or one
    written in C++ at the Autograd key). ``node``: a graph node of a call of it, through which
    the backward of an op registered by name is found."""
    if info.has(Capability.CLASS_SOURCE):
        cls = info.function
        for name in ("backward", "vjp"):
            for klass in cls.__mro__:
                if klass in torchcompat.function_machinery():
                    break
                if name in vars(klass):
                    descriptor = inspect.getattr_static(cls, name)
                    return Holder(cls, name, descriptor, name in vars(cls),
                                   2 if isinstance(descriptor, classmethod) else 1)
        return None
    schema = info.detail(Schema)
    if info.has(Capability.OWN_BACKWARD) and schema is not None:
        owner = torchcompat.custom_op_def(schema.name)
        generated = registered_formula(node) if node is not None else None
        if owner is None and generated is not None:
            owner = torchcompat.registered_autograd(generated)
        backward = getattr(owner, "_backward_fn", None)
        if backward is not None:
            return Holder(owner, "_backward_fn", backward, True, 1)
    return None


def tapped(info: Target, position: int, change: Callable[[Any], Any]) -> Target:
    """``info`` whose input at ``position`` passes through an identity Function whose backward
    returns ``change(gradient)``: a gradient changed for a target without its own backward."""
    import torch

    class Tap(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            return x.view_as(x)

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
            return change(grad)

    original = info.function

    def apply(*values: Any) -> Any:
        value = values[position] if position < len(values) else None
        if isinstance(value, torch.Tensor) and value.requires_grad and torch.is_grad_enabled():
            values = (*values[:position], Tap.apply(value), *values[position + 1:])
        return original.apply(*values)

    members = {k: v for k, v in vars(original).items() if not k.startswith("__")}
    members.update(apply=staticmethod(apply), __qualname__=original.__qualname__,
                   __module__=original.__module__)
    return dataclasses.replace(info, function=type(original.__name__, (), members))
