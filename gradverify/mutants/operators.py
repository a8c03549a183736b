"""The mutation operators over backward's source, one function each: every place an operator
applies gives one ``SourceMutant`` (``gradverify.mutants.source``)."""
from __future__ import annotations

import ast
import copy
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from gradverify.mutants.source import (
    TRANSPOSED,
    TRANSPOSES,
    BackwardSource,
    SourceMutant,
    _call,
    _is_none,
    _is_number,
    _own_nodes,
    _short,
    _Site,
)


def _returned(node: ast.Return) -> list[ast.expr]:
    if node.value is None:
        return []
    return list(node.value.elts) if isinstance(node.value, ast.Tuple) else [node.value]


def negate_returned(site: _Site) -> list[SourceMutant]:
    """Negate one returned gradient."""
    found = []
    for node in site.nodes:
        if not isinstance(node, ast.Return):
            continue
        for i, value in enumerate(_returned(node)):
            if _is_none(value):
                continue
            zero = "it is the constant 0" if _is_number(value, 0) else None
            simple = isinstance(value, (ast.Name, ast.Attribute, ast.Call, ast.Subscript))
            shown = f"-{_short(value)}" if simple else f"-({_short(value)})"
            found.append(site.mutant("negate", value, _call("_gv_neg", copy.deepcopy(value)),
                                     shown=shown, returned=i, equivalent=zero))
    return found


def _dropping(site: _Site, operand: ast.expr, neutral: int) -> dict[str, Any]:
    """What a mutant that drops ``operand`` records: its probe, its text, and whether it is
    the constant that changes nothing (``neutral``: 1 for a factor, 0 for a term)."""
    what = "factor" if neutral else "term"
    return {"dropped": f"operand:{site.nodes.index(operand)}",
            "dropped_text": _short(operand, 32),
            "equivalent": f"the {what} dropped is the constant {neutral}"
            if _is_number(operand, neutral) else None}


def drop_factor(site: _Site) -> list[SourceMutant]:
    """Drop one multiplicative factor (a divisor included)."""
    found = []
    for node in site.nodes:
        if not isinstance(node, ast.BinOp) or not isinstance(node.op, (ast.Mult, ast.Div)):
            continue
        pairs = [(node.left, node.right)]
        if isinstance(node.op, ast.Mult):
            pairs.append((node.right, node.left))
        for variant, (kept, dropped) in enumerate(pairs):
            found.append(site.mutant("drop-factor", node, copy.deepcopy(kept), variant,
                                     **_dropping(site, dropped, 1)))
    return found


def drop_term(site: _Site) -> list[SourceMutant]:
    """Drop one additive term: of a sum or difference, or an ``x += term`` statement."""
    found = []
    for node in site.nodes:
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            right = copy.deepcopy(node.right)
            other: ast.expr = right if isinstance(node.op, ast.Add) \
                else ast.UnaryOp(op=ast.USub(), operand=right)
            for variant, (kept, dropped) in enumerate([(copy.deepcopy(node.left), node.right),
                                                       (other, node.left)]):
                found.append(site.mutant("drop-term", node, kept, variant,
                                         **_dropping(site, dropped, 0)))
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, (ast.Add, ast.Sub)):
            found.append(site.mutant("drop-term", node, None, **_dropping(site, node.value, 0)))
    return found


def swap_returned(site: _Site) -> list[SourceMutant]:
    """Swap two returned gradients (those of inputs of one shape: the engine decides)."""
    found = []
    for node in site.nodes:
        if not isinstance(node, ast.Return) or not isinstance(node.value, ast.Tuple):
            continue
        elts = node.value.elts
        for i in range(len(elts)):
            for j in range(i + 1, len(elts)):
                if _is_none(elts[i]) or _is_none(elts[j]):
                    continue
                swapped = [copy.deepcopy(e) for e in elts]
                swapped[i], swapped[j] = swapped[j], swapped[i]
                same = "the two gradients swapped are the same expression" \
                    if ast.dump(elts[i]) == ast.dump(elts[j]) else None
                found.append(site.mutant(
                    "swap", node.value, ast.Tuple(elts=swapped, ctx=ast.Load()), i * 64 + j,
                    text=f"returned `{_short(elts[i], 24)}` and `{_short(elts[j], 24)}` swapped",
                    swapped=(i, j), equivalent=same))
    return found


def drop_transpose(site: _Site) -> list[SourceMutant]:
    """Drop a transpose: ``x.t()``, ``x.transpose(a, b)``, ``torch.t(x)``, ``x.T``, ``x.mT``."""
    found = []
    for node in site.nodes:
        kept: ast.expr | None = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in TRANSPOSES:
            owner = node.func.value
            if isinstance(owner, ast.Name) and owner.id == "torch":
                kept = node.args[0] if node.args else None
            else:
                kept = owner
        elif isinstance(node, ast.Attribute) and node.attr in TRANSPOSED \
                and isinstance(node.ctx, ast.Load):
            kept = node.value
        if kept is not None:
            found.append(site.mutant("drop-transpose", node, copy.deepcopy(kept)))
    return found


