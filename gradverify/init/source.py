"""What forward's source says about each parameter (read with ``ast``, never run): its rank and
dim names from ``B, H, L, D = q.shape``, whether it is an index, a mask, a size, a tensor, a
per-feature operand, a loop's step or a top-k count, and the strings it is compared with."""
from __future__ import annotations

import ast
import inspect
import re
from dataclasses import dataclass, field

from gradverify.init.callees import follow, parsed
from gradverify.init.ranks import aliases, read_backward, read_ranks
from gradverify.targets import Target
from gradverify.targets.introspection import underlying as _underlying


@dataclass
class Hints:
    """What forward's source says about one parameter."""

    rank: int | None = None
    rank_at_least: int = 0
    dims: tuple[str, ...] = ()
    integer: bool = False
    boolean: bool = False
    labels: bool = False
    """``param.max() + 1``: integer labels whose range is their own."""
    size: bool = False
    """Used as a size (``new_zeros(param, ...)``, ``minlength=param``)."""
    matrix: bool = False
    strings: list[str] = field(default_factory=list)
    """String constants forward compares the parameter with (``mode == "sum"``)."""
    notes: list[str] = field(default_factory=list)
    tensor: bool = False
    """Used as a tensor: sliced (``k[:, :, a:b]``), a method called on it, an operand of ``@``."""
    elementwise: bool = False
    """An operand of ``*``, ``+``, ``-`` or ``/``: a weight used so holds one value per feature."""
    loop: tuple[str, int] | None = None
    """The step of ``range(0, n, param)``: (the tensor whose size ``n`` is, the axis)."""
    selects: bool = False
    """The count of ``topk``/``kthvalue``: fewer than the dim it selects from."""
    indexes: tuple[str, int] | None = None
    """(tensor parameter, axis) whose dim an index's values index: ``x[:, idx]`` (x, 1),
    ``x.index_select(0, idx)`` (x, 0)."""
    windows: bool = False
    """The ``loop`` is of ``unfold``'s windows: this int is their step."""
    framed: int | None = None
    """The axis ``x.unfold(axis, size, step)`` cuts into windows: longer than a window and its
    step, so that at least two windows overlap."""
    window: int | None = None
    """The axis of this tensor whose size is the window of an ``unfold`` (``W =
    window.shape[0]``): a size of its own, shorter than the axis it frames."""
    branches: list[int] = field(default_factory=list)
    """Ranks forward compares the parameter's with (``if x.dim() == 3:``): a branch that a
    case of each rank takes."""
    per_row: bool = False
    """Given a new last dim (``delay[..., None]``): a value per row of the tensor it meets."""
    spd: bool = False
    """Factored by ``cholesky``: a symmetric positive definite matrix (or a batch of them)."""
    saved: bool = False
    """Passed to ``ctx.save_for_backward``, which takes tensors only: a tensor, even when its
    name says a number (``sigma``)."""


def read_source(info: Target) -> dict[str, Hints]:
    """Hints per parameter from forward's source (empty when the source cannot be read), and
    from the helper functions forward passes them to (``init.callees``)."""
    forward = _underlying(inspect.getattr_static(info.function, "forward", None))
    hints = {p.name: Hints() for p in info.params}
    tree = parsed(forward)
    if forward is None or tree is None:
        return hints
    read_tree(tree, hints)
    follow(forward, tree, hints, read_tree, Hints)
    backward = parsed(_underlying(inspect.getattr_static(info.function, "backward", None)))
    if backward is not None:
        read_backward(tree, backward, hints)
    return hints


def read_tree(tree: ast.AST, hints: dict[str, Hints]) -> None:
    """Fill ``hints`` (one per parameter name) from how ``tree`` uses those names, or the
    locals that only rename them (``init.ranks.aliases``)."""
    renamed = aliases(tree, set(hints))
    hints = {**{local: hints[param] for local, param in renamed.items()}, **hints}
    sizes = _size_names(tree, hints)
    for node in ast.walk(tree):
        read_ranks(node, hints)
        _assign_shape(node, hints)
        _attribute_use(node, hints)
        _call_use(node, hints)
        _subscript_use(node, hints)
        _compared_strings(node, hints)
        _operand_use(node, hints)
        _loop_use(node, hints, sizes)


