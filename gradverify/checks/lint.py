"""lint: a static reading of the Function's source (``ast``) for known-bad patterns.

Runs once per target and does not need forward to work. Findings are warnings unless the
pattern is certainly wrong (a second save_for_backward that overwrites the first); a
non-static forward or backward, which torch runs, is a note.
"""
from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from types import MappingProxyType
from typing import TYPE_CHECKING

from gradverify.checks.base import Check, Outcome, Trait
from gradverify.codes import Code
from gradverify.results import Finding, Location, Severity
from gradverify.targets.introspection import SOURCE_ERRORS
from gradverify.targets.model import Capability

if TYPE_CHECKING:
    from gradverify.case.context import CheckContext

CODES = (
    Code("GV261", "saved-variables-used",
         "The source uses ctx.saved_variables.", "It is a deprecated alias of saved_tensors.",
         "x, = ctx.saved_variables", "Use ctx.saved_tensors."),
    Code("GV262", "legacy-variable-api",
         "The source uses Variable(...) or volatile=.",
         "Both have done nothing since PyTorch 0.4.", "Variable(x, volatile=True)",
         "Use tensors, and torch.no_grad()."),
    Code("GV263", "backward-leaves-graph",
         "backward uses .data or numpy without @once_differentiable.",
         "Double backward through it is silently wrong instead of raising.",
         "return grad * torch.from_numpy(np.cos(x.numpy()))",
         "Use torch ops, or decorate backward with @once_differentiable."),
    Code("GV264", "save-for-backward-twice",
         "save_for_backward is called more than once.",
         "Each call replaces the previous one: the first tensors are lost.",
         "ctx.save_for_backward(x)\nctx.save_for_backward(w)",
         "Save everything in one call: ctx.save_for_backward(x, w)."),
    Code("GV265", "non-static-method",
         "forward or backward is not a @staticmethod (a note).",
         "Function.apply looks both up on the class and passes ctx first, so they run; but "
         "they read as instance methods of an object that never exists (autograd Functions "
         "are not instantiated), and a call through an instance would bind the wrong first "
         "argument. PyTorch documents both as static methods.",
         "def forward(self, x): ...", "Use @staticmethod def forward(ctx, x)."),
)