def ones_incoming(site: _Site) -> list[SourceMutant]:
    """Replace an incoming gradient by ones (backward then ignores what it is given)."""
    found = []
    tree = site.source.tree
    for position, name in enumerate(site.source.grads):
        reads = [n for n in site.nodes if isinstance(n, ast.Name) and n.id == name
                 and isinstance(n.ctx, ast.Load)]
        first = reads[0] if reads else tree
        mutated = copy.deepcopy(tree)
        assign = ast.parse(f"{name} = _gv_ones({name})").body[0]
        mutated.body.insert(0, ast.fix_missing_locations(ast.copy_location(assign, tree.body[0])))
        span = site.span(first) if reads else (tree.lineno, tree.lineno)
        found.append(SourceMutant(
            key=f"ones:{position}", operator="ones", mutation=f"`{name}` -> `ones_like({name})`",
            line=first.lineno, span=span, tree=mutated,
            equivalent=None if reads else f"backward never reads {name}"))
    return found


def ignore_gate(site: _Site) -> list[SourceMutant]:
    """Ignore a ``needs_input_grad`` gate: the entry read as True."""
    found = []
    inner = {id(n.value) for n in site.nodes if isinstance(n, ast.Subscript)}
    for node in site.nodes:
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) \
                and node.value.attr == "needs_input_grad":
            index = node.slice.value if isinstance(node.slice, ast.Constant) \
                and isinstance(node.slice.value, int) else None
            found.append(site.mutant("gate", node, ast.Constant(value=True), gate=index))
        elif isinstance(node, ast.Attribute) and node.attr == "needs_input_grad" \
                and id(node) not in inner and isinstance(node.ctx, ast.Load):
            every = ast.parse(f"(True,) * len({ast.unparse(node)})", mode="eval").body
            found.append(site.mutant("gate", node, every, shown="(True, ...)"))
    return found


def assume_contiguous(site: _Site) -> list[SourceMutant]:
    """Read a ``.reshape`` as ``.view`` (``x.reshape(s)``, ``torch.reshape(x, s)``): the
    backward that assumes contiguous memory, which breaks on a permuted incoming gradient (a
    downstream ``.transpose(1, 2)`` hands backward one). ``_gv_view`` records whether the
    tensor was contiguous, and a prologue ``_gv_incoming`` whether backward was handed a
    non-contiguous gradient, for why such a mutant lived (``engine``)."""
    found = []
    for node in site.nodes:
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute) \
                or node.func.attr != "reshape" or node.keywords:
            continue
        owner = node.func.value
        if isinstance(owner, ast.Name) and owner.id == "torch":
            if len(node.args) != 2:
                continue
            tensor, shape = node.args[0], node.args[1:]
        else:
            tensor, shape = owner, node.args
        new = _call("_gv_view", copy.deepcopy(tensor), *[copy.deepcopy(a) for a in shape])
        owner_text = _short(tensor, 32)
        if not isinstance(tensor, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)):
            owner_text = f"({owner_text})"
        shown = f"{owner_text}.view({', '.join(_short(a, 16) for a in shape)})"
        same = ("it keeps every dim but the last, which it splits, and `.view` splits a dim "
                "in any layout") if _splits_last(tensor, shape) else None
        mutant = site.mutant("view", node, new, shown=shown, equivalent=same)
        found.append(replace(mutant, tree=_with_incoming(mutant.tree, site.source.grads)))
    return found


def _splits_last(tensor: ast.expr, shape: list[ast.expr]) -> bool:
    """Whether ``tensor.reshape(*shape)`` is ``t.reshape(*t.shape[:-1], ...)`` of ``t`` or of
    ``t[..., a:b]``: every dim kept but the last, which is split (no merge: no layout it cannot
    take)."""
    if not shape or not isinstance(shape[0], ast.Starred):
        return False
    lead = shape[0].value
    if not (isinstance(lead, ast.Subscript) and isinstance(lead.slice, ast.Slice)
            and lead.slice.lower is None and lead.slice.step is None
            and isinstance(lead.slice.upper, ast.UnaryOp)
            and isinstance(lead.slice.upper.op, ast.USub)
            and _is_number(lead.slice.upper.operand, 1)
            and isinstance(lead.value, ast.Attribute) and lead.value.attr == "shape"):
        return False
    owner = lead.value.value
    if isinstance(tensor, ast.Subscript) and isinstance(tensor.slice, ast.Tuple) \
            and len(tensor.slice.elts) == 2 and isinstance(tensor.slice.elts[0], ast.Constant) \
            and tensor.slice.elts[0].value is Ellipsis \
            and isinstance(tensor.slice.elts[1], ast.Slice):
        tensor = tensor.value
    return ast.dump(tensor) == ast.dump(owner) and not any(
        isinstance(n, ast.Starred) for n in shape[1:])


