"""Source mutants of a backward: its ``def`` read with ``ast``, each mutation operator applied
at one place, the mutated function compiled in the original's module (its globals, its closure,
its decorators but ``staticmethod``/``classmethod``), at the original's file and line numbers,
so that a traceback or a line count points at the user's code. Pure Python: no torch here."""
from __future__ import annotations

import ast
import copy
import inspect
import textwrap
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from gradverify.targets.introspection import SOURCE_ERRORS, unwrap

TRANSPOSES = frozenset({"t", "transpose", "swapaxes", "swapdims"})
TRANSPOSED = frozenset({"T", "mT", "H", "mH"})
HELPERS = ("_gv_neg", "_gv_ones", "_gv_probe", "_gv_line", "_gv_view", "_gv_incoming",
           "_gv_kept", "_gv_cut")
"""Names the mutated code calls, given to it as closure variables (never the user's globals).
``_gv_line(n)`` runs before each statement of backward's own, and in each arm of an ``a if c
else b`` (``marked``): which lines ran and which arms were taken,
seen in whatever thread runs backward, with no tracer. ``_gv_view`` and ``_gv_incoming``: what
a ``.reshape`` read as ``.view`` saw of memory layouts (``operators.assume_contiguous``);
``_gv_kept``: what an overwrite wrote over (``operators.overwrite_sum``); ``_gv_cut(key,
value, index)``: ``value[index]``, and whether each slice of the index cut its dim
(``operators.probed``)."""


@dataclass(frozen=True)
class SourceMutant:
    """One mutation of backward's source."""

    key: str
    """Stable across the cases of a run (operator, node, variant)."""
    operator: str
    mutation: str
    """What changed, as the user reads it: ``grad * w`` -> ``grad``."""
    line: int
    span: tuple[int, int]
    """The lines of the statement holding the change: it ran if one of them ran."""
    tree: ast.FunctionDef
    equivalent: str | None = None
    """Why the mutant is the same function as the original, when that is certain."""
    dropped: str | None = None
    """The key of the probe on the operand a drop removes (``_gv_probe``), for why it lived."""
    dropped_text: str | None = None
    """That operand's source text."""
    returned: int | None = None
    """The returned gradient a negation concerns (its position in the returned tuple)."""
    swapped: tuple[int, int] | None = None
    """The two returned gradients a swap exchanges."""
    gate: int | None = None
    """The input whose ``needs_input_grad`` entry an ignored gate stood for."""
    arms: tuple[int, ...] = ()
    """The keys of the ``a if c else b`` arms that hold the change (``arm_key``): it ran
    only if its statement ran and each of them was taken."""
    sliced: str | None = None
    """The key of the probe on the slice whose bound the change is in (``slice:N:i``: the
    ``i``-th element of the index of the subscript that is node ``N``), for why it lived."""


@dataclass
class BackwardSource:
    """A backward function's source, ready to be mutated and compiled."""

    function: Any
    file: str
    tree: ast.FunctionDef
    grads: tuple[str, ...]
    """The names of its incoming-gradient parameters (``*grads`` as one)."""

    def compile(self, tree: ast.FunctionDef, helpers: dict[str, Any]) -> Callable[..., Any]:
        """The function ``tree`` defines, in the original's globals and closure."""
        fn = self.function
        free = list(fn.__code__.co_freevars)
        names = ", ".join([*HELPERS, *free])
        module = ast.parse(f"def _gv_factory({names}):\n    return {tree.name}\n")
        factory = module.body[0]
        assert isinstance(factory, ast.FunctionDef)
        tree = marked(tree)
        factory.body.insert(0, tree)
        inside = {id(n) for n in ast.walk(tree)}
        for node in ast.walk(module):  # the factory's own lines: backward's first
            if id(node) not in inside and hasattr(node, "lineno"):
                node.lineno = node.end_lineno = tree.lineno  # type: ignore[attr-defined]
        namespace: dict[str, Any] = {}
        exec(compile(module, self.file, "exec"), fn.__globals__, namespace)
        cells = [c.cell_contents for c in fn.__closure__ or ()]
        return namespace["_gv_factory"](*[helpers[h] for h in HELPERS], *cells)


