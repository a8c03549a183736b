"""A custom op (specs/customop.yaml, torch >= 2.4) with ``register_autograd``, ``register_fake``
and, from torch 2.6, ``register_vmap``. Importing this module registers the op
``gradverify_examples::scaled_sin``.

No ``from __future__ import annotations`` here: torch 2.4's ``infer_schema`` reads the
annotations as objects, and refuses them as strings."""
from typing import Any

import torch
from torch import Tensor


@torch.library.custom_op("gradverify_examples::scaled_sin", mutates_args=())
def scaled_sin(x: Tensor, alpha: float) -> Tensor:
    """alpha * sin(x), computed outside autograd (as a kernel in C++ or Triton would be)."""
    return alpha * torch.sin(x)


@scaled_sin.register_fake
def _(x: Tensor, alpha: float) -> Tensor:
    return torch.empty_like(x)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    x, alpha = inputs
    ctx.save_for_backward(x)
    ctx.alpha = alpha


def _backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, None]:
    (x,) = ctx.saved_tensors
    grad_x = grad * ctx.alpha * torch.cos(x) if ctx.needs_input_grad[0] else None
    return grad_x, None


scaled_sin.register_autograd(_backward, setup_context=_setup_context)


def _vmap(info: Any, in_dims: tuple[Any, ...], x: Tensor, alpha: float) -> tuple[Tensor, int]:
    x_dim = in_dims[0]
    return scaled_sin(x, alpha), 0 if x_dim is None else x_dim


if hasattr(scaled_sin, "register_vmap"):  # torch >= 2.6
    scaled_sin.register_vmap(_vmap)
