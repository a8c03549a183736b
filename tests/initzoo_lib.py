"""Ops registered the low-level way, by name, with no ``CustomOpDef`` object for ``init`` to
find: one on a ``torch.library.Library`` held by the module (``SymInt[]`` in its schema), one
with ``torch.library.define``. ``init initzoo_lib`` must write a spec for each, with target
``ns::op`` and ``imports: [initzoo_lib]``."""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

LIB = torch.library.Library("initzoo_lib", "DEF")
LIB.define("reshape_to(Tensor x, SymInt[] shape) -> Tensor")


def _reshape_to(x: Tensor, shape: list[int]) -> Tensor:
    return x.reshape(shape).clone()


LIB.impl("reshape_to", _reshape_to, "CompositeExplicitAutograd")
torch.library.register_fake("initzoo_lib::reshape_to", lambda x, shape: x.new_empty(shape))


def _reshape_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.shape = inputs[0].shape


torch.library.register_autograd(
    "initzoo_lib::reshape_to", lambda ctx, grad: (grad.reshape(ctx.shape), None),
    setup_context=_reshape_setup, lib=LIB)

torch.library.define("initzoo_lib::softclip", "(Tensor x, float limit) -> Tensor")


@torch.library.impl("initzoo_lib::softclip", "CompositeExplicitAutograd")
def _softclip(x: Tensor, limit: float) -> Tensor:
    return limit * torch.tanh(x / limit)


torch.library.register_fake("initzoo_lib::softclip", lambda x, limit: torch.empty_like(x))


def _softclip_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.limit = inputs[1]
    ctx.save_for_backward(output)


def _softclip_backward(ctx: Any, grad: Tensor) -> tuple[Any, ...]:
    (y,) = ctx.saved_tensors
    return grad * (1 - (y / ctx.limit) ** 2), None


torch.library.register_autograd("initzoo_lib::softclip", _softclip_backward,
                                setup_context=_softclip_setup)
