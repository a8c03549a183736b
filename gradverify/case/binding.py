"""A spec's ``Case`` matched to forward's parameters: which argument goes where, under which
name, and the tensors a case will make (sizes known before anything is allocated). Never
imports torch."""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from gradverify.errors import SpecError, did_you_mean
from gradverify.specmodel import COMPLEX, Case, SeqArg, Spec, TensorArg, ValueArg
from gradverify.targets import MISSING, Capability, ModuleParameter, Param, Target

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


def bind(case: Case, info: Target, spec: Spec) -> Bound:
    """Match a case's args to forward's parameters; SpecError (exit 3) when they do not fit.
    A module target's parameters follow forward's arguments, bound to the module's values."""
    if not info.parameters:
        return _typed(_bind(case, info, spec), info, case, spec)
    forward = replace(info, params=info.params[: len(info.params) - len(info.parameters)])
    bound = _typed(_bind(case, forward, spec), forward, case, spec)
    if case.factory:
        return bound
    return Bound(bound.names + info.parameters,
                 bound.args + tuple(Default(ModuleParameter(n)) for n in info.parameters))


def _bind(case: Case, info: Target, spec: Spec) -> Bound:
    """A case's arguments, given by name or in order, matched to forward's parameters."""
    if case.factory:
        return Bound((), ())
    signature = _signature(info)
    key = _case_key(case, spec)

    def fail(message: str, suffix: str = "") -> SpecError:
        return SpecError(message, file=spec.path, line=case.line, key=f"{key}.args{suffix}")

    star = next((p.name for p in info.params if p.kind == "var_positional"), None)
    _refuse_bare_lists(case, star, fail, signature)
    if case.by_name:
        return _bind_by_name(case, info, star, fail, signature)
    return _bind_in_order(case, info, star is not None, fail, signature)


def _refuse_bare_lists(case: Case, star: str | None, fail: Callable[..., SpecError],
                       signature: str) -> None:
    """A bare YAML list is for forward's ``*args`` only, set by its name."""
    for name, arg in case.args:
        if isinstance(arg, SeqArg) and arg.kind == "star" and (name != star or not case.by_name):
            raise fail("a YAML list is ambiguous here: write {tuple: [...]} or {list: [...]} for a "
                       "Python sequence, or {values: [...]} for a tensor (a bare list is for a "
                       f"*args parameter of forward, which {signature} "
                       f"{'names ' + repr(star) if star else 'does not have'})", f".{name}")


def _bind_by_name(case: Case, info: Target, star: str | None, fail: Callable[..., SpecError],
                  signature: str) -> Bound:
    """A case whose arguments are named: each to its parameter, defaults for those skipped
    before the last one set, ``*args`` spread after every positional parameter."""
    positional = list(info.positional)
    varargs = star is not None
    given = {str(name): arg for name, arg in case.args}  # by name: every name is set
    spread = given.pop(star, None) if star else None
    names = [p.name for p in positional]
    keyword = [p for p in info.params if p.kind == "keyword_only"]
    for name in given:
        if name not in names:
            _unknown(name, info, names, keyword, varargs, fail, signature)
    if info.has(Capability.KEYWORDS) and not varargs and (
            any(p.name in given or p.default is MISSING for p in keyword)):
        return _with_keywords(info, given, keyword, fail, signature)
    last = max((names.index(n) for n in given), default=-1)
    args = _given_or_default(positional[: last + 1], given, fail, signature)
    if spread is not None:
        last = len(positional) - 1
        args += _defaults_before_star(positional[len(args):], fail, signature)
    missing = [p.name for p in positional[last + 1:] if p.required]
    if missing:
        raise fail(f"missing argument {missing[0]!r} for {signature}")
    if spread is not None:
        args += list(spread.items) if isinstance(spread, SeqArg) else [spread]
    return Bound(tuple(names_for(info, len(args))), tuple(args))


def _defaults_before_star(params: list[Param], fail: Callable[..., SpecError],
                          signature: str) -> list[Any]:
    """The defaults of the positional parameters a case skips before forward's ``*args``."""
    for p in params:
        if p.default is MISSING:
            raise fail(f"missing argument {p.name!r} for {signature}")
    return [Default(p.default) for p in params]


def _bind_in_order(case: Case, info: Target, varargs: bool, fail: Callable[..., SpecError],
                   signature: str) -> Bound:
    """A case whose arguments are a list, in forward's order."""
    positional = list(info.positional)
    args = [arg for _, arg in case.args]
    required = sum(1 for p in positional if p.required)
    if len(args) < required:
        raise fail(f"{signature} needs at least {required} argument(s), the case gives {len(args)}")
    if len(args) > len(positional) and not varargs:
        raise fail(f"{signature} takes {len(positional)} argument(s), the case gives {len(args)}")
    return Bound(tuple(names_for(info, len(args))), tuple(args))


