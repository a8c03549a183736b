"""A spec's ``Case`` matched to forward's parameters: which argument goes where, under which
name, and the tensors a case will make (sizes known before anything is allocated). Never
imports torch."""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from gradverify.errors import SpecError, did_you_mean
from gradverify.spec.model import COMPLEX, Case, SeqArg, Spec, TensorArg
from gradverify.target import _MISSING, FunctionInfo, Param

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


def bind(case: Case, info: FunctionInfo, spec: Spec) -> Bound:
    """Match a case's args to forward's parameters; SpecError (exit 3) when they do not fit.
    A module target's parameters follow forward's arguments, bound to the module's values."""
    if not info.parameters:
        return _bind(case, info, spec)
    from gradverify.kinds import ModuleParameter

    forward = replace(info, params=info.params[: len(info.params) - len(info.parameters)])
    bound = _bind(case, forward, spec)
    if case.factory:
        return bound
    return Bound(bound.names + info.parameters,
                 bound.args + tuple(Default(ModuleParameter(n)) for n in info.parameters))


def _bind(case: Case, info: FunctionInfo, spec: Spec) -> Bound:
    positional = list(info.positional)
    varargs = any(p.kind == "var_positional" for p in info.params)
    signature = f"{info.name}.forward({', '.join(_show_param(p) for p in info.params)})"
    key = _case_key(case, spec)

    def fail(message: str, suffix: str = "") -> SpecError:
        return SpecError(message, file=spec.path, line=case.line, key=f"{key}.args{suffix}")

    if case.factory:
        return Bound((), ())
    star = next((p.name for p in info.params if p.kind == "var_positional"), None)
    for name, arg in case.args:
        if isinstance(arg, SeqArg) and arg.kind == "star" and (name != star or not case.by_name):
            raise fail("a YAML list is ambiguous here: write {tuple: [...]} or {list: [...]} for a "
                       "Python sequence, or {values: [...]} for a tensor (a bare list is for a "
                       f"*args parameter of forward, which {signature} "
                       f"{'names ' + repr(star) if star else 'does not have'})", f".{name}")
    if case.by_name:
        given = {str(name): arg for name, arg in case.args}  # by name: every name is set
        spread = given.pop(star, None) if star else None
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
        if spread is not None:
            last = len(positional) - 1
            for p in positional[len(args):]:
                if p.default is _MISSING:
                    raise fail(f"missing argument {p.name!r} for {signature}")
                args.append(Default(p.default))
        missing = [p.name for p in positional[last + 1:] if p.required]
        if missing:
            raise fail(f"missing argument {missing[0]!r} for {signature}")
        if spread is not None:
            args += list(spread.items) if isinstance(spread, SeqArg) else [spread]
        return Bound(tuple(names_for(info, len(args))), tuple(args))
    args = [arg for _, arg in case.args]
    required = sum(1 for p in positional if p.required)
    if len(args) < required:
        raise fail(f"{signature} needs at least {required} argument(s), the case gives {len(args)}")
    if len(args) > len(positional) and not varargs:
        raise fail(f"{signature} takes {len(positional)} argument(s), the case gives {len(args)}")
    return Bound(tuple(names_for(info, len(args))), tuple(args))


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


def names_for(info: FunctionInfo, count: int) -> list[str]:
    """Report names of ``count`` positional arguments: forward's parameter names, then the
    ``*args`` parameter's items (``xs[0]``, ``xs[1]``, ...)."""
    names = [p.name for p in info.positional]
    star = next((p.name for p in info.params if p.kind == "var_positional"), "args")
    return (names + [f"{star}[{i}]" for i in range(count - len(names))])[:count]