def _with_incoming(tree: ast.FunctionDef, grads: tuple[str, ...]) -> ast.FunctionDef:
    """``tree`` with ``_gv_incoming(<incoming gradients>)`` as its first statement."""
    call = _call("_gv_incoming", *[ast.Name(id=g, ctx=ast.Load()) for g in grads])
    statement = ast.fix_missing_locations(ast.copy_location(ast.Expr(value=call), tree.body[0]))
    tree.body.insert(0, statement)
    return tree


def overwrite_sum(site: _Site) -> list[SourceMutant]:
    """Overwrite where backward adds up: ``t[i] += v`` as ``t[i] = v``, ``acc += v`` as
    ``acc = v``: the backward that keeps only the last of overlapping windows, or the last
    block of a loop. ``_gv_kept`` records whether what it writes over held anything."""
    found = []
    for node in site.nodes:
        if not isinstance(node, ast.AugAssign) or not isinstance(node.op, ast.Add) \
                or not isinstance(node.target, (ast.Name, ast.Subscript)):
            continue
        before = _loaded(copy.deepcopy(node.target))
        new = ast.copy_location(ast.Assign(
            targets=[copy.deepcopy(node.target)],
            value=_call("_gv_kept", before, copy.deepcopy(node.value))), node)
        text = f"`{_short(node)}` -> `{_short(node.target, 24)} = {_short(node.value, 24)}`"
        found.append(site.mutant("overwrite", node, new, text=text))
    return found


def _loaded(node: ast.expr) -> ast.expr:
    """``node`` (an assignment's target) read instead of written."""
    node.ctx = ast.Load()  # type: ignore[attr-defined]
    return node


OPERATORS: tuple[Callable[[_Site], list[SourceMutant]], ...] = (
    negate_returned, drop_factor, drop_term, swap_returned, drop_transpose, ones_incoming,
    ignore_gate, assume_contiguous, overwrite_sum)


def source_mutants(source: BackwardSource) -> list[SourceMutant]:
    """Every mutant of backward's source, in a fixed order (the same in every case's run).
    No term or factor is dropped, nor a sum overwritten, inside a ``while`` loop: ``i = i + 1``
    made ``i = i`` (or ``i += 1`` made ``i = 1``) would never end (a timeout, not a
    verdict)."""
    site = _Site(source)
    looping = {n.lineno for node in site.nodes if isinstance(node, ast.While)
               for n in ast.walk(node) if isinstance(n, ast.stmt)}
    return [m for operator in OPERATORS for m in operator(site)
            if not (m.operator in ("drop-term", "drop-factor", "overwrite")
                    and m.line in looping)]


def probed(source: BackwardSource, mutants: list[SourceMutant]) -> ast.FunctionDef:
    """Backward with every dropped operand wrapped in ``_gv_probe(key, operand)``, and every
    subscript with a mutated slice bound made ``_gv_cut(key, value, index)``: the same
    function, recording what the operands a drop removes were and whether those slices cut,
    for why a mutant lived."""
    keys = {m.dropped for m in mutants if m.dropped}
    cuts = {m.sliced.rsplit(":", 1)[0] for m in mutants if m.sliced}
    tree = copy.deepcopy(source.tree)
    nodes = list(_own_nodes(tree))
    for parent in [tree, *nodes]:
        for field, value in ast.iter_fields(parent):
            if not isinstance(value, ast.expr):
                continue
            if f"operand:{_index(nodes, value)}" in keys:
                key = ast.Constant(value=f"operand:{_index(nodes, value)}")
                setattr(parent, field, ast.fix_missing_locations(ast.copy_location(
                    _call("_gv_probe", key, value), value)))
            elif isinstance(value, ast.Subscript) and f"slice:{_index(nodes, value)}" in cuts:
                key = ast.Constant(value=f"slice:{_index(nodes, value)}")
                setattr(parent, field, ast.fix_missing_locations(ast.copy_location(
                    _call("_gv_cut", key, value.value, _as_index(value.slice)), value)))
    return tree


def _as_index(index: ast.expr) -> ast.expr:
    """A subscript's index as the value Python passes to ``__getitem__`` (``a:b`` made
    ``_gv_cut.slice(a, b, None)``: the built-in, whatever the module calls ``slice``)."""
    def one(element: ast.expr) -> ast.expr:
        if not isinstance(element, ast.Slice):
            return element
        bounds = [b if b is not None else ast.Constant(value=None)
                  for b in (element.lower, element.upper, element.step)]
        return ast.Call(func=ast.Attribute(value=ast.Name(id="_gv_cut", ctx=ast.Load()),
                                           attr="slice", ctx=ast.Load()),
                        args=bounds, keywords=[])

    if isinstance(index, ast.Tuple):
        return ast.Tuple(elts=[one(e) for e in index.elts], ctx=ast.Load())
    return one(index)


def _index(nodes: list[ast.AST], node: ast.AST) -> int:
    return next((i for i, n in enumerate(nodes) if n is node), -1)
