"""What each forward parameter probably is, read from its name, annotation, default and from
forward's source (without running it): a float tensor, an integer index tensor tied to a dim,
a bool mask, a size, a shape tuple, a float. The probe (``init.probe``) then tries the guesses
and their neighbours on the real forward.
"""
from __future__ import annotations

import ast
import inspect
import re
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gradverify.target import _MISSING, FunctionInfo, Param, _underlying

SIZES = {"B": 2, "C": 3, "D": 4, "N": 5, "H": 6, "W": 7, "L": 8, "K": 9, "S": 3, "E": 6}
"""The sizes of named dims: small, and distinct where they meet in one tensor."""

TEMPLATES: dict[int, tuple[str, ...]] = {0: (), 1: ("N",), 2: ("N", "D"), 3: ("B", "C", "L"),
                                        4: ("B", "C", "H", "W"), 5: ("B", "C", "D", "H", "W")}

INDEX_NAMES = re.compile(r"^(index|indices|idx|idxs|ids|labels?|ranks?|segment_ids|segments?|"
                         r"spx|superpixels?|perm|permutation|edge_index|clusters?|targets?)$|"
                         r"(_idx|_ids|_index|_indices|_labels?)$")
MASK_NAMES = re.compile(r"^(mask|keep|kept|valid)$|(_mask)$")
SHAPE_NAMES = re.compile(r"^(shape|size|sizes|output_size|out_shape|output_shape|dims)$")
COUNT_NAMES = re.compile(r"^(num_\w+|n_\w+|\w+_count|count|dim|k|groups|length|n|num)$")
WEIGHT_NAMES = re.compile(r"^(weight|weights|w|kernel|filters?)$")
BIAS_NAMES = re.compile(r"^(bias|b|offset)$")
PER_FEATURE_NAMES = re.compile(r"^(weight|weights|w|bias|b|scale|shift|gain|gamma|beta|offset)$")
FLOAT_NAMES = re.compile(r"^(threshold|slope|alpha|beta|gamma|eps|epsilon|scale|constant|lr|p|"
                         r"temperature|temp|sigma|margin|lam|lambda_?|weight_decay|factor|tau|"
                         r"momentum|negative_slope|value)$")


@dataclass
class Guess:
    """One forward parameter as the spec will give it."""

    name: str
    kind: str
    """``tensor``, ``int``, ``float``, ``bool``, ``str``, ``tuple``, ``none``, ``default`` or
    ``star`` (a ``*xs`` list of tensors), ``tensors`` (a list of tensors passed as one argument,
    an op's ``Tensor[]``) or ``list`` (a list of numbers or dim names, an op's ``int[]``)."""
    shape: tuple[Any, ...] = ()
    """Dim names (or literal sizes)."""
    dtype: str = "float32"
    high: str | None = None
    """Integer tensors: the dim their values index (values in [0, size of that dim))."""
    sorted: bool = False
    value: Any = None
    """Python values; for ``int`` the dim it follows; for ``tuple`` the dims."""
    why: str = ""
    """Where the guess comes from, written as the spec line's comment."""
    rank_at_least: int = 0
    items: int = 2
    requires_grad: bool | None = None
    """False for a floating input backward gives no gradient (a coordinate, a weight map)."""
    init: str | None = None
    """A tensor's ``init`` when not the default (``positive`` for a 0-dim temperature)."""
    optional: bool = False
    """``null`` is a valid value too (an op's ``Tensor?``): the probe's last resort."""
    choices: tuple[Any, ...] = ()
    """Other values the probe may try, the likelier first (strings forward compares the
    parameter with, the dims an ``int[]`` may name)."""
    loop: tuple[str, int] | None = None
    """The step of forward's loop over an axis of a tensor parameter: (parameter, axis)."""
    longer: tuple[str, int] | None = None
    """(dim, value): the dim must be longer than this int's value (a loop's step, so that the
    loop runs more than once)."""
    elementwise: bool = False

    def tensor(self) -> bool:
        return self.kind in ("tensor", "star", "tensors")


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