def read_backward(fn: Any, skip: int) -> BackwardSource | None:
    """``fn``'s source as a ``def`` at its real line numbers (a lambda made one), or None when it
    has none (built in C, made by ``exec``, a lambda that shares its line with another of the
    same parameters), or when the file no longer holds the code that runs (changed, emptied or
    broken since it was imported: ``_same_code``); ``skip`` leading parameters are not
    gradients (ctx, cls)."""
    fn = unwrap(fn)
    try:
        file = inspect.getsourcefile(fn)
        lines, start = inspect.getsourcelines(fn)
    except SOURCE_ERRORS:
        return None
    try:
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except SyntaxError:
        return None
    if not file or not hasattr(fn, "__code__"):
        return None
    ast.increment_lineno(tree, start - 1)
    node = _function_node(tree, fn)
    if node is None:
        return None
    node.decorator_list = [d for d in node.decorator_list
                           if ast.unparse(d) not in ("staticmethod", "classmethod")]
    if not _same_code(node, fn, file):
        return None
    params = [a.arg for a in [*node.args.posonlyargs, *node.args.args]][skip:]
    grads = tuple(params + ([node.args.vararg.arg] if node.args.vararg is not None else []))
    return BackwardSource(fn, file, node, grads)


def _same_code(node: ast.FunctionDef, fn: Any, file: str) -> bool:
    """Whether ``node``, compiled, is the code that runs (``fn``'s): the same local names, the
    same global and attribute names (a closure's variables read as globals at module level),
    statements on the same lines. A file changed since its import reads otherwise, and its
    mutants would be of code that never runs. ``node`` is compiled in a class of its class's
    name where it has one (``__private`` names are mangled there), and names no source can
    hold (pytest's rewritten asserts: ``@py_assert1``) are left out."""
    code = fn.__code__
    owner = fn.__qualname__.split(".")[-2] if "." in fn.__qualname__ else None
    body: list[ast.stmt] = [copy.deepcopy(node)]
    if owner is not None and owner.isidentifier():
        holder = ast.parse(f"class {owner}: pass").body[0]  # every field this Python's ast has
        assert isinstance(holder, ast.ClassDef)
        holder.body = body
        body = [holder]
    try:
        module = ast.fix_missing_locations(ast.Module(body=body, type_ignores=[]))
        compiled = compile(module, file, "exec")
    except (SyntaxError, ValueError, TypeError):
        return False
    inner = _code_named(compiled, node.name)  # (a lambda's is read as a def: _gv_lambda)
    if inner is None:
        return False

    def lines(of: types.CodeType) -> set[int]:  # its first is the def's, or a decorator's
        return {line for _, _, line in of.co_lines() if line not in (None, of.co_firstlineno)}

    def names(of: tuple[str, ...]) -> set[str]:
        return {name for name in of if not name.startswith("@")}

    free = names(code.co_freevars) | names(code.co_cellvars)
    rewritten = any(name.startswith("@py_") for name in code.co_varnames + code.co_names)
    return (names(inner.co_varnames) | names(inner.co_cellvars)) - free \
        == (names(code.co_varnames) | names(code.co_cellvars)) - free \
        and (rewritten  # its asserts read names of pytest's that no source holds
             or names(code.co_names) <= names(inner.co_names) <= names(code.co_names) | free) \
        and lines(inner) == lines(code) \
        and (rewritten or _operations(inner) == _operations(code))


_OPERATIONS = ("BINARY_", "UNARY_", "COMPARE_OP", "INPLACE_", "CONTAINS_OP", "IS_OP")


