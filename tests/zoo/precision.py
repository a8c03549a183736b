"""precision: the working dtype (float32 unless declared) against float64 on the same values.

Broken Functions the check must catch, then correct Functions that a naive precision check would
flag.
"""
from __future__ import annotations

import threading

import torch
from torch.autograd import Function

from zoo import factory_case, spec_for

# ============================================================================ broken


class NaiveLogSumExp(Function):
    EXPECT = ("precision", "GV321", None)
    SPEC = spec_for(x={"shape": [2, 3], "init": "uniform", "low": 85, "high": 95})

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.exp().sum(-1).log()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        e = x.exp()
        return grad.unsqueeze(-1) * e / e.sum(-1, keepdim=True)


class Float16Overflow(Function):
    """Fine in float32, overflows in float16: the spec checks float16 via the check's option."""

    EXPECT = ("precision", "GV321", None)
    SPEC = {"checks": {"precision": {"dtype": "float16"}},  # noqa: RUF012
            "cases": [{"args": {"x": {"shape": [4], "init": "uniform", "low": 10, "high": 12}}}]}

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.exp() / 1e3

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.exp() / 1e3


class Cancellation(Function):
    EXPECT = ("precision", "GV322", None)
    SEVERITY = "warning"
    SPEC = spec_for(x={"shape": [5], "init": "uniform", "low": 0, "high": 1})

    @staticmethod
    def forward(ctx, x):
        return (x + 1e5) - 1e5

    @staticmethod
    def backward(ctx, grad):
        return grad


class OneMinusCosTextbook(Function):
    """y = x - sin(x) with the textbook backward g * (1 - cos x): for x ~ 1e-3 the float32
    gradient is off by about 10% in norm (float64 hides it)."""

    EXPECT = ("precision", "GV322", None)
    SPEC = spec_for(x={"shape": [20], "init": "uniform", "low": 1e-4, "high": 1e-3})

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x - torch.sin(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (1 - torch.cos(x))


class VarianceCancels(Function):
    """A population variance whose backward is 2 (n x - sum x) / n**2: for data with mean 1e4
    and std 0.01 the float32 gradient is tens of percent off."""

    EXPECT = ("precision", "GV322", "x")
    SPEC = spec_for(x={"shape": [20], "init": "normal", "mean": 1e4, "std": 0.01})

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.var(unbiased=False)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        n = x.numel()
        return grad * 2 * (n * x - x.sum()) / n ** 2


# ============================================================================ correct


def make_in_dtype(generator, dtype):
    """Honours dtype, drawing straight in it: torch.randn draws other values in float32 than
    in float64 from 16 elements up."""
    return (torch.randn(6, 5, generator=generator, dtype=dtype),)


class FactoryWithDtype(Function):
    """exp on factory inputs drawn in the requested dtype. naive precision: calling the factory
    once per dtype compares float32 and float64 results on different numbers ("off by 5.76")."""

    SPEC = factory_case("make_in_dtype")

    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * y


class NearlyEqualDifference(Function):
    """a - b of nearly equal float32 inputs (mean 1e4, std 0.01): exact in float32 (Sterbenz).
    naive precision: a float64 reference on the unrounded inputs, or a tolerance scaled by
    max(1, |x|), blames input rounding on the formula."""

    SPEC = spec_for(a={"shape": [20], "init": "normal", "mean": 1e4, "std": 0.01},
                    b={"shape": [20], "init": "normal", "mean": 1e4, "std": 0.01})

    @staticmethod
    def forward(ctx, a, b):
        return a - b

    @staticmethod
    def backward(ctx, grad):
        return grad, -grad if ctx.needs_input_grad[1] else None


def make_list_and_module(generator):
    x = torch.randn(2, 3, generator=generator, dtype=torch.float64)
    pair = [torch.randn(4, generator=generator, dtype=torch.float64) for _ in range(2)]
    layer = torch.nn.Linear(3, 4, dtype=torch.float64)
    layer.lock = threading.Lock()  # a module holding what cannot be deep-copied
    with torch.no_grad():
        layer.weight.copy_(torch.randn(4, 3, generator=generator, dtype=torch.float64))
        layer.bias.copy_(torch.randn(4, generator=generator, dtype=torch.float64))
    return x.requires_grad_(), pair, layer


class ListAndModuleArgs(Function):
    """Takes a list of tensors and an nn.Module that holds a lock. naive precision: only
    top-level tensors are rounded to the working dtype, so the float32 run mixes in float64
    list items and module weights (forward raises on float32 @ float64); a naive conversion
    deep-copies the module, and the lock makes that crash."""

    SPEC = factory_case("make_list_and_module", dtype="float32")

    @staticmethod
    def forward(ctx, x, pair, layer):
        ctx.save_for_backward(layer.weight, pair[0])
        return layer(x) * pair[0] + pair[1]

    @staticmethod
    def backward(ctx, grad):
        weight, scale = ctx.saved_tensors
        return (grad * scale) @ weight, None, None
