"""Following forward's parameters into the functions it passes them to: ``return
_gather_rows(x, idx)`` with a module-level ``def _gather_rows(x, rows): return x[rows]`` makes
``idx`` an index, as ``x[idx]`` in forward itself would. A callee is found by name, never run:
a function of the user's package (forward's module, or one of the package it imports; torch's
own functions are not followed), a function defined inside forward, or a method of a class
(``self.m`` and ``cls.m`` in forward's class, ``Owner.m``), or the forward (and backward)
of an autograd Function of the package that ``Inner.apply(...)`` runs. Callees are followed a
few levels deep, each at most once along a chain, so recursion ends.
"""
from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

from gradverify.init.ranks import read_backward
from gradverify.targets.introspection import SOURCE_ERRORS, underlying, unwrap

MAX_DEPTH = 3
"""Calls followed from forward: forward -> helper -> its helper -> one more."""


Read = Callable[[ast.AST, dict[str, Any]], None]
"""``init.source.read_tree``: fills hints (one per name) from how a tree uses the names."""


def follow(function: Callable[..., Any], tree: ast.AST, hints: dict[str, Any], read: Read,
           fresh: Callable[[], Any], depth: int = 0, seen: frozenset[int] = frozenset()
           ) -> None:
    """Add to ``hints`` (forward's, one per parameter) what the callees of ``tree`` (the
    source of ``function``) do with the parameters passed to them: an index, a mask, labels.
    ``read`` reads a callee's hints, each made by ``fresh``."""
    if depth >= MAX_DEPTH:
        return
    seen = seen | {id(tree)}
    nested = {n.name: n for n in ast.walk(tree)
              if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n is not _def(tree)}
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        if not any(_arg_name(a) in hints for a in [*call.args, *call.keywords]):
            continue
        found = _resolve(call.func, function, nested)
        if found is None:
            continue
        callee, body, implicit = found
        if body is None or id(body) in seen:
            continue
        mapping = _bind(call, _def(body), implicit, hints)
        if not mapping:
            continue
        theirs = {param: fresh() for param in mapping}
        read(_def(body) or body, theirs)
        backward = _backward_of(call.func, function)
        if backward is not None:
            read_backward(body, backward, theirs)
        follow(callee, body, theirs, read, fresh, depth + 1, seen)
        _merge(theirs, mapping, hints)


