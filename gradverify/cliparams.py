"""The command line's own parameter checks, shared by its commands: check lists (``--only
a,b``), values that must not be empty (an unset variable), and numbers that must be finite."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import click


def split_checks(values: Sequence[str], option: str) -> tuple[str, ...] | None:
    """``--only a,b --only c``: the names, or None when the option was not given."""
    from gradverify.registry import unknown_check

    if not values:
        return None
    names: list[str] = []
    for value in values:
        for name in (n.strip() for n in value.split(",")):
            if not name:
                continue
            problem = unknown_check(name)
            if problem is not None:
                raise click.BadParameter(problem, param_hint=option)
            names.append(name)
    return tuple(names)


def not_empty(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """An option or argument given as an empty string (an unset variable: ``--json "$OUT"``)
    is a usage error, never a silent default."""
    values = value if isinstance(value, tuple) else (value,)
    if any(v == "" for v in values):
        what = "a TARGET" if param.param_type_name == "argument" else "a value"
        raise click.BadParameter(f"{what} is an empty string (an unset variable?)", ctx=ctx,
                                 param=param)
    return value


class FiniteRange(click.FloatRange):
    """A float range that refuses nan and inf: a tolerance of nan or inf would turn every
    comparison into a pass or a failure."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number
