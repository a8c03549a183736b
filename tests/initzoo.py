"""Correct custom ops whose arguments ``gradverify init`` must read from the schema's types
(``Tensor[]``, ``float[]``, ``int[]``, ``int``, ``str``, ``Tensor?``) or find by probing (a
weight that broadcasts, a 0-dim tensor): ``init initzoo`` must write a spec for each that
``check`` passes. Imported once per process (ops are registered globally), so each op has its
own name here."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor


@torch.library.custom_op("initzoo::weighted_sum", mutates_args=())
def weighted_sum(xs: Sequence[Tensor], weights: Sequence[float]) -> Tensor:
    out = torch.zeros_like(xs[0])
    for x, w in zip(xs, weights):
        out = out + w * x
    return out


weighted_sum.register_fake(lambda xs, weights: torch.empty_like(xs[0]))
weighted_sum.register_autograd(
    lambda ctx, grad: ([grad * w for w in ctx.weights], None),
    setup_context=lambda ctx, inputs, output: setattr(ctx, "weights", list(inputs[1])))


@torch.library.custom_op("initzoo::sum_dims", mutates_args=())
def sum_dims(x: Tensor, dims: Sequence[int], keepdim: bool) -> Tensor:
    return x.sum(dim=list(dims), keepdim=keepdim)


@sum_dims.register_fake
def _(x: Tensor, dims: Sequence[int], keepdim: bool) -> Tensor:
    return x.sum(dim=list(dims), keepdim=keepdim)


def _sum_dims_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    x, dims, keepdim = inputs
    ctx.shape, ctx.dims, ctx.keepdim = x.shape, [d % x.dim() for d in dims], keepdim


def _sum_dims_backward(ctx: Any, grad: Tensor) -> tuple[Any, ...]:
    if not ctx.keepdim:
        for d in sorted(ctx.dims):
            grad = grad.unsqueeze(d)
    return grad.expand(ctx.shape).clone(), None, None


sum_dims.register_autograd(_sum_dims_backward, setup_context=_sum_dims_setup)


@torch.library.custom_op("initzoo::rms_norm", mutates_args=())
def rms_norm(x: Tensor, weight: Tensor, *, eps: float = 1e-6) -> Tensor:
    """Only a weight of shape [D] (or [N, D]) broadcasts: init's first guess is [K, D]."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


rms_norm.register_fake(lambda x, weight, *, eps=1e-6: torch.empty_like(x))


def _rms_setup(ctx: Any, inputs: tuple[Any, ...], keyword_only_inputs: dict[str, Any],
               output: Any) -> None:
    ctx.eps = keyword_only_inputs["eps"]
    ctx.save_for_backward(*inputs)


def _rms_backward(ctx: Any, grad: Tensor) -> tuple[Any, ...]:
    x, weight = ctx.saved_tensors
    r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + ctx.eps)
    xhat = x * r
    gxhat = grad * weight
    gx = r * (gxhat - xhat * (gxhat * xhat).sum(-1, keepdim=True) / x.shape[-1])
    return gx, (grad * xhat).sum_to_size(weight.shape)


rms_norm.register_autograd(_rms_backward, setup_context=_rms_setup)


@torch.library.custom_op("initzoo::temp_softmax", mutates_args=())
def temp_softmax(x: Tensor, temperature: Tensor) -> Tensor:
    """``temperature.item()``: only a 0-dim (or one-element) temperature runs."""
    return torch.softmax(x / temperature.item(), dim=-1)


temp_softmax.register_fake(lambda x, temperature: torch.empty_like(x))


def _temp_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(inputs[0], inputs[1], output)


def _temp_backward(ctx: Any, grad: Tensor) -> tuple[Any, ...]:
    x, t, y = ctx.saved_tensors
    ds = y * (grad - (grad * y).sum(-1, keepdim=True))  # through softmax(s), s = x / t
    return ds / t, -(ds * x).sum() / t**2


temp_softmax.register_autograd(_temp_backward, setup_context=_temp_setup)


@torch.library.custom_op("initzoo::shift_by", mutates_args=())
def shift_by(x: Tensor, amount: Tensor) -> Tensor:
    """A 0-dim ``amount`` whose name says nothing: tried as shape [] when the others fail."""
    return x + amount.item()


shift_by.register_fake(lambda x, amount: torch.empty_like(x))
shift_by.register_autograd(lambda ctx, grad: (grad, grad.sum()),
                          setup_context=lambda ctx, inputs, output: None)


@torch.library.custom_op("initzoo::reduce", mutates_args=())
def reduce(x: Tensor, mode: str, dim: int) -> Tensor:
    """``mode`` must be one of the strings forward compares it with; ``dim`` a dim of x."""
    if mode == "sum":
        return x.sum(dim)
    if mode in ("mean", "avg"):
        return x.mean(dim)
    raise ValueError(f"unknown mode {mode!r}")


@reduce.register_fake
def _(x: Tensor, mode: str, dim: int) -> Tensor:
    return x.sum(dim)


def _reduce_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    x, mode, dim = inputs
    ctx.shape, ctx.dim = x.shape, dim
    ctx.scale = 1.0 if mode == "sum" else 1.0 / x.shape[dim]


def _reduce_backward(ctx: Any, grad: Tensor) -> tuple[Any, ...]:
    return (grad.unsqueeze(ctx.dim) * ctx.scale).expand(ctx.shape).clone(), None, None


reduce.register_autograd(_reduce_backward, setup_context=_reduce_setup)


@torch.library.custom_op("initzoo::add_maybe", mutates_args=())
def add_maybe(x: Tensor, other: Tensor | None) -> Tensor:
    return x.clone() if other is None else x + other


add_maybe.register_fake(lambda x, other: torch.empty_like(x))
add_maybe.register_autograd(
    lambda ctx, grad: (grad, grad if ctx.has_other else None),
    setup_context=lambda ctx, inputs, output: setattr(ctx, "has_other", inputs[1] is not None))
