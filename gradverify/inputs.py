"""A ``Case`` to concrete arguments: bound to forward's parameters, seeded, per dtype role.

Roles: ``double`` (float64/complex128 copies, for gradient checks) and ``working`` (the declared
dtype, for precision checks). Both come from the same generated values, so they describe the
same point.
"""
from __future__ import annotations

import hashlib
import inspect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from gradverify.errors import InputError, SpecError, did_you_mean
from gradverify.report.results import InputInfo
from gradverify.spec import COMPLEX, FLOATING, INITS, Case, SeqArg, Spec, TensorArg, ValueArg
from gradverify.target import FunctionInfo, Param, _MISSING

if TYPE_CHECKING:
    import torch

MAX_CASE_BYTES = 2 * 1024**3
"""A case's tensors may take at most this much memory in float64 (refused before allocating)."""


@dataclass(frozen=True)
class Bound:
    """A case's arguments in forward's positional order, with their parameter names."""

    names: tuple[str, ...]
    args: tuple[Any, ...]
    """``Arg`` objects from the spec, or ``Default(value)`` for skipped parameters."""


@dataclass(frozen=True)
class Default:
    value: Any


@dataclass
class Args:
    """Concrete arguments for one call of ``Function.apply``."""

    names: list[str]
    values: list[Any]
    differentiable: list[bool] = field(default_factory=list)
    """Per position: a floating/complex tensor that requires grad in gradient checks."""

    @property
    def tensor_positions(self) -> list[int]:
        import torch

        return [i for i, v in enumerate(self.values) if isinstance(v, torch.Tensor)]

    @property
    def diff_positions(self) -> list[int]:
        return [i for i, d in enumerate(self.differentiable) if d]

    def clone(self, requires_grad: Sequence[int] | None = None) -> Args:
        """Fresh leaf copies of every tensor; ``requires_grad`` picks which require grad
        (default: the differentiable ones)."""
        import torch

        wanted = set(self.diff_positions if requires_grad is None else requires_grad)
        values = []
        for i, v in enumerate(self.values):
            if isinstance(v, torch.Tensor):
                v = v.detach().clone().requires_grad_(i in wanted)
            values.append(v)
        return Args(list(self.names), values, list(self.differentiable))

    def info(self) -> tuple[InputInfo, ...]:
        return tuple(describe(n, v) for n, v in zip(self.names, self.values))


def describe(name: str, value: Any) -> InputInfo:
    import torch

    if isinstance(value, torch.Tensor):
        return InputInfo(name, "tensor", tuple(value.shape), str(value.dtype).removeprefix("torch."),
                         value.requires_grad)
    kind = "none" if value is None else type(value).__name__
    return InputInfo(name, kind if kind in ("bool", "int", "float", "str", "tuple", "list", "none")
                     else "other")


# ----------------------------------------------------------------------------- binding


def bind(case: Case, info: FunctionInfo, spec: Spec) -> Bound:
    """Match a case's args to forward's parameters; SpecError (exit 3) when they do not fit."""
    positional = list(info.positional)
    varargs = any(p.kind == "var_positional" for p in info.params)
    signature = f"{info.name}.forward({', '.join(_show_param(p) for p in info.params)})"
    key = _case_key(case, spec)

    def fail(message: str, suffix: str = "") -> SpecError:
        return SpecError(message, file=spec.path, line=case.line, key=f"{key}.args{suffix}")

    if case.factory:
        return Bound((), ())
    if case.by_name:
        given = {name: arg for name, arg in case.args}
        names = [p.name for p in positional]
        for name in given:
            if name not in names:
                kw = [p.name for p in info.params if p.kind == "keyword_only"]
                if name in kw:
                    raise fail(f"{name!r} is keyword-only in {signature}; Function.apply takes "
                               "positional arguments only", f".{name}")
                raise fail(f"{signature} has no parameter {name!r}{did_you_mean(name, names)}",
                           f".{name}")
        last = max((names.index(n) for n in given), default=-1)
        args: list[Any] = []
        for p in positional[: last + 1]:
            if p.name in given:
                args.append(given[p.name])
            elif p.default is not _MISSING:
                args.append(Default(p.default))
            else:
                raise fail(f"missing argument {p.name!r} for {signature}")
        missing = [p.name for p in positional[last + 1:] if p.required]
        if missing:
            raise fail(f"missing argument {missing[0]!r} for {signature}")
        return Bound(tuple(names[: len(args)]), tuple(args))
    args = [arg for _, arg in case.args]
    required = sum(1 for p in positional if p.required)
    if len(args) < required:
        raise fail(f"{signature} needs at least {required} argument(s), the case gives {len(args)}")
    if len(args) > len(positional) and not varargs:
        raise fail(f"{signature} takes {len(positional)} argument(s), the case gives {len(args)}")
    names = [p.name for p in positional] + [f"args[{i}]" for i in range(len(args) - len(positional))]
    return Bound(tuple(names[: len(args)]), tuple(args))


