"""An in-place write as the user wrote it, and its out-of-place form: the hint for a saved tensor
changed in place quotes the line (``y /= y.sum()``) and says what to write instead
(``y = y / y.sum()``), whichever spelling the line uses (``/=``, ``+=``, ``y.div_(s)``,
``y[mask] = 0``). Works on the text of a line; no torch."""
from __future__ import annotations

import ast
from dataclasses import dataclass

_OPERATORS: dict[type[ast.operator], str] = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
    ast.Mod: "%", ast.Pow: "**", ast.MatMult: "@", ast.BitAnd: "&", ast.BitOr: "|",
}
_METHODS = {"add_": "+", "sub_": "-", "mul_": "*", "div_": "/", "pow_": "**"}


@dataclass(frozen=True)
class InPlace:
    """One in-place write: the line as written and what to write instead."""

    written: str
    instead: str
    """An out-of-place line (``x = x / s``), or, for an indexed write, the clone before it."""
    indexed: bool = False

    def advice(self) -> str:
        if self.indexed:
            return (f"`{self.written}` writes in place: write `{self.instead}` before it, so "
                    "that it writes into a new tensor")
        return f"`{self.written}` writes in place: write `{self.instead}` (a new tensor)"


def parse(line: str) -> InPlace | None:
    """``x /= s`` -> ``x = x / s``; ``x.mul_(a)`` -> ``x = x * a``; ``x.clamp_(0)`` ->
    ``x = x.clamp(0)``; ``x[i] = v`` -> ``x = x.clone()`` before it."""
    text = line.strip()
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    if len(tree.body) != 1:
        return None
    node = tree.body[0]
    if isinstance(node, ast.AugAssign) and type(node.op) in _OPERATORS:
        target = ast.unparse(node.target)
        value = ast.unparse(node.value)
        return InPlace(text, f"{target} = {target} {_OPERATORS[type(node.op)]} {value}")
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) \
            and isinstance(node.value.func, ast.Attribute) \
            and node.value.func.attr.endswith("_") and not node.value.func.attr.startswith("_"):
        call = node.value
        method = call.func.attr  # type: ignore[attr-defined]
        target = ast.unparse(call.func.value)  # type: ignore[attr-defined]
        arguments = ", ".join(ast.unparse(a) for a in [*call.args, *call.keywords])
        if method in _METHODS and len(call.args) == 1 and not call.keywords:
            return InPlace(text, f"{target} = {target} {_METHODS[method]} {arguments}")
        return InPlace(text, f"{target} = {target}.{method[:-1]}({arguments})")
    if isinstance(node, ast.Assign) and len(node.targets) == 1 \
            and isinstance(node.targets[0], ast.Subscript):
        target = ast.unparse(node.targets[0].value)
        return InPlace(text, f"{target} = {target}.clone()", indexed=True)
    return None