def read_source(info: FunctionInfo) -> dict[str, Hints]:
    """Hints per parameter from forward's source (empty when the source cannot be read)."""
    forward = _underlying(inspect.getattr_static(info.cls, "forward", None))
    hints = {p.name: Hints() for p in info.params}
    if forward is None:
        return hints
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(forward)))
    except (OSError, TypeError, SyntaxError):
        return hints
    sizes = _size_names(tree, hints)
    for node in ast.walk(tree):
        _assign_shape(node, hints)
        _attribute_use(node, hints)
        _call_use(node, hints)
        _subscript_use(node, hints)
        _compared_strings(node, hints)
        _operand_use(node, hints)
        _loop_use(node, hints, sizes)
    return hints


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
    if func in ("topk", "kthvalue"):
        torch_call = isinstance(node.func, ast.Attribute) and _name(node.func.value) == "torch"
        args = node.args[1:] if torch_call else node.args
        if args and _name(args[0]) in hints:
            hints[_name(args[0])].selects = True


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
    """``x.long()``, ``x.bool()``, ``x.mm(...)``, ``x.t()``, ``x.shape[2]``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        owner = _name(node.func.value)
        attr = node.func.attr
        if owner in hints:
            hint = hints[owner]
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
            elif attr == "size" and node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, int):
                hint.rank_at_least = max(hint.rank_at_least, node.args[0].value + 1)
            for keyword in node.keywords:
                if keyword.arg == "dim" and isinstance(keyword.value, ast.Constant) \
                        and isinstance(keyword.value.value, int):
                    hint.rank_at_least = max(hint.rank_at_least, keyword.value.value + 1)
        # x.max() + 1 / x.max().item() + 1: labels
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        text = ast.unparse(node.left)
        for name, hint in hints.items():
            if re.fullmatch(rf"{re.escape(name)}\.max\(\)(\.item\(\))?", text):
                hint.integer = hint.labels = True
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) \
            and node.value.attr == "shape":
        owner = _name(node.value.value)
        index = node.slice
        if owner in hints and isinstance(index, ast.Constant) and isinstance(index.value, int) \
                and index.value >= 0:
            hints[owner].rank_at_least = max(hints[owner].rank_at_least, index.value + 1)


_INDEXING_CALLS = {"index_select": 2, "index_add": 1, "index_add_": 1, "scatter": 1,
                   "scatter_": 1, "scatter_add": 1, "scatter_add_": 1, "gather": 1,
                   "bincount": 0, "index_put_": 0, "take": 0, "index_copy": 1,
                   "index_copy_": 1, "sparse_coo_tensor": 0}
_SIZE_CALLS = {"new_zeros", "new_ones", "new_empty", "new_full", "zeros", "ones", "empty",
               "full", "view", "reshape", "expand", "arange", "randn", "rand"}


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
    """``x[param]``: an index (or a mask, by its name)."""
    if isinstance(node, ast.Subscript):
        index = _name(node.slice)
        if index in hints:
            hints[index].integer = True


def _annotation(param: Param) -> str:
    if param.annotation is _MISSING:
        return ""
    if isinstance(param.annotation, str):
        return param.annotation
    return getattr(param.annotation, "__name__", None) or str(param.annotation)


def first_guesses(info: FunctionInfo, typed: Mapping[str, Guess] | None = None) -> list[Guess]:
    """A guess per positional parameter (and ``*xs``), before any probing. ``typed``: the
    guesses a parameter's declared type decides (an op's schema, ``init.schema``), which
    outrank its name."""
    hints = read_source(info)
    guesses = []
    for param in info.params:
        if param.name in info.parameters:
            continue  # a module's parameter: an input found automatically
        if param.kind == "var_positional":
            guesses.append(Guess(param.name, "star", shape=TEMPLATES[2], items=2,
                                 why=f"*{param.name}: a list, one entry per tensor"))
        elif param.kind == "positional":
            guesses.append((typed or {}).get(param.name)
                           or _guess(param, hints.get(param.name, Hints())))
    return _tie_dims(guesses)


def _guess(param: Param, hint: Hints) -> Guess:
    name, annotation = param.name, _annotation(param)
    default = param.default
    tensor_annotation = "Tensor" in annotation
    if default is not _MISSING and not tensor_annotation and default is not None \
            and isinstance(default, (bool, int, float, str)):
        return Guess(name, "default", value=default, why="forward's default", loop=hint.loop)
    if hint.loop and annotation in ("int", ""):
        return Guess(name, "int", value=2, loop=hint.loop, why="a loop's step")
    if hint.selects and annotation in ("int", ""):
        return Guess(name, "int", value=2, why="a count to select: fewer than the dim it "
                                                "selects from")
    if annotation in ("int",) or (not tensor_annotation and COUNT_NAMES.match(name)
                                  and not hint.integer and not hint.tensor) or (
            hint.size and not hint.integer and not SHAPE_NAMES.match(name)):
        return Guess(name, "int", value="S" if name.startswith(("num_", "n_")) else "N",
                     why="a size" + (f" ({annotation})" if annotation else ""))
    if annotation in ("float",) or (not tensor_annotation and FLOAT_NAMES.match(name)):
        return Guess(name, "float", value=0.5, why="a number" + (f" ({annotation})"
                                                               if annotation else ""))
    if annotation == "bool":
        return Guess(name, "bool", value=False, why="a flag")
    if annotation == "str":
        return string_guess(name, hint)
    if SHAPE_NAMES.match(name) or "tuple" in annotation.lower() or "Size" in annotation:
        return Guess(name, "tuple", value=("N", "D"), why="a shape: a tuple of sizes")
    rank = hint.rank or max(hint.rank_at_least, 2 if hint.matrix else 0)
    # null is valid too: the probe's last resort
    optional = default is None or "Optional[" in annotation or annotation.endswith("| None")
    if MASK_NAMES.match(name) or hint.boolean:
        return Guess(name, "tensor", shape=TEMPLATES[max(rank, 1)][:max(rank, 1)],
                     dtype="bool", optional=optional, why="a mask (bool)")
    if INDEX_NAMES.search(name) or hint.integer or hint.labels:
        shape: tuple[Any, ...] = (2, "E") if name in ("indices", "edge_index") else ("N",)
        if hint.rank:
            shape = TEMPLATES[hint.rank]
        return Guess(name, "tensor", shape=shape, dtype="int64", high="S" if hint.labels else "N",
                     sorted=name.startswith(("rank", "segment")), optional=optional,
                     why="indices (int64), values in [0, the dim they index)")
    dims = hint.dims if hint.dims and all(hint.dims) else TEMPLATES[min(max(rank, 2), 5)]
    return Guess(name, "tensor", shape=dims, rank_at_least=hint.rank_at_least, optional=optional,
                 elementwise=hint.elementwise and not hint.matrix,
                 why=("shape from forward's " + ", ".join(dims) + " = "
                      f"{name}.shape") if hint.dims and all(hint.dims) else "a float tensor")


def string_guess(name: str, hint: Hints) -> Guess:
    """A string: one forward compares it with, else a TODO (no value is safe to invent)."""
    if hint.strings:
        others = ", ".join(repr(s) for s in hint.strings[1:])
        return Guess(name, "str", value=hint.strings[0], choices=tuple(hint.strings[1:]),
                     why="a string forward compares it with" + (f" (also {others})"
                                                               if others else ""))
    return Guess(name, "str", value="", why="TODO: a string: set the value forward expects")


def _tie_dims(guesses: list[Guess]) -> list[Guess]:
    """Index tensors follow the first float tensor's leading dim; when forward takes a count
    (``num_segments``), their values index it."""
    floats = [g for g in guesses if g.kind == "tensor" and g.dtype.startswith("float")]
    lead = floats[0].shape[:1] if floats else ()
    first = floats[0].shape if floats else ()
    count = next((g.value for g in guesses if g.kind == "int" and g.value == "S"), None)
    unpacked = floats[0].why.startswith("shape from forward's") if floats else False
    matrix = any(WEIGHT_NAMES.match(g.name) and not g.elementwise for g in floats)
    tied = []
    for g in guesses:
        if g.kind == "tensor" and g.dtype.startswith("float") and g is not floats[0] \
                and g.why == "a float tensor" and first:
            if (WEIGHT_NAMES.match(g.name) or BIAS_NAMES.match(g.name)) and g.elementwise \
                    and not matrix:
                # multiplied or added: one value per feature (a norm's weight and bias)
                g = replace(g, shape=first[-1:], why=f"per feature: [{first[-1]}]")
            elif WEIGHT_NAMES.match(g.name) and len(first) == 2:
                # a layer's parameters next to its input [N, D]: weight [K, D], bias [K]
                g = replace(g, shape=("K", first[-1]), why="a weight: [out, in]")
            elif BIAS_NAMES.match(g.name) and len(first) == 2:
                g = replace(g, shape=("K",), why="a bias: [out]")
            elif unpacked and not PER_FEATURE_NAMES.match(g.name):
                # next to q [B, H, L, D] that forward unpacks: k and v alike
                g = replace(g, shape=first, why=f"shaped as {floats[0].name}")
        g = _loop_bound(g, guesses)
        if g.kind == "tensor" and g.dtype == "int64":
            if g.shape == ("N",) and lead:
                g = replace(g, shape=lead)
            if count:
                g = replace(g, high=count, why=f"indices (int64), values in [0, {count})")
        tied.append(g)
    return tied


LONGEST_LOOP_DEFAULT = 32
"""A loop's step up to this default stays, and the dim it steps over grows past it; a larger
default is replaced by a small step (a dim of 1025 would make a slow check)."""


def _loop_bound(g: Guess, guesses: list[Guess]) -> Guess:
    """An int that steps forward's loop over a dim: that dim longer than it, so that the loop
    runs more than once and its later steps are checked too."""
    if g.loop is None:
        return g
    tensor = next((o for o in guesses if o.name == g.loop[0] and o.tensor()), None)
    dim = tensor.shape[g.loop[1]] if tensor and g.loop[1] < len(tensor.shape) else None
    if not isinstance(dim, str):
        return g
    if g.kind == "default" and isinstance(g.value, int) and 1 <= g.value <= LONGEST_LOOP_DEFAULT:
        return replace(g, longer=(dim, g.value),
                       why=f"forward's default; {dim} is longer, so that its loop over {dim} "
                           "runs more than once")
    default = f" (forward's default, {g.value}, would not)" if g.kind == "default" else ""
    return replace(g, kind="int", value=2,
                   why=f"smaller than {dim}, so that forward's loop over {dim} runs more than "
                       f"once{default}")