def _show_param(p: Param) -> str:
    prefix = {"var_positional": "*", "var_keyword": "**"}.get(p.kind, "")
    return f"{prefix}{p.name}" + ("" if p.default is _MISSING else f"={p.default!r}")


def _case_key(case: Case, spec: Spec) -> str:
    for i, c in enumerate(spec.cases):
        if c is case:
            return f"cases[{i}]"
    return f"cases[{case.name}]"


def case_tensors(bound: Bound, dims: Mapping[str, int]) -> list[tuple[str, tuple[int, ...], int]]:
    """(argument name, shape, float64 bytes) of each tensor a case makes, without allocating;
    tensors inside tuples and lists are named ``name[i]``."""
    found: list[tuple[str, tuple[int, ...], int]] = []

    def visit(name: str, arg: Any) -> None:
        if isinstance(arg, TensorArg):
            itemsize = 16 if arg.dtype in COMPLEX else 8
            shape = resolve_shape(arg, dims)
            found.append((name, shape, math.prod(shape) * itemsize))
        elif isinstance(arg, SeqArg):
            for i, item in enumerate(arg.items):
                visit(f"{name}[{i}]", item)

    for name, arg in zip(bound.names, bound.args):
        visit(name, arg)
    return found


def resolve_shape(arg: TensorArg, dims: Mapping[str, int]) -> tuple[int, ...]:
    if arg.shape is None:
        return _values_shape(arg.values)
    return tuple(dims[s] if isinstance(s, str) else s for s in arg.shape)


def _values_shape(values: Any) -> tuple[int, ...]:
    shape = []
    while isinstance(values, tuple):
        shape.append(len(values))
        values = values[0] if values else None
    return tuple(shape)


# ----------------------------------------------------------------------------- generation


def case_seed(seed: int, target: str, case: str) -> int:
    digest = hashlib.sha256(f"{seed}\0{target}\0{case}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


class InputMaker:
    """Makes a case's arguments once, then hands out fresh clones per role."""

    def __init__(self, case: Case, bound: Bound, info: FunctionInfo, seed: int, device: str) -> None:
        self.case = case
        self.bound = bound
        self.info = info
        self.seed = seed
        self.device = device
        self._cache: dict[str, Args] = {}

    def args(self, role: str = "double") -> Args:
        """Fresh copies (new leaves) of the case's arguments for ``role``."""
        if role not in self._cache:
            self._cache[role] = self._make(role)
        return self._cache[role].clone()

    def _generator(self) -> torch.Generator:
        import torch

        generator = torch.Generator()
        generator.manual_seed(self.seed)
        return generator

    def _make(self, role: str) -> Args:
        if self.case.factory:
            return self._from_factory(role)
        generator = self._generator()
        values = [self._value(arg, role, generator) for arg in self.bound.args]
        diff = [isinstance(arg, TensorArg) and arg.differentiable for arg in self.bound.args]
        return Args(list(self.bound.names), values, diff)

    def _value(self, arg: Any, role: str, generator: torch.Generator) -> Any:
        if isinstance(arg, Default):
            return arg.value
        if isinstance(arg, ValueArg):
            return arg.value
        if isinstance(arg, SeqArg):
            items = [self._value(item, role, generator) for item in arg.items]
            return tuple(items) if arg.kind == "tuple" else items
        return self._tensor(arg, role, generator)

    def _tensor(self, arg: TensorArg, role: str, generator: torch.Generator) -> torch.Tensor:
        import torch

        dtype = getattr(torch, arg.dtype)
        if any(isinstance(v, str) for v in arg.params.values()):  # randint bounds named by a dim
            arg = replace(arg, params={k: self.case.dims[v] if isinstance(v, str) else v
                                       for k, v in arg.params.items()})
        base = _generate(arg, resolve_shape(arg, self.case.dims), generator)
        value = base.to(dtype)
        if role == "double" and arg.dtype in FLOATING:
            value = value.to(torch.float64)
        elif role == "double" and arg.dtype in COMPLEX:
            value = value.to(torch.complex128)
        return value.to(arg.device or self.device)

    def _from_factory(self, role: str) -> Args:
        import torch

        from gradverify.target import resolve_object

        try:
            factory = resolve_object(self.case.factory or "")
        except InputError as exc:
            raise InputError(f"factory {self.case.factory!r}: {exc.message}", code="GV006",
                             where=self.info.target) from None
        working = getattr(torch, self.case.dtype)
        if role == "double":
            working = torch.complex128 if self.case.dtype in COMPLEX else torch.float64
        offered = {"generator": self._generator(), "dtype": working, "device": torch.device(self.device),
                   "dims": dict(self.case.dims)}
        try:
            params = inspect.signature(factory).parameters
            takes_all = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values())
            kwargs = {k: v for k, v in offered.items() if takes_all or k in params}
        except (TypeError, ValueError):
            kwargs = {}
        try:
            result = factory(**kwargs)
        except Exception as exc:  # noqa: BLE001 -- user code
            raise InputError(f"factory {self.case.factory} raised {type(exc).__name__}: {exc}",
                             code="GV006", where=self.info.target) from None
        names = [p.name for p in self.info.positional]
        if isinstance(result, Mapping):
            unknown = [k for k in result if k not in names]
            if unknown:
                raise InputError(f"factory {self.case.factory} returned argument {unknown[0]!r}, "
                                 f"which forward does not take{did_you_mean(unknown[0], names)}",
                                 code="GV006", where=self.info.target)
            last = max(names.index(k) for k in result) if result else -1
            values = []
            for p in self.info.positional[: last + 1]:
                if p.name in result:
                    values.append(result[p.name])
                elif p.default is not _MISSING:
                    values.append(p.default)
                else:
                    raise InputError(f"factory {self.case.factory} did not return {p.name!r}",
                                     code="GV006", where=self.info.target)
        elif isinstance(result, (tuple, list)):
            values = list(result)
        else:
            raise InputError(f"factory {self.case.factory} returned {type(result).__name__}; "
                             "expected a tuple/list of forward's arguments or a dict by name",
                             code="GV006", where=self.info.target)
        shown = names + [f"args[{i}]" for i in range(len(values) - len(names))]
        diff = [isinstance(v, torch.Tensor) and v.requires_grad for v in values]
        if not any(diff):
            # Users forget requires_grad; treat every floating tensor as differentiable then.
            diff = [isinstance(v, torch.Tensor) and (v.is_floating_point() or v.is_complex())
                    for v in values]
        values = [v.detach() if isinstance(v, torch.Tensor) else v for v in values]
        return Args(shown[: len(values)], values, diff)


