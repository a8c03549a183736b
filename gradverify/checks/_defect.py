"""Where a wrong gradient comes from: the line of backward that computes it (the element of
its executed ``return`` at the input's position, found by running backward once,
``frames.traced``, and reading that ``return`` with ``ast``; where the element is a local name,
the statement that last assigned it in that run, through plain copies and reshapes), and what
forward did to the values backward reads (a saved tensor changed after saving). Imports torch
inside (a helper module: checks import it in ``run``)."""
from __future__ import annotations

import ast
from collections.abc import Collection
from dataclasses import replace
from typing import TYPE_CHECKING

from gradverify import frames
from gradverify.results import Location
from gradverify.targets import Capability

if TYPE_CHECKING:
    from gradverify.case.context import CheckContext
    from gradverify.checks.base import Outcome


def at_return_lines(ctx: CheckContext, outcome: Outcome) -> None:
    """Each wrong gradient (GV121 about an input) located at the line of backward that
    computes it, where that can be known (``gradient_lines``)."""
    names = [f.input for f in outcome.findings if f.code == "GV121" and f.input]
    lines = gradient_lines(ctx, names) if names else {}
    outcome.findings[:] = [replace(f, location=lines[f.input])
                           if f.code == "GV121" and f.input in lines else f
                           for f in outcome.findings]


def gradient_lines(ctx: CheckContext, names: Collection[str]) -> dict[str, Location]:
    """For a Function class: the line of each named input's gradient in the ``return``
    statement backward executed (the tuple's element at the input's position; the
    ``return`` itself when it returns no literal tuple), or, where that element is a local
    name, the line of the statement that last assigned it as backward ran (``_assigned``).
    Empty when backward cannot be run once more, or has no Python source."""
    import inspect

    from gradverify.checks import _calls as calls

    backward = getattr(ctx.info.function, "backward", None)
    code = getattr(inspect.unwrap(backward), "__code__", None) if backward else None
    if code is None or not ctx.info.has(Capability.CLASS_SOURCE):
        return {}
    args = ctx.args("double")
    try:
        applied = calls.apply(ctx.info, args)
        grads = calls.random_grads(applied, ctx.generator("gradcheck-return"))
        run = frames.traced(code, lambda: calls.raw_backward(ctx.info, applied, grads))
    except Exception:  # noqa: BLE001 -- a location only: backward's own def stays
        return {}
    found_return = _return_at(run.returned.file, run.returned.line) if run else None
    if run is None or found_return is None:
        return {}
    statement, tree = found_return
    file = run.returned.location().file
    elements = statement.value.elts if isinstance(statement.value, ast.Tuple) and not any(
        isinstance(e, ast.Starred) for e in statement.value.elts) else None
    found = {}
    for name in names:
        position = args.names.index(name) if name in args.names else None
        element = elements[position] if elements is not None and position is not None \
            and position < len(elements) else None
        if element is None and elements is None and len(args.names) == 1:
            element = statement.value  # one input: `return gx`
        line = element.lineno if element is not None else statement.lineno
        if element is not None:
            line = _assigned(element, tree, run.lines) or line
        found[name] = Location(file, line)
    return found


_SHAPING = frozenset({"view", "reshape", "view_as", "reshape_as", "t", "transpose",
                      "permute", "contiguous", "clone", "squeeze", "unsqueeze", "flatten",
                      "expand", "expand_as", "sum_to_size", "to", "type_as", "detach"})
"""Methods that move a gradient's values, never compute them: ``gx.view(shape)`` is the
value of ``gx``, whose assignment is where a wrong value was computed."""


def _assigned(element: ast.expr | None, tree: ast.AST, ran: tuple[int, ...]) -> int | None:
    """The line of the statement that last gave ``element`` its value in the run whose lines
    are ``ran`` (in order), where ``element`` is a local name (or a reshape of one): its last
    assignment or in-place change (``gx[0] = 0``, ``gx.mul_(2)``) before the ``return``,
    followed through plain copies (``gx = tmp``, ``gx[..., :n] = tmp.reshape(s)``). None
    where there is none to follow (a parameter, a value read from ``ctx``)."""
    name = _root_name(element)
    if name is None:
        return None
    ctx = _first_parameter(tree)
    statements = _statements(tree)
    for index in range(len(ran) - 1, -1, -1):
        for found in statements.get(ran[index], ()):
            if _changes_in_place(found, name):
                copied = _copied_into(found, name)
                if copied is None or _root(found.value) == ctx:  # type: ignore[attr-defined]
                    return found.lineno
                name = copied  # `gx[..., :n] = tmp.reshape(s)`: computed where tmp was
                break
            if not isinstance(found, (ast.Assign, ast.AugAssign, ast.AnnAssign)) \
                    or name not in _targets(found):
                continue
            if isinstance(found, ast.AugAssign):
                return found.lineno
            if _root(found.value) == ctx:
                return None  # the name holds what forward saved: no computation to point at
            alias = _root_name(found.value)
            if alias is None or alias == name:
                return found.lineno
            name = alias  # `gx = tmp.t()`: the value was computed where tmp was
            break
    return None


