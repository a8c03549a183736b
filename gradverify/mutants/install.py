"""Putting a mutant in place for the length of a run, and taking it out again: backward is looked
up when the engine calls it, so a Function class's ``backward`` (or a custom op's backward
registered with ``register_autograd``) is swapped on the class (the op's definition); a target
with no backward of its own gets its inputs passed through an identity Function whose backward
changes their gradients."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from gradverify.targets import Target, kind_for
from gradverify.targets.holders import Holder


def holder(info: Target, node: Any = None) -> Holder | None:
    """Where ``info``'s own backward can be swapped, or None (it has none of its own, or one
    written in C++ at the Autograd key): its kind's answer (``Kind.backward_holder``).
    ``node``: a graph node of a call of it, through which the backward of an op registered
    by name is found."""
    return kind_for(info).backward_holder(info, node)


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