def _generate(arg: TensorArg, shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    import torch

    if arg.values is not None:
        base_dtype = torch.complex128 if arg.dtype in COMPLEX else torch.float64
        if arg.dtype not in FLOATING | COMPLEX:
            base_dtype = getattr(torch, arg.dtype)
        return torch.tensor(_lists(arg.values), dtype=base_dtype)
    init = arg.resolved_init
    params = {**INITS[init], **arg.params}
    real = torch.float64
    if init == "randn":
        dtype = torch.complex128 if arg.dtype in COMPLEX else real
        out = torch.randn(shape, generator=generator, dtype=dtype)
    elif init == "rand":
        out = torch.rand(shape, generator=generator, dtype=real)
    elif init == "uniform":
        out = params["low"] + (params["high"] - params["low"]) * torch.rand(shape, generator=generator,
                                                                           dtype=real)
    elif init == "normal":
        out = params["mean"] + params["std"] * torch.randn(shape, generator=generator, dtype=real)
    elif init == "positive":
        out = 0.5 + 1.5 * torch.rand(shape, generator=generator, dtype=real)
    elif init == "randint":
        out = torch.randint(int(params["low"]), int(params["high"]), shape, generator=generator)
    elif init == "bernoulli":
        out = torch.bernoulli(torch.full(shape, float(params["p"]), dtype=real), generator=generator)
    elif init == "zeros":
        out = torch.zeros(shape, dtype=real)
    elif init == "ones":
        out = torch.ones(shape, dtype=real)
    elif init == "arange":
        out = torch.arange(math.prod(shape), dtype=real).reshape(shape)
    elif init == "eye":
        out = torch.eye(shape[-2], shape[-1], dtype=real).expand(shape).clone()
    elif init == "randperm":
        if not shape:
            out = torch.zeros((), dtype=torch.int64)
        else:
            out = torch.argsort(torch.rand(shape, generator=generator), dim=-1)
    elif init == "spd":
        n = shape[-1]
        a = torch.randn(shape, generator=generator, dtype=real)
        out = a @ a.transpose(-1, -2) + n * torch.eye(n, dtype=real)
    else:  # pragma: no cover -- the spec validator allows only INITS
        raise ValueError(init)
    if arg.sorted and out.dim() > 0:
        out = out.sort(dim=-1).values if not out.is_complex() else out
    return out


def _lists(values: Any) -> Any:
    return [_lists(v) for v in values] if isinstance(values, tuple) else values