def _operations(code: types.CodeType) -> list[tuple[str, str]]:
    """The constants and the operators ``code`` computes with, in order, its nested functions'
    included: ``g * 2`` edited to ``g * 3 + 1`` keeps every name and line, not these."""
    import dis

    found: list[tuple[str, str]] = []
    for instruction in dis.get_instructions(code):
        if instruction.opname == "LOAD_CONST" and not isinstance(instruction.argval,
                                                                 types.CodeType):
            found.append(("const", repr(instruction.argval)))
        elif instruction.opname.startswith(_OPERATIONS):
            found.append((instruction.opname, instruction.argrepr))
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found += _operations(const)
    return found


def _code_named(code: types.CodeType, name: str) -> types.CodeType | None:
    """The code object of the function ``name`` compiled in ``code`` (in a class body, or at
    its top level)."""
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            if const.co_name == name:
                return const
            found = _code_named(const, name)
            if found is not None:
                return found
    return None


def _function_node(tree: ast.Module, fn: Any) -> ast.FunctionDef | None:
    """The ``def`` of ``fn`` in its parsed source; a lambda (``register_autograd(lambda ctx, g:
    ...)``) becomes a ``def`` returning its body, found by its line and parameters."""
    if fn.__name__ != "<lambda>":
        defs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
        return defs[0] if defs else None
    code = fn.__code__
    params = list(code.co_varnames[:code.co_argcount])
    found = [n for n in ast.walk(tree) if isinstance(n, ast.Lambda)
             and n.lineno == code.co_firstlineno and [a.arg for a in n.args.args] == params]
    if len(found) != 1:
        return None
    node = ast.parse("def _gv_lambda(): pass").body[0]  # every field this Python's ast has
    assert isinstance(node, ast.FunctionDef)
    node.args = found[0].args
    node.body = [ast.copy_location(ast.Return(value=found[0].body), found[0].body)]
    return ast.fix_missing_locations(ast.copy_location(node, found[0]))


def marked(tree: ast.FunctionDef) -> ast.FunctionDef:
    """A copy of ``tree`` with ``_gv_line(n)`` before each of its own statements (those of
    nested functions and classes left alone), ``n`` the statement's first line, and in each
    arm of an ``a if c else b`` (``arm_key``)."""
    tree = copy.deepcopy(tree)
    for node in list(_own_nodes(tree)):  # each arm of an `a if c else b`: its key when taken
        if isinstance(node, ast.IfExp):
            node.body, node.orelse = _armed(node.body), _armed(node.orelse)
    for node in [tree, *_own_nodes(tree)]:
        if isinstance(node, (ast.Lambda, ast.ClassDef)) or (
                node is not tree and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))):
            continue
        for name in ("body", "orelse", "finalbody"):
            statements = getattr(node, name, None)
            if isinstance(statements, list) and statements \
                    and isinstance(statements[0], ast.stmt):
                setattr(node, name, [s for statement in statements
                                     for s in (_marker(statement), statement)])
    return tree


def arm_key(arm: ast.expr) -> int:
    """The key ``_gv_line`` records when one arm of an ``a if c else b`` is taken: negative,
    never a line number; from the arm's place in the file, which a mutant keeps."""
    return -(arm.lineno * 100_000 + arm.col_offset + 1)


def _armed(arm: ast.expr) -> ast.expr:
    """``arm`` as ``_gv_line(key) or arm``: the same value (``_gv_line`` returns None), its
    taking recorded."""
    marker = _call("_gv_line", ast.Constant(value=arm_key(arm)))
    return ast.fix_missing_locations(ast.copy_location(
        ast.BoolOp(op=ast.Or(), values=[marker, arm]), arm))


def _marker(statement: ast.stmt) -> ast.stmt:
    call = _call("_gv_line", ast.Constant(value=statement.lineno))
    return ast.fix_missing_locations(ast.copy_location(ast.Expr(value=call), statement))


def _own_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function's body, not those of functions or classes defined in it."""
    for child in ast.iter_child_nodes(node):
        yield child
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                                  ast.ClassDef)):
            yield from _own_nodes(child)