def _unknown(name: str, info: Target, names: list[str], keyword: list[Param],
             varargs: bool, fail: Callable[..., SpecError], signature: str) -> None:
    """A name a case sets that is not a positional parameter: fine for a keyword-only one of
    a function or module; else the error that says why."""
    if name in {p.name for p in keyword}:
        if info.has(Capability.KEYWORDS) and not varargs:
            return
        why = ("Function.apply takes positional arguments only"
               if not info.has(Capability.KEYWORDS) else
               "after *args, gradverify cannot pass it by name")
        raise fail(f"{name!r} is keyword-only in {signature}; {why}", f".{name}")
    if name in info.parameters:
        raise fail(f"{name!r} is a parameter of the module: its value comes from the module "
                   "built from init_args (seeded), not from a case", f".{name}")
    raise fail(f"{signature} has no parameter "
               f"{name!r}{did_you_mean(name, names + [p.name for p in keyword])}", f".{name}")


def _with_keywords(info: Target, given: dict[str, Any], keyword: list[Param],
                   fail: Callable[..., SpecError], signature: str) -> Bound:
    """A function's or module's case that sets keyword-only parameters: every positional one
    (its default where not given), then the keyword-only ones in declared order, up to the
    last set or required (the adapter passes what follows the positional ones by name)."""
    args = _given_or_default([*info.positional, *keyword], given, fail, signature)
    needed = [i for i, p in enumerate([*info.positional, *keyword])
              if p.name in given or p.default is MISSING]
    args = args[: max(needed) + 1]
    names = [p.name for p in [*info.positional, *keyword]][: len(args)]
    return Bound(tuple(names), tuple(args))


def _given_or_default(params: list[Param], given: dict[str, Any],
                      fail: Callable[..., SpecError], signature: str) -> list[Any]:
    """Each parameter's argument from the case, else its default; a required one missing is
    a spec error."""
    args: list[Any] = []
    for p in params:
        if p.name in given:
            args.append(given[p.name])
        elif p.default is not MISSING:
            args.append(Default(p.default))
        else:
            raise fail(f"missing argument {p.name!r} for {signature}")
    return args


def _signature(info: Target) -> str:
    """``Name.forward(x, y=1)`` of a Function or module, ``fn(x, *, scale=2.0)`` of a function
    or an op, as its code spells it."""
    shown = [_show_param(p) for p in info.params]
    first = next((i for i, p in enumerate(info.params) if p.kind == "keyword_only"), None)
    if first is not None and not any(p.kind == "var_positional" for p in info.params):
        shown.insert(first, "*")
    return f"{info.called}({', '.join(shown)})"


def _show_param(p: Param) -> str:
    prefix = {"var_positional": "*", "var_keyword": "**"}.get(p.kind, "")
    return f"{prefix}{p.name}" + ("" if p.default is MISSING else f"={p.default!r}")


_NUMBERS = {"float": "a float", "SymFloat": "a float", "int": "an integer",
            "SymInt": "an integer"}
"""Annotations (Python's or an op schema's) a string argument cannot satisfy."""


def _typed(bound: Bound, info: Target, case: Case, spec: Spec) -> Bound:
    """``bound``, unless a parameter annotated ``float`` is given a string (YAML 1.1 reads
    ``1e-5`` as one) or one annotated ``int`` a string or a float: a spec error at the
    argument's line (every such argument of the case), never a crash in forward."""
    annotations = {p.name: _annotation_name(p.annotation) for p in info.params}
    errors = []
    for name, arg in zip(bound.names, bound.args):
        annotation = annotations.get(name) or ""
        wanted = _NUMBERS.get(annotation)
        if not (wanted and isinstance(arg, ValueArg) and arg.dim is None):
            continue
        value = arg.value
        if isinstance(value, str):
            fix = ("write a number (1.0e-5, 1e-5 and .5 are floats)" if wanted == "a float"
                   else "write a whole number")
            given = f"the string {value!r}"
        elif wanted == "an integer" and isinstance(value, float):
            fix, given = "write a whole number", f"the float {value!r}"
        else:
            continue
        errors.append(SpecError(f"{name!r} is annotated {annotation} and needs {wanted}, but the "
                                f"spec gives {given}; {fix}", file=spec.path,
                                line=arg.line or case.line,
                                key=f"{_case_key(case, spec)}.args.{name}"))
    if errors:
        errors[0].others = errors[1:]
        raise errors[0]
    return bound


def _annotation_name(annotation: Any) -> str | None:
    """``float`` for float, "float", "Optional[float]", "float | None" or a schema's "float?";
    None for anything a string may satisfy (``float | str``, ``Union[int, Literal[...]]``)."""
    text = annotation.__name__ if isinstance(annotation, type) else str(annotation)
    text = text.replace("typing.", "").replace("Optional[", "").rstrip("]?")
    members = {m.strip() for m in text.split("|")} - {"None", "NoneType"}
    return members.pop() if len(members) == 1 else None


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


def names_for(info: Target, count: int) -> list[str]:
    """Report names of ``count`` positional arguments: forward's parameter names, then the
    ``*args`` parameter's items (``xs[0]``, ``xs[1]``, ...)."""
    names = [p.name for p in info.positional]
    star = next((p.name for p in info.params if p.kind == "var_positional"), "args")
    return (names + [f"{star}[{i}]" for i in range(count - len(names))])[:count]
