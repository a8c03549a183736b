"""Ops made with ``torch.library.triton_op`` (Triton launches through ``wrap_triton``): custom
ops whose implementation is the user's function. They are introspected as custom ops
(``custom_op._op_target``), which points findings at that function rather than at the wrapper
torch registers; this kind gives them their own name in messages and in ``gradverify list``.
On a machine without CUDA, Triton's interpreter (``TRITON_INTERPRET=1``) runs their kernels;
what it cannot run is a note (GV025), never a failure (docs/targets.md)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gradverify import torchcompat
from gradverify.targets import custom_op
from gradverify.targets.model import Formula, Target


class TritonOpKind(custom_op.CustomOpKind):
    """``gradverify.targets.model.Kind`` of ``triton_op`` ops: a custom op's, named so."""

    name = custom_op.TRITON_OP
    plural = short = ""
    """None of its own: messages that say what gradverify verifies name it among custom ops."""
    listed = False

    @staticmethod
    def detect(obj: Any) -> bool:
        return _user_function(obj) is not None

    @staticmethod
    def introspect(obj: Any, name: str, init_args: Mapping[str, Any]) -> Target:
        return custom_op.KIND.introspect(obj, name, init_args)

    @staticmethod
    def defined_in(obj: Any, module: str) -> bool:
        return getattr(_user_function(obj), "__module__", None) == module

    @staticmethod
    def name_of(text: str) -> str | None:
        return None  # `ns::op` names a custom op; its introspection tells a triton op

    @staticmethod
    def listing(obj: Any, name: str) -> tuple[str, list[str]]:
        info = custom_op.KIND.introspect(obj, name, {})
        return info.target, ["triton op", "register_autograd" if info.detail(Formula)
                             else "no register_autograd"]


KIND = TritonOpKind()


def _user_function(obj: Any) -> Any:
    """The function ``triton_op`` made ``obj`` from, or None when it is no triton op."""
    op = custom_op.op_of(obj) if custom_op.KIND.detect(obj) else None
    if op is None:
        return None
    opdef = obj if hasattr(obj, "_init_fn") else torchcompat.custom_op_def(op._name)
    return torchcompat.triton_op_function(opdef)
