"""The command line's own parameter checks, shared by its commands: values that must not be
empty (an unset variable); and ``check``'s options, made from the option table."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from gradverify.optiontable import OPTIONS, FiniteRange, Option

__all__ = ["FiniteRange", "check_options", "command_options", "not_empty"]


def not_empty(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """An option or argument given as an empty string (an unset variable: ``--json "$OUT"``)
    is a usage error, never a silent default."""
    values = value if isinstance(value, tuple) else (value,)
    if any(v == "" for v in values):
        what = "a TARGET" if param.param_type_name == "argument" else "a value"
        raise click.BadParameter(f"{what} is an empty string (an unset variable?)", ctx=ctx,
                                 param=param)
    return value


def command_options(options: tuple[Option, ...]) -> Callable[[Callable[..., Any]],
                                                                Callable[..., Any]]:
    """A command's options as the option table declares them, in its order: click passes each
    value under the option's name."""
    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            if option.flags:
                extra: dict[str, Any] = {"callback": not_empty} if option.not_empty else {}
                command = click.option(*option.flags, option.name, help=option.help,
                                       **option.click, **extra)(command)
        return command
    return decorate


check_options = command_options(OPTIONS)
"""The options of ``gradverify check`` (``optiontable.OPTIONS``)."""
