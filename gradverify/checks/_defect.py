"""Where a wrong gradient comes from: the line of backward that gives it (the element of its
executed ``return`` at the input's position, found by running backward once,
``frames.returned_at``, and reading that ``return`` with ``ast``), and what forward did to the
values backward reads (a saved tensor changed after saving). Imports torch inside (a helper
module: checks import it in ``run``)."""
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
    """Each wrong gradient (GV121 about an input) located at the line of backward's
    ``return`` that gives it, where that can be known."""
    names = [f.input for f in outcome.findings if f.code == "GV121" and f.input]
    lines = gradient_lines(ctx, names) if names else {}
    outcome.findings[:] = [replace(f, location=lines[f.input])
                           if f.code == "GV121" and f.input in lines else f
                           for f in outcome.findings]


def gradient_lines(ctx: CheckContext, names: Collection[str]) -> dict[str, Location]:
    """For a Function class: the line of each named input's gradient in the ``return``
    statement backward executed (the tuple's element at the input's position; the
    ``return`` itself when it returns no literal tuple). Empty when backward cannot be run
    once more, or has no Python source."""
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
        returned = frames.returned_at(code, lambda: calls.raw_backward(ctx.info, applied, grads))
    except Exception:  # noqa: BLE001 -- a location only: backward's own def stays
        return {}
    statement = _return_at(returned.file, returned.line) if returned else None
    if returned is None or statement is None:
        return {}
    file = returned.location().file
    elements = statement.value.elts if isinstance(statement.value, ast.Tuple) and not any(
        isinstance(e, ast.Starred) for e in statement.value.elts) else None
    found = {}
    for name in names:
        position = args.names.index(name) if name in args.names else None
        element = elements[position] if elements is not None and position is not None \
            and position < len(elements) else None
        found[name] = Location(file, element.lineno if element is not None else statement.lineno)
    return found


def _return_at(file: str, line: int) -> ast.Return | None:
    """The innermost ``return`` statement of ``file`` that spans ``line``."""
    try:
        with open(file, encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError, ValueError):
        return None
    spanning = [node for node in ast.walk(tree) if isinstance(node, ast.Return)
                and node.lineno <= line <= (node.end_lineno or node.lineno)]
    return min(spanning, key=lambda n: (n.end_lineno or n.lineno) - n.lineno, default=None)


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