def _copied_into(statement: ast.stmt, name: str) -> str | None:
    """The local whose value ``name[...] = other`` (or ``name[...] = other.reshape(s)``)
    copies into part of ``name``; None for anything that computes."""
    if not isinstance(statement, ast.Assign) or len(statement.targets) != 1 \
            or not isinstance(statement.targets[0], ast.Subscript):
        return None
    alias = _root_name(statement.value)
    return alias if alias is not None and alias != name else None


def _root_name(node: ast.expr | None) -> str | None:
    """``gx`` for ``gx``, ``gx.view(s)``, ``gx.t()``, ``gx.T``, ``gx.mT``; else None."""
    while node is not None:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in _SHAPING:
            node = node.func.value
        elif isinstance(node, ast.Attribute) and node.attr in ("T", "mT", "data"):
            node = node.value
        else:
            return None
    return None


def _root(node: ast.expr | None) -> str | None:
    """The name an expression reads from, through attributes, items and method calls:
    ``ctx`` for ``ctx.saved_tensors[0]``, ``ctx.scale``, ``ctx.saved_tensors[0].t()``."""
    while node is not None:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            node = node.func.value
        else:
            return None
    return None


def _first_parameter(tree: ast.AST) -> str | None:
    """The name backward's ``ctx`` has (its first parameter)."""
    if isinstance(tree, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        params = [*tree.args.posonlyargs, *tree.args.args]
        return params[0].arg if params else None
    return None


def _statements(tree: ast.AST) -> dict[int, list[ast.stmt]]:
    """The simple statements of ``tree`` by the line each starts on."""
    found: dict[int, list[ast.stmt]] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr)):
            found.setdefault(node.lineno, []).append(node)
    return found


def _changes_in_place(statement: ast.stmt, name: str) -> bool:
    """``name[...] = v``, ``name.attr = v`` or a call of an in-place method of ``name``
    (``name.mul_(2)``)."""
    if isinstance(statement, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        return any(isinstance(t, (ast.Subscript, ast.Attribute)) and _root(t) == name
                   for t in targets)
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        func = statement.value.func
        return isinstance(func, ast.Attribute) and func.attr.endswith("_") \
            and not func.attr.startswith("_") and _root(func.value) == name
    return False


def _targets(statement: ast.Assign | ast.AugAssign | ast.AnnAssign) -> set[str]:
    targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
    names: set[str] = set()
    for target in targets:
        names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)
                  and isinstance(n.ctx, ast.Store)}
    return names


def _return_at(file: str, line: int) -> tuple[ast.Return, ast.AST] | None:
    """The innermost ``return`` statement of ``file`` that spans ``line``, and the innermost
    function that holds it."""
    try:
        with open(file, encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError, ValueError):
        return None

    def spans(node: ast.AST) -> bool:
        return node.lineno <= line <= (node.end_lineno or node.lineno)  # type: ignore[attr-defined]

    returns = [node for node in ast.walk(tree) if isinstance(node, ast.Return) and spans(node)]
    statement = min(returns, key=lambda n: (n.end_lineno or n.lineno) - n.lineno, default=None)
    if statement is None:
        return None
    holders = [node for node in ast.walk(tree) if isinstance(
        node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and spans(node)]
    holder = min(holders, key=lambda n: (n.end_lineno or n.lineno) - n.lineno, default=tree)
    return statement, holder


def saved_then_changed_hint(ctx: CheckContext) -> str | None:
    """When forward changes a saved tensor after saving it, that is the likely cause of a
    mismatch (the formula may well be right): say so in the hint (mutation reports GV224)."""
    from gradverify.checks import _saved_changes as saved_changes

    try:
        found = saved_changes.saved_then_changed(ctx.info, ctx.args("double"))
    except Exception:  # noqa: BLE001 -- a hint only
        return None
    # an output saved and then changed is read back as forward returned it: no suspect
    found = [f for f in found if not f.label.startswith("output")]
    if not found:
        return None
    return f"{found[0].describe()}; {found[0].hint()} (see mutation, GV224)"