def _def(tree: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The function a parsed source defines (the tree itself for a nested def)."""
    if isinstance(tree, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return tree
    body = getattr(tree, "body", [])
    first = body[0] if body else None
    return first if isinstance(first, (ast.FunctionDef, ast.AsyncFunctionDef)) else None


_TREES: dict[Any, ast.AST | None] = {}
"""Parsed callees by code object: a helper called from many Functions is read once."""


def parsed(function: object) -> ast.Module | None:
    """A function's source as a tree, or None where it cannot be read."""
    if function is None:
        return None
    try:
        return ast.parse(textwrap.dedent(inspect.getsource(function)))  # type: ignore[arg-type]
    except SOURCE_ERRORS:
        return None


def _tree_of(function: Any) -> ast.AST | None:
    code = getattr(function, "__code__", None)
    if code is None:
        return None
    if code not in _TREES:
        _TREES[code] = parsed(function)
    return _TREES[code]


def _resolve(func: ast.expr, function: Callable[..., Any],
             nested: dict[str, ast.FunctionDef | ast.AsyncFunctionDef]
             ) -> tuple[Any, ast.AST | None, bool] | None:
    """(the callee, its source tree, whether a ``self``/``cls`` argument is implicit) of a call
    to ``name(...)`` or ``obj.name(...)``, or None where it is no Python function of the
    user's (a torch function, a tensor method, a builtin)."""
    scope = getattr(unwrap(function), "__globals__", {})
    home = _package(function)
    if isinstance(func, ast.Name):
        if func.id in nested:
            return function, nested[func.id], False
        return _plain(scope.get(func.id), home, implicit=False)
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
        return None
    holder_name = func.value.id
    if holder_name in ("self", "cls"):
        owner = _owner(function, scope)
        if owner is None:
            return None
        member = inspect.getattr_static(owner, func.attr, None)
        return _plain(underlying(member), home, implicit=not isinstance(member, staticmethod))
    holder = scope.get(holder_name)
    if _applied(holder, func.attr):
        # ``Inner.apply(x, w)`` runs ``Inner.forward(ctx, x, w)``: ctx is the implicit first
        member = inspect.getattr_static(holder, "forward", None)
        return _plain(underlying(member), home, implicit=True)
    if inspect.isclass(holder):
        member = inspect.getattr_static(holder, func.attr, None)
        return _plain(underlying(member), home, implicit=isinstance(member, classmethod))
    if inspect.ismodule(holder):
        return _plain(getattr(holder, func.attr, None), home, implicit=False)
    return None


def _applied(holder: Any, attr: str) -> bool:
    """``holder.apply``: the ``apply`` of a class with a ``forward`` and a ``backward`` (an
    autograd Function, known without importing torch)."""
    return attr == "apply" and inspect.isclass(holder) and all(
        inspect.getattr_static(holder, name, None) is not None
        for name in ("forward", "backward"))


def _backward_of(func: ast.expr, function: Callable[..., Any]) -> ast.AST | None:
    """The parsed backward of the Function a call ``Inner.apply(...)`` runs, else None."""
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
        return None
    holder = getattr(unwrap(function), "__globals__", {}).get(func.value.id)
    if not _applied(holder, func.attr):
        return None
    return _tree_of(underlying(inspect.getattr_static(holder, "backward")))


def _owner(function: Any, scope: dict[str, Any]) -> type | None:
    """The class a method is defined in, found by its qualified name (``Picker.forward``)."""
    path = str(getattr(unwrap(function), "__qualname__", "")).split(".")[:-1]
    if not path or "<locals>" in path:
        return None
    found = scope.get(path[0])
    for name in path[1:]:
        found = inspect.getattr_static(found, name, None)
    return found if inspect.isclass(found) else None


def _package(function: Any) -> str:
    """The top-level package (or module) a function is defined in."""
    return str(getattr(unwrap(function), "__module__", None) or "").partition(".")[0]


def _plain(target: Any, home: str, *, implicit: bool
           ) -> tuple[Any, ast.AST | None, bool] | None:
    """A Python function of the user's package (``home``): torch's own are not followed."""
    target = unwrap(target)
    if not inspect.isfunction(target) or not home or _package(target) != home:
        return None
    return target, _tree_of(target), implicit


def _arg_name(node: ast.AST) -> str:
    value = node.value if isinstance(node, ast.keyword) else node
    return value.id if isinstance(value, ast.Name) else ""


def _bind(call: ast.Call, definition: ast.FunctionDef | ast.AsyncFunctionDef | None,
          implicit: bool, hints: dict[str, Any]) -> dict[str, str]:
    """{callee parameter: caller's name} for the caller's parameters the call passes."""
    if definition is None:
        return {}
    params = [a.arg for a in [*definition.args.posonlyargs, *definition.args.args]]
    params = params[1:] if implicit else params
    named = {a.arg for a in [*definition.args.args, *definition.args.kwonlyargs]}
    mapping = {}
    for position, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred) or position >= len(params):
            break
        if _arg_name(arg) in hints:
            mapping[params[position]] = _arg_name(arg)
    for keyword in call.keywords:
        if keyword.arg in named and _arg_name(keyword) in hints:
            mapping[keyword.arg] = _arg_name(keyword)
    return mapping


def _merge(theirs: dict[str, Any], mapping: dict[str, str], hints: dict[str, Any]) -> None:
    """What the callee says of its parameters, said of the caller's names passed to them."""
    for param, name in mapping.items():
        hint, mine = theirs[param], hints[name]
        mine.integer = mine.integer or hint.integer
        mine.boolean = mine.boolean or hint.boolean
        mine.labels = mine.labels or hint.labels
        mine.matrix = mine.matrix or hint.matrix
        mine.per_row = mine.per_row or hint.per_row
        mine.spd = mine.spd or hint.spd
        mine.branches += [rank for rank in hint.branches if rank not in mine.branches]
        mine.tensor = mine.tensor or hint.tensor
        mine.rank_at_least = max(mine.rank_at_least, hint.rank_at_least)
        if mine.rank is None:
            mine.rank = hint.rank
        if hint.indexes is not None and mine.indexes is None \
                and hint.indexes[0] in mapping:
            mine.indexes = (mapping[hint.indexes[0]], hint.indexes[1])
