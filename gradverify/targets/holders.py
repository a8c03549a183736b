"""Where a target's own backward lives, so that ``--mutate`` can swap it for the length of a run:
backward is looked up when the engine calls it, so swapping it on its owner (a Function
class, a custom op's definition) is enough. Each kind finds its own (``Kind.backward_holder``);
this module is how a found one is swapped and put back."""
from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from gradverify.targets.introspection import underlying

if TYPE_CHECKING:
    from gradverify.targets.model import Target

Wrap = Callable[[Callable[..., Any]], Callable[..., Any]]
"""Makes the mutant's backward from the original one."""


class Holder:
    """Where a target's backward lives: (owner, attribute), and how the function sits there."""

    def __init__(self, owner: Any, attribute: str, descriptor: Any, own: bool, skip: int):
        self.owner, self.attribute, self.descriptor, self.own = owner, attribute, descriptor, own
        self.skip = skip
        """Leading parameters of the function that are not gradients (ctx; cls, ctx)."""

    @classmethod
    def of_class(cls, owner: type, name: str) -> Holder:
        """The holder of method ``name`` as ``owner`` (or a base) defines it."""
        descriptor = inspect.getattr_static(owner, name)
        return cls(owner, name, descriptor, name in vars(owner),
                   2 if isinstance(descriptor, classmethod) else 1)

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
        """``new`` in place of the backward for the ``with`` block, then the original."""
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