def _size_names(tree: ast.AST, hints: dict[str, Hints]) -> dict[str, tuple[str, int]]:
    """Local names that hold a parameter's size: ``B, H, L, D = q.shape`` (each an axis of q),
    ``n = x.shape[0]``, ``n = x.size(0)``, ``n = len(x)``."""
    found: dict[str, tuple[str, int]] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target, value = node.targets[0], node.value
        if isinstance(target, ast.Tuple):
            shape = value.func if isinstance(value, ast.Call) else value
            if isinstance(shape, ast.Attribute) and shape.attr in ("shape", "size") \
                    and _name(shape.value) in hints:
                for axis, element in enumerate(target.elts):
                    if _name(element):
                        found[_name(element)] = (_name(shape.value), axis)
        elif _name(target):
            where = _axis_of(value, hints)
            if where is not None:
                found[_name(target)] = where
    return found


def _axis_of(node: ast.AST, hints: dict[str, Hints]) -> tuple[str, int] | None:
    """(parameter, axis) of ``x.shape[i]``, ``x.size(i)`` or ``len(x)``, else None."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) \
            and node.value.attr == "shape" and _name(node.value.value) in hints \
            and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, int):
        return _name(node.value.value), node.slice.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr == "size" and _name(node.func.value) in hints and node.args \
            and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, int):
        return _name(node.func.value), node.args[0].value
    if isinstance(node, ast.Call) and _name(node.func) == "len" and node.args \
            and _name(node.args[0]) in hints:
        return _name(node.args[0]), 0
    return None


def _operand_use(node: ast.AST, hints: dict[str, Hints]) -> None:
    """``a * w``, ``x @ w``: an elementwise operand, or a matrix."""
    if isinstance(node, ast.BinOp):
        for side in (node.left, node.right):
            if _name(side) in hints:
                if isinstance(node.op, ast.MatMult):
                    hints[_name(side)].matrix = hints[_name(side)].tensor = True
                elif isinstance(node.op, (ast.Mult, ast.Add, ast.Sub, ast.Div)):
                    hints[_name(side)].elementwise = True
    if isinstance(node, ast.Subscript) and _name(node.value) in hints \
            and any(isinstance(e, ast.Slice) for e in (
                node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice])):
        hints[_name(node.value)].tensor = True


def _loop_use(node: ast.AST, hints: dict[str, Hints], sizes: dict[str, tuple[str, int]]) -> None:
    """``range(0, n, step)`` over a size of a tensor; ``x.topk(k)``, ``torch.topk(x, k)``."""
    if not isinstance(node, ast.Call):
        return
    func = node.func.attr if isinstance(node.func, ast.Attribute) else _name(node.func)
    if func == "range" and len(node.args) == 3 and _name(node.args[2]) in hints:
        stop = node.args[1]
        axis = sizes.get(_name(stop)) if _name(stop) else _axis_of(stop, hints)
        if axis is not None:
            hints[_name(node.args[2])].loop = axis
    if func == "unfold" and isinstance(node.func, ast.Attribute) and len(node.args) == 3 \
            and _name(node.func.value) in hints:
        _unfold_use(_name(node.func.value), node, hints, sizes)
    if func in ("topk", "kthvalue"):
        torch_call = isinstance(node.func, ast.Attribute) and _name(node.func.value) == "torch"
        args = node.args[1:] if torch_call else node.args
        if args and _name(args[0]) in hints:
            hints[_name(args[0])].selects = True


def _unfold_use(tensor: str, node: ast.Call, hints: dict[str, Hints],
                sizes: dict[str, tuple[str, int]]) -> None:
    """``x.unfold(-1, W, hop)`` with ``W = window.shape[0]``: x framed along its last axis,
    hop the step of a loop over it, window's axis 0 the window."""
    first = node.args[0]
    negative = isinstance(first, ast.UnaryOp) and isinstance(first.op, ast.USub)
    axis = _int_constant(first.operand if isinstance(first, ast.UnaryOp) else first)
    if axis is None:
        return
    axis = -axis if negative else axis
    hints[tensor].framed, hints[tensor].tensor = axis, True
    if _name(node.args[2]) in hints:
        hints[_name(node.args[2])].loop = (tensor, axis)
        hints[_name(node.args[2])].windows = True
    size = node.args[1]
    where = sizes.get(_name(size)) if _name(size) else _axis_of(size, hints)
    if where is not None and where[0] in hints and where[0] != tensor:
        hints[where[0]].window = where[1]


