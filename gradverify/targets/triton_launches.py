"""The Triton kernels a target launches, and their tile sizes, read from its source.

A launch is ``kernel[grid](..., BLOCK=128)`` (or ``wrap_triton(kernel)[grid](...)``) in
forward, backward, or a function of the same module they call (three calls deep). A tile size
is a launch keyword whose name says BLOCK or TILE and whose value is an int (a literal or a
module constant), and each such value of an ``@triton.autotune`` config. Bugs of tiled kernels
sit where a row stops filling whole tiles (docs/checks.md, "Tile boundaries").
"""
from __future__ import annotations

import ast
import inspect
import os
import textwrap
import types
from collections.abc import Callable, Iterator
from typing import Any

from gradverify.targets.introspection import SOURCE_ERRORS

DEPTH = 3
TILE_WORDS = ("BLOCK", "TILE")


def interpreted() -> bool:
    """Triton runs its kernels through its interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "on", "yes")


def tile_sizes(function: Any) -> dict[str, tuple[int, ...]]:
    """Kernel name -> its tile sizes, for every Triton launch reachable from the target's
    forward and backward (``function`` is the target's door: ``forward``, ``backward``)."""
    return {k: tuple(sorted(v)) for k, v in _scan(function).items() if v}


def launches(function: Any) -> tuple[str, ...]:
    """The Triton kernels the target launches, by name."""
    return tuple(_scan(function))


def _scan(function: Any) -> dict[str, set[int]]:
    found: dict[str, set[int]] = {}
    seen: set[int] = set()
    roots = [getattr(function, name, None) for name in ("forward", "backward", "setup_context")]
    for root in roots:
        for fn in _reachable(_plain(root), seen, DEPTH):
            for kernel, sizes in _launches(fn):
                found.setdefault(kernel, set()).update(sizes)
    return found


def boundary_sizes(tiles: int) -> tuple[int, ...]:
    """The sizes around one tile: 1, tile - 1, tile, tile + 1, 2 * tile + 1."""
    return tuple(sorted({1, max(1, tiles - 1), tiles, tiles + 1, 2 * tiles + 1}))


def _plain(fn: Any) -> Callable[..., Any] | None:
    fn = getattr(fn, "__func__", fn)
    fn = inspect.unwrap(fn) if callable(fn) else None
    return fn if isinstance(fn, types.FunctionType) else None


def _reachable(fn: Callable[..., Any] | None, seen: set[int], depth: int
               ) -> Iterator[types.FunctionType]:
    if not isinstance(fn, types.FunctionType) or id(fn) in seen or depth < 0:
        return
    seen.add(id(fn))
    yield fn
    for cell in fn.__closure__ or ():  # a wrapper's function (triton_op's, a decorator's)
        try:
            inner = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        yield from _reachable(_plain(inner), seen, depth - 1)
    tree = _tree(fn)
    if tree is None:
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            called = _resolve(node.func, fn.__globals__)
            if isinstance(called, types.FunctionType) \
                    and called.__module__ == fn.__module__:
                yield from _reachable(called, seen, depth - 1)


def _launches(fn: types.FunctionType) -> Iterator[tuple[str, set[int]]]:
    tree = _tree(fn)
    if tree is None:
        return
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)):
            continue
        launched = node.func.value
        if isinstance(launched, ast.Call) and launched.args:  # wrap_triton(kernel)[grid]
            launched = launched.args[0]
        kernel = _resolve(launched, fn.__globals__)
        if not _is_kernel(kernel):
            continue
        sizes = {value for kw in node.keywords if kw.arg and _is_tile(kw.arg)
                 for value in [_int(kw.value, fn.__globals__)] if value}
        sizes |= _autotuned(kernel)
        yield _name(kernel, launched), sizes


def _tree(fn: types.FunctionType) -> ast.AST | None:
    try:
        return ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except SOURCE_ERRORS:
        return None


def _resolve(node: ast.expr, scope: dict[str, Any]) -> Any:
    """The value a name or dotted attribute names in a module's globals, or None."""
    if isinstance(node, ast.Name):
        return scope.get(node.id, getattr(scope.get("__builtins__"), node.id, None))
    if isinstance(node, ast.Attribute):
        owner = _resolve(node.value, scope)
        return getattr(owner, node.attr, None) if owner is not None else None
    return None


def _is_kernel(value: Any) -> bool:
    """A Triton kernel: ``@triton.jit`` (JITFunction), or autotuned/heuristic wrappers."""
    return value is not None and type(value).__module__.startswith("triton") \
        and hasattr(value, "run")


def _is_tile(keyword: str) -> bool:
    return any(word in keyword.upper() for word in TILE_WORDS)


def _int(node: ast.expr, scope: dict[str, Any]) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value if node.value > 1 else None
    value = _resolve(node, scope)
    return value if type(value) is int and value > 1 else None


def _autotuned(kernel: Any) -> set[int]:
    sizes: set[int] = set()
    for config in getattr(kernel, "configs", None) or ():
        for key, value in (getattr(config, "kwargs", None) or {}).items():
            if _is_tile(str(key)) and type(value) is int and value > 1:
                sizes.add(value)
    return sizes


def _name(kernel: Any, node: ast.expr) -> str:
    inner = getattr(kernel, "fn", kernel)
    return str(getattr(inner, "__name__", None) or ast.unparse(node))