def _short(node: ast.AST, limit: int = 48) -> str:
    text = ast.unparse(node)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Site:
    """One place to mutate: the node's index among the function's own nodes, in order."""

    def __init__(self, source: BackwardSource) -> None:
        self.source = source
        self.nodes = list(_own_nodes(source.tree))
        self.parents = {id(child): parent for parent in [source.tree, *self.nodes]
                        for child in ast.iter_child_nodes(parent)}

    def span(self, node: ast.AST) -> tuple[int, int]:
        """The lines of the innermost statement holding ``node``."""
        while not isinstance(node, ast.stmt):
            node = self.parents[id(node)]
        return node.lineno, node.end_lineno or node.lineno

    def arms(self, node: ast.AST) -> tuple[int, ...]:
        """The keys of the ``a if c else b`` arms that hold ``node`` (``arm_key``)."""
        found = []
        while not isinstance(node, ast.stmt):
            parent = self.parents[id(node)]
            if isinstance(parent, ast.IfExp) and node is not parent.test:
                found.append(arm_key(node))  # type: ignore[arg-type]
            node = parent
        return tuple(found)

    def sliced(self, node: ast.AST) -> str | None:
        """The probe key of the slice (of a subscript that reads) whose bound holds ``node``
        (``SourceMutant.sliced``), or None."""
        while not isinstance(node, ast.stmt):
            parent = self.parents[id(node)]
            if isinstance(parent, ast.Slice):
                holder = self.parents[id(parent)]
                index = holder.elts.index(parent) if isinstance(holder, ast.Tuple) else 0
                subscript = self.parents[id(holder)] if isinstance(holder, ast.Tuple) \
                    else holder
                if isinstance(subscript, ast.Subscript) and isinstance(subscript.ctx, ast.Load):
                    return f"slice:{self.nodes.index(subscript)}:{index}"
                return None
            node = parent
        return None

    def replaced(self, node: ast.AST, new: ast.AST | None) -> ast.FunctionDef:
        """A copy of the function with ``node`` replaced by ``new`` (None: the statement goes,
        ``pass`` in its place)."""
        tree = copy.deepcopy(self.source.tree)
        target = list(_own_nodes(tree))[self.nodes.index(node)]
        for parent in [tree, *_own_nodes(tree)]:
            for field, value in ast.iter_fields(parent):
                if value is target:
                    setattr(parent, field, _placed(new, target))
                elif isinstance(value, list) and any(v is target for v in value):
                    value[[id(v) for v in value].index(id(target))] = \
                        _placed(new if new is not None else ast.Pass(), target)
        return tree

    def mutant(self, operator: str, node: ast.AST, new: ast.AST | None, variant: int = 0,
               shown: str | None = None, text: str | None = None, **extra: Any
               ) -> SourceMutant:
        """The mutant replacing ``node`` by ``new`` (None: the statement removed); its text
        is ```node` -> `new```, with ``shown`` for ``new``, or ``text`` whole."""
        after = shown if shown is not None else _short(new) if new is not None else None
        mutation = text or (f"`{_short(node)}` -> `{after}`" if after is not None
                            else f"`{_short(node)}` removed")
        return SourceMutant(
            key=f"{operator}:{self.nodes.index(node)}:{variant}", operator=operator,
            mutation=mutation, line=node.lineno,  # type: ignore[attr-defined]
            span=self.span(node), tree=self.replaced(node, new), arms=self.arms(node),
            sliced=self.sliced(node), **extra)


def _placed(new: ast.AST | None, old: ast.AST) -> Any:
    if new is None:
        return None
    return ast.fix_missing_locations(ast.copy_location(new, old))


def _call(helper: str, *args: ast.expr) -> ast.Call:
    return ast.Call(func=ast.Name(id=helper, ctx=ast.Load()), args=list(args), keywords=[])


def _is_number(node: ast.AST, value: float) -> bool:
    return isinstance(node, ast.Constant) and not isinstance(node.value, bool) \
        and isinstance(node.value, (int, float)) and node.value == value


def _is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None