def _name(node: ast.AST) -> str:
    """The name a node is (``x``), or "" (no parameter is named so)."""
    return node.id if isinstance(node, ast.Name) else ""


def _assign_shape(node: ast.AST, hints: dict[str, Hints]) -> None:
    """``B, C, H, W = x.shape`` (or ``x.size()``): the rank, and the dims' names."""
    if not (isinstance(node, ast.Assign) and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Tuple)):
        return
    value = node.value
    if isinstance(value, ast.Call):
        value = value.func
    if isinstance(value, ast.Attribute) and value.attr in ("shape", "size"):
        owner = _name(value.value)
        if owner in hints:
            names = [_name(t) or "_" for t in node.targets[0].elts]
            hints[owner].rank = len(names)
            hints[owner].dims = tuple(n.upper() if len(n) <= 2 else "" for n in names)


def _attribute_use(node: ast.AST, hints: dict[str, Hints]) -> None:
    """``x.long()``, ``x.bool()``, ``x.mm(...)``, ``x.t()``, ``x.max() + 1``, ``x.shape[2]``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        owner = _name(node.func.value)
        if owner in hints:
            _method_use(node, node.func.attr, owner, hints[owner])
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        _labels_use(node, hints)
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) \
            and node.value.attr == "shape":
        _shape_index_use(node.value, node.slice, hints)


def _method_use(node: ast.Call, attr: str, owner: str, hint: Hints) -> None:
    """A method called on a parameter: a tensor's, and which kind of tensor."""
    if attr not in ("item", "bit_length", "to_bytes", "is_integer"):
        hint.tensor = True
    if attr in ("long", "int"):
        hint.integer = True
    elif attr == "bool":
        hint.boolean = True
    elif attr in ("mm", "t", "matmul") and owner:
        hint.matrix = True
    elif attr == "to" and any("int" in ast.unparse(a) or "long" in ast.unparse(a)
                              for a in node.args):
        hint.integer = True
    elif attr == "size" and node.args and (axis := _int_constant(node.args[0])) is not None:
        hint.rank_at_least = max(hint.rank_at_least, axis + 1)
    for keyword in node.keywords:
        if keyword.arg == "dim" and (axis := _int_constant(keyword.value)) is not None:
            hint.rank_at_least = max(hint.rank_at_least, axis + 1)


def _int_constant(node: ast.AST) -> int | None:
    """The int a node is written as (``2``), else None."""
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, int) else None


def _labels_use(node: ast.BinOp, hints: dict[str, Hints]) -> None:
    """``x.max() + 1`` or ``x.max().item() + 1``: x holds labels."""
    text = ast.unparse(node.left)
    for name, hint in hints.items():
        if re.fullmatch(rf"{re.escape(name)}\.max\(\)(\.item\(\))?", text):
            hint.integer = hint.labels = True


def _shape_index_use(shape: ast.Attribute, index: ast.AST, hints: dict[str, Hints]) -> None:
    """``x.shape[2]``: x has at least three dims."""
    owner = _name(shape.value)
    if owner in hints and isinstance(index, ast.Constant) and isinstance(index.value, int) \
            and index.value >= 0:
        hints[owner].rank_at_least = max(hints[owner].rank_at_least, index.value + 1)


_INDEXING_CALLS = {"index_select": 1, "index_add": 1, "index_add_": 1, "scatter": 1,
                   "scatter_": 1, "scatter_add": 1, "scatter_add_": 1, "gather": 1,
                   "bincount": 0, "index_put_": 0, "take": 0, "index_copy": 1,
                   "index_copy_": 1, "sparse_coo_tensor": 0}
_SIZE_CALLS = {"new_zeros", "new_ones", "new_empty", "new_full", "zeros", "ones", "empty",
               "full", "view", "reshape", "expand", "arange", "randn", "rand"}


_FACTORED = {"cholesky", "cholesky_ex", "cholesky_inverse"}
"""torch's factorisations of a symmetric positive definite matrix (``torch.linalg.cholesky``,
``torch.cholesky``): their first argument is one (or one parameter's symmetric part)."""


