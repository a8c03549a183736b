"""Custom ops, functions and modules for the tests of targets beyond Function classes
(namespace ``gvtest``): each bug beside a correct target that a naive check would flag."""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


def _save_x(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(inputs[0])


# -- correct


@torch.library.custom_op("gvtest::sin", mutates_args=())
def sin(x: Tensor) -> Tensor:
    return torch.sin(x)


sin.register_fake(lambda x: torch.empty_like(x))
sin.register_autograd(lambda ctx, g: g * ctx.saved_tensors[0].cos(), setup_context=_save_x)


@torch.library.custom_op("gvtest::cube_on_ctx", mutates_args=())
def cube_on_ctx(x: Tensor) -> Tensor:
    return x * x * x


def _keep_x_on_ctx(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.x = inputs[0]  # an attribute, not save_for_backward: no version-counter protection


cube_on_ctx.register_autograd(lambda ctx, g: 3 * ctx.x * ctx.x * g, setup_context=_keep_x_on_ctx)


@cube_on_ctx.register_fake
def _(x: Tensor) -> Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("gvtest::sin_cos", mutates_args=())
def sin_cos(x: Tensor) -> tuple[Tensor, Tensor]:
    return torch.sin(x), torch.cos(x)


sin_cos.register_fake(lambda x: (torch.empty_like(x), torch.empty_like(x)))
sin_cos.register_autograd(
    lambda ctx, gs, gc: gs * ctx.saved_tensors[0].cos() - gc * ctx.saved_tensors[0].sin(),
    setup_context=_save_x)


@torch.library.custom_op("gvtest::sin_into", mutates_args=("stats",))
def sin_into(x: Tensor, stats: Tensor) -> Tensor:
    """Declared mutation: writes the mean into ``stats`` (a naive mutation check flags it)."""
    stats.copy_(x.detach().mean().expand_as(stats))
    return torch.sin(x)


sin_into.register_fake(lambda x, stats: torch.empty_like(x))
# torch refuses register_autograd for a mutating op: its spec has no input requiring grad


@torch.library.custom_op("gvtest::repeat_rows", mutates_args=())
def repeat_rows(x: Tensor, times: int) -> Tensor:
    """The output's shape depends on an int argument: the fake impl must compute it."""
    return x.repeat(times, 1)


repeat_rows.register_fake(lambda x, times: x.new_empty(x.shape[0] * times, x.shape[1]))
repeat_rows.register_autograd(
    lambda ctx, g: (g.reshape(ctx.times, -1, g.shape[1]).sum(0), None),
    setup_context=lambda ctx, inputs, output: setattr(ctx, "times", inputs[1]))


@torch.library.custom_op("gvtest::relu_where", mutates_args=())
def relu_where(x: Tensor) -> Tensor:
    return x.clamp_min(0)


relu_where.register_fake(lambda x: torch.empty_like(x))
relu_where.register_autograd(lambda ctx, g: torch.where(ctx.saved_tensors[0] > 0, g, 0.0),
                             setup_context=_save_x)


@torch.library.custom_op("gvtest::vsin", mutates_args=())
def vsin(x: Tensor) -> Tensor:
    return torch.sin(x)


vsin.register_fake(lambda x: torch.empty_like(x))
vsin.register_autograd(lambda ctx, g: g * ctx.saved_tensors[0].cos(), setup_context=_save_x)


@vsin.register_vmap
def _(info: Any, in_dims: tuple[Any, ...], x: Tensor) -> tuple[Tensor, Any]:
    return vsin(x), in_dims[0]


@torch.library.custom_op("gvtest::halves", mutates_args=())
def halves(x: Tensor) -> tuple[list[Tensor], int]:
    """A Tensor[] and an int: its vmap rule gives the int out_dims None."""
    n = x.shape[-1] // 2
    return [x[..., :n].clone(), x[..., n:].clone()], n


@halves.register_fake
def _(x: Tensor) -> tuple[list[Tensor], int]:
    n = x.shape[-1] // 2
    return [x.new_empty(*x.shape[:-1], n), x.new_empty(*x.shape[:-1], x.shape[-1] - n)], n


@halves.register_vmap
def _(info: Any, in_dims: tuple[Any, ...], x: Tensor) -> tuple[Any, Any]:
    x = x.movedim(in_dims[0], 0) if in_dims[0] is not None else x
    return halves(x), ([0, 0], None)


@torch.library.custom_op("gvtest::scale_and_count", mutates_args=("counter",))
def scale_and_count(x: Tensor, counter: Tensor) -> Tensor:
    """Writes into its declared `counter` (running statistics): every run compared must start
    from fresh copies, or layout and precision compare different counts."""
    counter.add_(1)
    return x * counter.sum()


@scale_and_count.register_fake
def _(x: Tensor, counter: Tensor) -> Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("gvtest::split_wrong", mutates_args=())
def split_wrong(x: Tensor) -> list[Tensor]:
    """Two halves, a Tensor[] output; its backward doubles the gradient. Each half is an
    output of its own to gradcheck, as to autograd (it once verified nothing here)."""
    n = x.shape[-1] // 2
    return [x[..., :n].clone(), x[..., n:].clone()]


@split_wrong.register_fake
def _(x: Tensor) -> list[Tensor]:
    n = x.shape[-1] // 2
    return [x.new_empty(*x.shape[:-1], n), x.new_empty(*x.shape[:-1], x.shape[-1] - n)]


split_wrong.register_autograd(lambda ctx, grads: 2 * torch.cat(grads, -1),
                              setup_context=lambda ctx, inputs, output: None)


def sum_pair_wrong(xs: list[Tensor]) -> Tensor:
    """A plain function of a list of tensors (spread into inputs xs[0], xs[1]) through a
    Function whose backward forgets the second."""
    return _FirstOnlyGrad.apply(xs[0], xs[1])


class _FirstOnlyGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, a: Tensor, b: Tensor) -> Tensor:
        return a + b

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor]:
        return grad, torch.zeros_like(grad)


