"""The command line's own parameter checks, shared by its commands: check lists (``--only
a,b``) and values that must not be empty (an unset variable); and ``check``'s options, made from
the option table."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import click

from gradverify.optiontable import OPTIONS, FiniteRange

__all__ = ["FiniteRange", "check_options", "not_empty", "split_checks"]


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


def check_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options of ``gradverify check``, as ``optiontable.OPTIONS`` declares them, in its
    order."""
    for option in reversed(OPTIONS):
        if option.flags:
            extra: dict[str, Any] = {"callback": not_empty} if option.not_empty else {}
            command = click.option(*option.flags, help=option.help, **option.click,
                                   **extra)(command)
    return command