def _call_use(node: ast.AST, hints: dict[str, Hints]) -> None:
    """An argument of an indexing call is an index; of a size call, a size."""
    if not isinstance(node, ast.Call):
        return
    func = node.func.attr if isinstance(node.func, ast.Attribute) else _name(node.func)
    positional = [_name(a) for a in node.args]
    if func in _INDEXING_CALLS:
        position = _INDEXING_CALLS[func]
        # torch.index_select(x, dim, index) has one more leading argument than x.index_select
        if isinstance(node.func, ast.Attribute) and _name(node.func.value) == "torch" \
                and func not in ("sparse_coo_tensor", "bincount"):
            position += 1
        if position < len(positional) and positional[position] in hints:
            hints[positional[position]].integer = True
            _indexed_dim(node, func, positional[position], hints)
    if func in _SIZE_CALLS:
        for name in positional:
            if name in hints:
                hints[name].size = True
    if func == "sparse_coo_tensor" and len(positional) > 2 and positional[2] in hints:
        hints[positional[2]].size = True
    for keyword in node.keywords:
        if keyword.arg in ("minlength", "num_classes", "num_segments", "dim_size", "size") \
                and _name(keyword.value) in hints:
            hints[_name(keyword.value)].size = True
    if func == "range" and positional and positional[0] in hints:
        hints[positional[0]].size = True
    _tensor_call_use(node, func, hints)


def _tensor_call_use(node: ast.Call, func: str, hints: dict[str, Hints]) -> None:
    """An argument a call needs as a tensor: an SPD matrix to factor, a tensor to save."""
    factored = {n.id for n in ast.walk(node.args[0]) if isinstance(n, ast.Name)} \
        if func in _FACTORED and node.args else set()
    if len(factored) == 1 and factored <= set(hints):  # ``cholesky(0.5 * (A + A.mT))``
        hint = hints[factored.pop()]
        hint.spd = hint.tensor = True
        hint.rank_at_least = max(hint.rank_at_least, 2)
    if func == "save_for_backward":
        for name in (_name(a) for a in node.args):
            if name in hints:
                hints[name].saved = hints[name].tensor = True


def _indexed_dim(node: ast.Call, func: str, index: str, hints: dict[str, Hints]) -> None:
    """``x.index_select(d, idx)``, ``torch.gather(x, d, idx)``: idx indexes x's dim d."""
    if func not in ("index_select", "gather") or not isinstance(node.func, ast.Attribute):
        return
    torch_call = _name(node.func.value) == "torch"
    owner = _name(node.args[0]) if torch_call else _name(node.func.value)
    dim = node.args[1 if torch_call else 0]
    if owner in hints and isinstance(dim, ast.Constant) and isinstance(dim.value, int) \
            and dim.value >= 0:
        hints[index].indexes = (owner, dim.value)


def _compared_strings(node: ast.AST, hints: dict[str, Hints]) -> None:
    """``mode == "sum"``, ``mode in ("sum", "mean")``: the strings forward expects."""
    if not (isinstance(node, ast.Compare) and _name(node.left) in hints):
        return
    strings = hints[_name(node.left)].strings
    for comparator in node.comparators:
        items = comparator.elts if isinstance(comparator, (ast.Tuple, ast.List, ast.Set)) \
            else [comparator]
        strings += [i.value for i in items if isinstance(i, ast.Constant)
                    and isinstance(i.value, str) and i.value not in strings]


def _subscript_use(node: ast.AST, hints: dict[str, Hints]) -> None:
    """``x[param]``, ``x[param[1]]`` (a row of an edge list): an index (or a mask, by its
    name)."""
    if not isinstance(node, ast.Subscript):
        return
    index = _name(node.slice.value if isinstance(node.slice, ast.Subscript) else node.slice)
    if index in hints:
        hints[index].integer = True
        if _name(node.value) in hints and isinstance(node.slice, ast.Name):
            hints[index].indexes = (_name(node.value), 0)  # not a row of an edge list
    elif isinstance(node.slice, ast.Tuple):
        # x[:, idx]: idx indexes the dim after the full slices before it
        for axis, element in enumerate(node.slice.elts):
            if _name(element) in hints:
                hints[_name(element)].integer = True
                if _name(node.value) in hints:
                    hints[_name(element)].indexes = (_name(node.value), axis)
            if not isinstance(element, ast.Slice):
                break