_LIB = torch.library.Library("gvtest", "FRAGMENT")
_LIB.define("composite(Tensor x) -> Tensor")
_LIB.impl("composite", lambda x: torch.sin(x) * 2, "CompositeImplicitAutograd")
"""No autograd registration, and none needed: torch differentiates the decomposition (a
naive registration check flags it)."""


def two_functions(x: Tensor, y: Tensor) -> Tensor:
    return sin(x) * torch.exp(y)


class Affine(torch.nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(out_features, in_features))
        self.bias = torch.nn.Parameter(torch.randn(out_features))

    def forward(self, x: Tensor) -> Tensor:
        return x @ self.weight.t() + self.bias


# -- buggy


@torch.library.custom_op("gvtest::sin_undeclared", mutates_args=())
def sin_undeclared(x: Tensor, stats: Tensor) -> Tensor:
    stats.copy_(x.detach().mean().expand_as(stats))
    return torch.sin(x)


sin_undeclared.register_fake(lambda x, stats: torch.empty_like(x))
sin_undeclared.register_autograd(lambda ctx, g: (g * ctx.saved_tensors[0].cos(), None),
                                 setup_context=_save_x)


@torch.library.custom_op("gvtest::sin_no_autograd", mutates_args=())
def sin_no_autograd(x: Tensor) -> Tensor:
    return torch.sin(x)


sin_no_autograd.register_fake(lambda x: torch.empty_like(x))


class _SinFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:
        ctx.save_for_backward(x)
        return torch.sin(x)

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> Tensor:
        return g * ctx.saved_tensors[0].cos()


_LIB.define("sin_cpu_key(Tensor x) -> Tensor")
_LIB.impl("sin_cpu_key", _SinFunction.apply, "CPU")
_LIB._register_fake("sin_cpu_key", lambda x: torch.empty_like(x))


@torch.library.custom_op("gvtest::sin_bad_fake", mutates_args=())
def sin_bad_fake(x: Tensor) -> Tensor:
    return torch.sin(x)


sin_bad_fake.register_fake(lambda x: x.new_empty(x.shape[0]))
sin_bad_fake.register_autograd(lambda ctx, g: g * ctx.saved_tensors[0].cos(),
                               setup_context=_save_x)


@torch.library.custom_op("gvtest::relu_bool", mutates_args=())
def relu_bool(x: Tensor) -> Tensor:
    return x.clamp_min(0)


def _relu_bool_backward(ctx: Any, g: Tensor) -> Tensor:
    (x,) = ctx.saved_tensors
    if bool((x > 0).all()):  # a tensor's value in Python: cannot be traced
        return g
    return torch.where(x > 0, g, 0.0)


relu_bool.register_fake(lambda x: torch.empty_like(x))
relu_bool.register_autograd(_relu_bool_backward, setup_context=_save_x)


@torch.library.custom_op("gvtest::vsin_bad", mutates_args=())
def vsin_bad(x: Tensor) -> Tensor:
    return torch.sin(x)


vsin_bad.register_fake(lambda x: torch.empty_like(x))
vsin_bad.register_autograd(lambda ctx, g: g * ctx.saved_tensors[0].cos(), setup_context=_save_x)


@vsin_bad.register_vmap
def _(info: Any, in_dims: tuple[Any, ...], x: Tensor) -> tuple[Tensor, Any]:
    return vsin_bad(x).flip(0), in_dims[0]  # mixes the samples


@torch.library.custom_op("gvtest::sin_wrong_sign", mutates_args=())
def sin_wrong_sign(x: Tensor) -> Tensor:
    return torch.sin(x)


