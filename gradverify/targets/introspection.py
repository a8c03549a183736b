"""Reading a target's Python code: forward's parameters, where a function is defined, what a
decorator wraps; and the adapter through which the checks call a target that is not an
autograd.Function class."""
from __future__ import annotations

import inspect
import tokenize
from collections.abc import Callable
from typing import Any

from gradverify.errors import shown_path
from gradverify.results import Location
from gradverify.targets.model import Param
from gradverify.targets.op_calls import flat_outputs

SOURCE_ERRORS = (OSError, TypeError, SyntaxError, tokenize.TokenError, UnicodeDecodeError)
"""What reading an object's source with ``inspect`` raises where it cannot be read as the code
that runs: no file, a built-in, a file changed since its import into one that does not parse
(``inspect`` parses a class's whole file) or cannot be decoded."""


def underlying(member: Any) -> Callable[..., Any] | None:
    if isinstance(member, (staticmethod, classmethod)):
        return member.__func__
    return member if callable(member) else None


def unwrap(fn: Any) -> Any:
    while fn is not None and hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    return fn


def params_of(fn: Callable[..., Any], skip: int) -> tuple[Param, ...]:
    """forward's parameters without the leading ``cls``/``ctx`` ones."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return ()
    params = list(signature.parameters.values())[skip:]
    kinds = {
        inspect.Parameter.POSITIONAL_ONLY: "positional",
        inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional",
        inspect.Parameter.VAR_POSITIONAL: "var_positional",
        inspect.Parameter.KEYWORD_ONLY: "keyword_only",
        inspect.Parameter.VAR_KEYWORD: "var_keyword",
    }
    return tuple(Param(p.name, p.default, p.annotation, kinds[p.kind]) for p in params)


def location_of(fn: Any) -> Location | None:
    """The ``def`` line of a function (not of the decorators above it)."""
    fn = unwrap(fn)
    try:
        file = inspect.getsourcefile(fn)
        source, line = inspect.getsourcelines(fn)
    except SOURCE_ERRORS:
        return None
    if not file:
        return None
    for offset, text in enumerate(source):
        if text.lstrip().startswith(("def ", "async def ")):
            line += offset
            break
    return Location(shown_path(file), line)


def line_of(cls: type) -> int | None:
    try:
        return inspect.getsourcelines(cls)[1]
    except SOURCE_ERRORS:
        return None


def file_of(fn: Any) -> str | None:
    try:
        return inspect.getsourcefile(fn) if fn is not None else None
    except SOURCE_ERRORS:
        return None


def adapter(name: str, apply: Callable[..., Any], module: str, source: Any,
            backward: Callable[..., Any] | None = None, random_use: Any = None) -> type:
    """The Function-like door of a target that is not an autograd.Function class.
    ``source``: the user's function behind the target (what ``init`` reads as forward);
    ``random_use``: whether its calls draw random numbers (``draws_random``). Outputs in
    lists and tuples (an op's ``Tensor[]``, a function returning a list) come out flat, one
    output each, as autograd and torch's gradcheck see them."""
    def flat_apply(*values: Any) -> Any:
        return flat_outputs(apply(*values))

    members: dict[str, Any] = {"apply": staticmethod(flat_apply), "__module__": module,
                               "__qualname__": name, "forward": staticmethod(source),
                               "random_use": random_use}
    if backward is not None:
        members["backward"] = staticmethod(backward)
    return type(name.rsplit(".", 1)[-1].replace(":", "_"), (), members)