class LintCheck(Check):
    name = "lint"
    needs = MappingProxyType({
        Capability.CLASS_SOURCE: "it reads an autograd.Function class's source"})
    default = True
    summary = "static patterns: saved_variables, Variable/volatile, .data or numpy in backward"
    codes = CODES
    traits = frozenset({Trait.ONCE_PER_TARGET})
    """Runs on the first case of each target only, and even when forward raises."""

    def run(self, ctx: CheckContext) -> Outcome:
        source = _parse_class(ctx.info.function)
        if isinstance(source, str):
            return Outcome.skip(source)
        klass, first = source
        where = _locator(ctx, first)
        outcome = Outcome()
        methods = {n.name: n for n in klass.body if isinstance(n, ast.FunctionDef)}
        self._non_static(methods, outcome, where)
        self._legacy_api(klass, outcome, where)
        backward = methods.get("backward")
        if backward is not None and not _decorated(backward, {"once_differentiable"}):
            self._leaves_graph(backward, outcome, where)
        for name in ("forward", "setup_context"):
            method = methods.get(name)
            if method is not None:
                self._save_twice(method, outcome, where)
        outcome.summary = "source read" if not outcome.findings else "patterns found"
        return outcome

    @staticmethod
    def _non_static(methods: dict[str, ast.FunctionDef], outcome: Outcome, where: _Where
                    ) -> None:
        """GV265: forward or backward defined without @staticmethod (or @classmethod)."""
        for name in ("forward", "backward"):
            method = methods.get(name)
            if method is not None and not _decorated(method, {"staticmethod", "classmethod"}):
                outcome.add(Finding(
                    "GV265", Severity.INFO,
                    f"{name} is not a @staticmethod: Function.apply calls it on the class with "
                    "ctx first, so it runs, but it reads as an instance method of an object "
                    "that never exists", location=where(method),
                    hint=f"decorate {name} with @staticmethod and name its first argument ctx"))

    @staticmethod
    def _legacy_api(klass: ast.ClassDef, outcome: Outcome, where: _Where) -> None:
        """GV261 and GV262: the pre-0.4 API anywhere in the class (ctx.saved_variables,
        Variable(...), volatile=)."""
        for node in ast.walk(klass):
            if isinstance(node, ast.Attribute) and node.attr == "saved_variables":
                outcome.add(Finding(
                    "GV261", Severity.WARNING,
                    "ctx.saved_variables is a deprecated alias", location=where(node),
                    hint="use ctx.saved_tensors"))
            elif isinstance(node, ast.Call) and _call_name(node) == "Variable":
                outcome.add(Finding(
                    "GV262", Severity.WARNING,
                    "Variable(...) has been a no-op wrapper since PyTorch 0.4",
                    location=where(node), hint="use tensors directly"))
            elif isinstance(node, ast.keyword) and node.arg == "volatile":
                outcome.add(Finding(
                    "GV262", Severity.WARNING, "volatile= has no effect since PyTorch 0.4",
                    location=where(node), hint="use `with torch.no_grad():`"))

    @staticmethod
    def _leaves_graph(backward: ast.FunctionDef, outcome: Outcome, where: _Where) -> None:
        """GV263: a backward (not @once_differentiable) that leaves the graph through .data
        or numpy, so that double backward through it is silently wrong."""
        for node in ast.walk(backward):
            if isinstance(node, ast.Attribute) and node.attr == "data":
                outcome.add(Finding(
                    "GV263", Severity.WARNING,
                    "backward uses .data, which detaches from the graph: double backward "
                    "through it is silently wrong", location=where(node),
                    hint="use the tensor itself, or mark backward @once_differentiable"))
            elif isinstance(node, ast.Call) and (_call_name(node) == "numpy"
                                                 or _numpy_module_call(node)):
                outcome.add(Finding(
                    "GV263", Severity.WARNING,
                    "backward converts to numpy, which leaves the graph: double backward "
                    "through it is silently wrong", location=where(node),
                    hint="use torch ops, or mark backward @once_differentiable"))

    @staticmethod
    def _save_twice(method: ast.FunctionDef, outcome: Outcome, where: _Where) -> None:
        """GV264: save_for_backward called more than once in ``method``; an error when two
        calls sit in one block (both certainly run), else a warning."""
        calls = [n for n in ast.walk(method)
                 if isinstance(n, ast.Call) and _call_name(n) == "save_for_backward"]
        if len(calls) < 2:
            return
        same_block = any(sum(1 for s in block if _contains(s, calls)) > 1
                         for block in _blocks(method))
        outcome.add(Finding(
            "GV264", Severity.ERROR if same_block else Severity.WARNING,
            f"save_for_backward is called {len(calls)} times in {method.name}; each call "
            "replaces what the previous one saved", location=where(calls[-1]),
            hint="save everything in one call: ctx.save_for_backward(a, b, c)"))


_Where = Callable[[ast.stmt | ast.expr | ast.keyword], Location | None]
"""Where a node of the class's source is: ``file:line``, or None when the file is unknown."""


def _parse_class(cls: type) -> tuple[ast.ClassDef, int] | str:
    """The class's syntax tree and the line it starts on in its file; or, when its source
    cannot be read or parsed, the reason to skip."""
    try:
        lines, first = inspect.getsourcelines(cls)
    except SOURCE_ERRORS:
        return "source not available"
    try:
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except SyntaxError:
        return "source could not be parsed"
    klass = next((n for n in tree.body if isinstance(n, ast.ClassDef)), None)
    if klass is None:
        return "source could not be parsed"
    return klass, first


def _locator(ctx: CheckContext, first: int) -> _Where:
    """Locate nodes of the class's source (which starts at line ``first``) in the file that
    forward or backward is defined in."""
    location = ctx.forward_location or ctx.backward_location
    file = location.file if location else None

    def where(node: ast.stmt | ast.expr | ast.keyword) -> Location | None:
        return Location(file, first + node.lineno - 1) if file else None

    return where


def _call_name(node: ast.Call) -> str | None:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def _numpy_module_call(node: ast.Call) -> bool:
    func = node.func
    return isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
        and func.value.id in ("np", "numpy")


def _decorated(method: ast.FunctionDef, names: set[str]) -> bool:
    for decorator in method.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", None)
        if name in names:
            return True
    return False


def _blocks(node: ast.AST) -> list[list[ast.stmt]]:
    blocks = []
    for child in ast.walk(node):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(child, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                blocks.append(block)
    return blocks


def _contains(statement: ast.stmt, calls: list[ast.Call]) -> bool:
    if isinstance(statement, (ast.If, ast.For, ast.While, ast.Try, ast.With)):
        return False  # a call inside a branch may not run
    return any(node in calls for node in ast.walk(statement))


CHECK = LintCheck()