sin_wrong_sign.register_fake(lambda x: torch.empty_like(x))
sin_wrong_sign.register_autograd(lambda ctx, g: -g * ctx.saved_tensors[0].cos(),
                                 setup_context=_save_x)


class _FirstRowLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor) -> Tensor:
        ctx.save_for_backward(x, weight)
        return x @ weight.t()

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor, Tensor]:
        x, weight = ctx.saved_tensors
        return g @ weight, g[:1].t() @ x[:1]  # the weight's gradient of the first row only


class FirstRowLinear(torch.nn.Module):
    """Its weight gradient is right for a batch of one only."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(out_features, in_features))

    def forward(self, x: Tensor) -> Tensor:
        return _FirstRowLinear.apply(x, self.weight)


def over_wrong_sign(x: Tensor) -> Tensor:
    return sin_wrong_sign(x) + 1


# -- AOT dispatch: what tracing freezes, and what cannot be traced

_CALLS = [0]


@torch.library.custom_op("gvtest::scale_by_calls", mutates_args=())
def scale_by_calls(x: Tensor) -> Tensor:
    return x * 2


def _count_calls(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    _CALLS[0] += 1
    ctx.scale = 2.0 * _CALLS[0]  # Python state: frozen into the graph when traced


scale_by_calls.register_fake(lambda x: torch.empty_like(x))
scale_by_calls.register_autograd(lambda ctx, g: g * ctx.scale, setup_context=_count_calls)

_STEP = [0]


@torch.library.custom_op("gvtest::step_scaled", mutates_args=())
def step_scaled(x: Tensor) -> Tensor:
    _STEP[0] += 1  # a kernel whose result changes from call to call
    return x * _STEP[0]


step_scaled.register_fake(lambda x: torch.empty_like(x))
step_scaled.register_autograd(lambda ctx, g: g * ctx.step,
                              setup_context=lambda ctx, inputs, output:
                              setattr(ctx, "step", _STEP[0]))


@torch.library.custom_op("gvtest::sin_numpy_backward", mutates_args=())
def sin_numpy_backward(x: Tensor) -> Tensor:
    return torch.sin(x)


def _numpy_backward(ctx: Any, g: Tensor) -> Tensor:
    (x,) = ctx.saved_tensors
    return g * torch.from_numpy(x.detach().numpy()).cos()


sin_numpy_backward.register_fake(lambda x: torch.empty_like(x))
sin_numpy_backward.register_autograd(_numpy_backward, setup_context=_save_x)


@torch.library.custom_op("gvtest::sin_pointer_backward", mutates_args=())
def sin_pointer_backward(x: Tensor) -> Tensor:
    return torch.sin(x)


def _pointer_backward(ctx: Any, g: Tensor) -> Tensor:
    (x,) = ctx.saved_tensors
    assert x.data_ptr() != 0  # what a C++ extension's wrapper does before its kernel
    return g * x.cos()


sin_pointer_backward.register_fake(lambda x: torch.empty_like(x))
sin_pointer_backward.register_autograd(_pointer_backward, setup_context=_save_x)


# -- keyword-only arguments, tensor lists, a vmap rule that declines a batching


@torch.library.custom_op("gvtest::rms_kw", mutates_args=())
def rms_kw(x: Tensor, weight: Tensor, *, eps: float = 1e-6) -> Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def _rms_setup(ctx: Any, inputs: tuple[Any, ...], keyword_only_inputs: dict[str, Any],
               output: Any) -> None:
    ctx.eps = keyword_only_inputs["eps"]
    ctx.save_for_backward(*inputs)


def _rms_backward(ctx: Any, g: Tensor) -> tuple[Tensor, Tensor]:
    x, weight = ctx.saved_tensors
    r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + ctx.eps)
    xhat = x * r
    gxhat = g * weight
    gx = r * (gxhat - xhat * (gxhat * xhat).mean(-1, keepdim=True))
    return gx, (g * xhat).sum_to_size(weight.shape)


rms_kw.register_fake(lambda x, weight, *, eps=1e-6: torch.empty_like(x))
rms_kw.register_autograd(_rms_backward, setup_context=_rms_setup)


@rms_kw.register_vmap
def _(info: Any, in_dims: tuple[Any, ...], x: Tensor, weight: Tensor, *,
      eps: float = 1e-6) -> tuple[Tensor, Any]:
    if in_dims[1] is not None:
        raise NotImplementedError("a batched weight")  # declines on purpose
    return rms_kw(x.movedim(in_dims[0], 0), weight, eps=eps), 0


def _wsum_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.weights = inputs[1]


@torch.library.custom_op("gvtest::wsum", mutates_args=())
def wsum(xs: list[Tensor], weights: list[float]) -> Tensor:
    return sum((w * x for x, w in zip(xs, weights)), torch.zeros_like(xs[0]))


wsum.register_fake(lambda xs, weights: torch.empty_like(xs[0]))
wsum.register_autograd(lambda ctx, g: ([w * g for w in ctx.weights], None),
                       setup_context=_wsum_setup)


@torch.library.custom_op("gvtest::wsum_bad", mutates_args=())
def wsum_bad(xs: list[Tensor], weights: list[float]) -> Tensor:
    return sum((w * x for x, w in zip(xs, weights)), torch.zeros_like(xs[0]))


wsum_bad.register_fake(lambda xs, weights: torch.empty_like(xs[0]))
wsum_bad.register_autograd(lambda ctx, g: ([ctx.weights[0] * g, g], None),  # xs[1]'s unweighted
                           setup_context=_wsum_setup)


# -- modules as users write them: dropout, batch norm, buffers without parameters


class DropoutBlock(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)
        self.norm = torch.nn.BatchNorm1d(3)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x: Tensor) -> Tensor:
        return self.drop(self.norm(self.linear(x)))


class FixedProjection(torch.nn.Module):
    """No parameters: a buffer only."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("projection", torch.randn(4, 3))

    def forward(self, x: Tensor) -> Tensor:
        return x @ self.projection


