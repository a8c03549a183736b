"""The registry of kinds of target: adding a kind is its module and one line here.
Code reads ``KINDS`` from this module at call time (never a copy), so the registry is one
place."""
from __future__ import annotations

from gradverify.targets import custom_op, function_class, module, plain_function, triton_op
from gradverify.targets.model import Kind

KINDS: tuple[Kind, ...] = (function_class.KIND, triton_op.KIND, custom_op.KIND,
                           plain_function.KIND, module.KIND)
"""Every kind, in the order they are tried (a Function class is also a class; a triton op
is also a custom op)."""


def named(name: str) -> Kind:
    """The registered kind called ``name`` (``Target.kind``, ``TargetName.kind``)."""
    return next(kind for kind in KINDS if kind.name == name)