class CallCounter(torch.nn.Module):
    """Writes into its buffer on every call."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(4))
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x: Tensor) -> Tensor:
        self.calls += 1
        return x * self.scale * self.calls


# -- torch.library ops: no autograd kernel; no floating output

_LIB.define("plain_sin(Tensor x) -> Tensor")
_LIB.impl("plain_sin", lambda x: x.detach().sin(), "CPU")  # no autograd kernel at all


@torch.library.custom_op("gvtest::count_positive", mutates_args=())
def count_positive(x: Tensor) -> Tensor:
    return (x > 0).sum()


count_positive.register_fake(lambda x: x.new_empty((), dtype=torch.int64))


def scaled_product(x: Tensor, *, y: Tensor, scale: float = 2.0) -> Tensor:
    """Keyword-only arguments, one a tensor."""
    return _SinFunction.apply(x) * y * scale


class Gated(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate = torch.nn.Parameter(torch.ones(3))

    def forward(self, x: Tensor, *, gated: bool = False) -> Tensor:
        return x * self.gate if gated else x.sin()


@torch.library.custom_op("gvtest::sum_and_double", mutates_args=())
def sum_and_double(x: Tensor) -> tuple[Tensor, Tensor]:
    return x.sum(-1), x * 2


sum_and_double.register_fake(  # output 1's shape is output 0's: the bug is in output 1
    lambda x: (x.new_empty(x.shape[:-1]), x.new_empty(x.shape[:-1])))


# -- optional tensor lists; randomness; a float64 buffer kept so


@torch.library.custom_op("gvtest::weighted_optional_sum", mutates_args=())
def weighted_optional_sum(xs: list[Tensor | None], w: Tensor) -> Tensor:
    return sum((x * w for x in xs if x is not None), torch.zeros_like(w))


weighted_optional_sum.register_fake(lambda xs, w: torch.empty_like(w))


def _wos_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    xs, w = inputs
    ctx.present = [x is not None for x in xs]
    ctx.save_for_backward(w, *[x for x in xs if x is not None])


def _wos_backward(ctx: Any, g: Tensor) -> tuple[list[Tensor | None], Tensor]:
    w, *given = ctx.saved_tensors
    rest = iter(given)
    grads = [g * w if present else None for present in ctx.present]
    return grads, g * sum((x for x in rest), torch.zeros_like(w))


weighted_optional_sum.register_autograd(_wos_backward, setup_context=_wos_setup)


class NoisyScale(torch.nn.Module):
    """Draws noise in forward (reparameterisation): one function per call, seeded."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.full((4,), 0.5))

    def forward(self, x: Tensor) -> Tensor:
        return x + self.scale * torch.randn_like(x)


class Accumulator(torch.nn.Module):
    """Keeps a float64 buffer in a float32 module on purpose."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(4))
        self.register_buffer("drift", torch.full((4,), 1.0 + 1e-10, dtype=torch.float64))

    def forward(self, x: Tensor) -> Tensor:  # 1e-10 is lost if drift is made float32
        return x * self.weight * ((self.drift - 1.0) * 1e10).to(x.dtype)


def scaled_cat(xs: list[Tensor], scale: float) -> Tensor:
    """A plain function of a list (spread into inputs), checked against a reference."""
    return torch.cat(xs) * scale


def scaled_cat_reference(xs: list[Tensor], scale: float) -> Tensor:
    return torch.cat([x * scale for x in xs])
