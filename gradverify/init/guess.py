"""What each forward parameter probably is, read from its name, annotation, default and from
forward's source (without running it): a float tensor, an integer index tensor tied to a dim,
a bool mask, a size, a shape tuple, a float. The probe (``init.probe``) then tries the guesses
and their neighbours on the real forward.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from gradverify.init.source import Hints, read_source
from gradverify.targets import MISSING, Param, Target

SIZES = {"B": 2, "C": 3, "D": 4, "N": 5, "H": 6, "W": 7, "L": 8, "K": 9, "S": 3, "E": 6}
"""The sizes of named dims: small, and distinct where they meet in one tensor."""

TEMPLATES: dict[int, tuple[str, ...]] = {0: (), 1: ("N",), 2: ("N", "D"), 3: ("B", "C", "L"),
                                        4: ("B", "C", "H", "W"), 5: ("B", "C", "D", "H", "W")}

INDEX_NAMES = re.compile(r"^(index|indices|idx|idxs|ids|labels?|ranks?|segment_ids|segments?|"
                         r"spx|superpixels?|perm|permutation|edge_index|edges|edge_list|"
                         r"clusters?|targets?)$|"
                         r"(_idx|_ids|_index|_indices|_labels?)$")
EDGE_NAMES = re.compile(r"^(indices|edge_index|edges|edge_list)$")
"""An index tensor of two rows: a graph's edges (source, target)."""
MASK_NAMES = re.compile(r"^(mask|keep|kept|valid)$|(_mask)$")
SHAPE_NAMES = re.compile(r"^(shape|size|sizes|output_size|out_shape|output_shape|dims)$")
COUNT_NAMES = re.compile(r"^(num_\w+|n_\w+|\w+_count|count|dim|k|groups|length|n|num)$")
WEIGHT_NAMES = re.compile(r"^(weight|weights|w|kernel|filters?)$", re.IGNORECASE)
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
    per_row: bool = False
    """Broadcast with a new last dim (``delay[..., None]``): one value per row of another
    tensor, its shape less the last dim."""
    fixed: Any = None
    """The spec value strengthening chose (``init.strengthen``), written as it is."""
    indexes: tuple[str, int] | None = None
    """An index tensor's (tensor parameter, axis) whose dim its values index."""

    def tensor(self) -> bool:
        return self.kind in ("tensor", "star", "tensors")


def arg_value(g: Guess) -> Any:
    """A guess as the spec writes it: ``{shape: [N, D], dtype: int64}``, a dim name, a value."""
    if g.fixed is not None:
        return g.fixed
    if g.kind == "star":
        return [{"shape": list(g.shape)} for _ in range(g.items)]
    if g.kind == "tensors":
        return {"list": [{"shape": list(g.shape)} for _ in range(g.items)]}
    if g.kind == "list":
        return {"list": list(g.value)}
    if g.kind == "tensor":
        value: dict[str, Any] = {"shape": list(g.shape)}
        if g.dtype != "float32":
            value["dtype"] = g.dtype
        if g.init is not None:
            value["init"] = g.init
        if g.dtype == "int64" and g.high is not None:
            value["high"] = g.high
        if g.sorted:
            value["sorted"] = True
        if g.requires_grad is False and g.dtype.startswith("float"):
            value["requires_grad"] = False
        return value
    if g.kind == "tuple":
        return {"tuple": list(g.value)}
    return g.value  # int (a dim name), float, bool, str, None


def _annotation(param: Param) -> str:
    if param.annotation is MISSING:
        return ""
    if isinstance(param.annotation, str):
        return param.annotation
    return getattr(param.annotation, "__name__", None) or str(param.annotation)


def first_guesses(info: Target, typed: Mapping[str, Guess] | None = None) -> list[Guess]:
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
    """A parameter's first guess: a Python value where its default, annotation, name or use in
    forward says so (in that order), else a tensor."""
    annotation = _annotation(param)
    for step in (_default_guess, _int_guess, _value_guess):
        found = step(param, hint, annotation)
        if found is not None:
            return found
    return _tensor_guess(param, hint, annotation)


def _default_guess(param: Param, hint: Hints, annotation: str) -> Guess | None:
    """Forward's own default, when it is a plain Python value."""
    default = param.default
    if default is MISSING or default is None or "Tensor" in annotation:
        return None
    if not isinstance(default, (bool, int, float, str)):
        return None
    return Guess(param.name, "default", value=default, why="forward's default", loop=hint.loop)


def _int_guess(param: Param, hint: Hints, annotation: str) -> Guess | None:
    """An int: a loop's step, a count to select, or a size."""
    name = param.name
    if annotation in ("int", "") and hint.loop:
        return Guess(name, "int", value=2, loop=hint.loop,
                     why="the step between unfold's windows" if hint.windows else "a loop's step")
    if annotation in ("int", "") and hint.selects:
        return Guess(name, "int", value=2, why="a count to select: fewer than the dim it "
                                                "selects from")
    if not _is_size(name, hint, annotation):
        return None
    return Guess(name, "int", value="S" if name.startswith(("num_", "n_")) else "N",
                 why="a size" + (f" ({annotation})" if annotation else ""))


def _is_size(name: str, hint: Hints, annotation: str) -> bool:
    """Declared an int, named as a count, or used as a size by forward."""
    if annotation == "int":
        return True
    if hint.integer:
        return False
    named = "Tensor" not in annotation and bool(COUNT_NAMES.match(name)) and not hint.tensor
    return named or bool(hint.size and not SHAPE_NAMES.match(name))


def _value_guess(param: Param, hint: Hints, annotation: str) -> Guess | None:
    """A float, a flag, a string or a shape."""
    name = param.name
    if annotation == "float" or ("Tensor" not in annotation and FLOAT_NAMES.match(name)
                                 and not hint.saved):
        return Guess(name, "float", value=0.5, why="a number" + (f" ({annotation})"
                                                               if annotation else ""))
    if annotation == "bool":
        return Guess(name, "bool", value=False, why="a flag")
    if annotation == "str":
        return string_guess(name, hint)
    if SHAPE_NAMES.match(name) or "tuple" in annotation.lower() or "Size" in annotation:
        return Guess(name, "tuple", value=("N", "D"), why="a shape: a tuple of sizes")
    return None


def _tensor_guess(param: Param, hint: Hints, annotation: str) -> Guess:
    """A bool mask, an int64 index tensor or a float tensor."""
    name = param.name
    rank = hint.rank or max(hint.rank_at_least, 2 if hint.matrix else 0)
    # null is valid too: the probe's last resort
    optional = param.default is None or "Optional[" in annotation or annotation.endswith("| None")
    if MASK_NAMES.match(name) or hint.boolean:
        return Guess(name, "tensor", shape=TEMPLATES[max(rank, 1)][:max(rank, 1)],
                     dtype="bool", optional=optional, why="a mask (bool)")
    if INDEX_NAMES.search(name) or hint.integer or hint.labels:
        return _index_guess(name, hint, optional)
    if hint.spd and not hint.dims:
        square = (*TEMPLATES[max(rank, 2) - 2][:max(rank, 2) - 2], "D", "D")
        return Guess(name, "tensor", shape=square, init="spd", optional=optional,
                     rank_at_least=2, why="symmetric positive definite: forward factors it "
                                          "(cholesky)")
    if hint.saved and FLOAT_NAMES.match(name) and not (rank or hint.dims):
        return Guess(name, "tensor", shape=(), init="positive", optional=optional,
                     why="a scalar tensor (0-dim), positive: forward saves it for backward")
    # an exact rank read from the source stands (``w[:, None]``: a vector); else a matrix at
    # least, the likelier input
    exact = TEMPLATES[min(hint.rank, 5)] if hint.rank else TEMPLATES[min(max(rank, 2), 5)]
    dims = hint.dims if hint.dims and all(hint.dims) else exact
    if hint.window is not None and not hint.dims:
        dims = _window_dims(max(rank, hint.window + 1))
    elif hint.framed is not None and not hint.dims and -len(dims) <= hint.framed < len(dims):
        # framed by unfold: longer than a window (D) and its step, so that windows overlap
        dims = tuple("L" if axis == hint.framed % len(dims) else d
                     for axis, d in enumerate(dims))
    return Guess(name, "tensor", shape=dims, rank_at_least=hint.rank_at_least, optional=optional,
                 elementwise=hint.elementwise and not hint.matrix, per_row=hint.per_row,
                 why=("shape from forward's " + ", ".join(dims) + " = "
                      f"{name}.shape") if hint.dims and all(hint.dims) else "a float tensor")


def _window_dims(rank: int) -> tuple[str, ...]:
    """A tensor whose size is unfold's window: its own rank, the window's axis D (4), shorter
    than the framed axis L (8) by more than a step."""
    return ("D",) if rank == 1 else TEMPLATES[min(rank, 5)]


def _index_guess(name: str, hint: Hints, optional: bool) -> Guess:
    """Indices: a graph's two rows of edges, or one row; values in [0, the dim they index)."""
    shape: tuple[Any, ...] = (2, "E") if EDGE_NAMES.match(name) else ("N",)
    if hint.rank:
        shape = TEMPLATES[hint.rank]
    return Guess(name, "tensor", shape=shape, dtype="int64", high="S" if hint.labels else "N",
                 sorted=name.startswith(("rank", "segment")), optional=optional,
                 indexes=hint.indexes, why="indices (int64), values in [0, the dim they index)")


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
    first = floats[0] if floats else None
    count = next((g.value for g in guesses if g.kind == "int" and g.value == "S"), None)
    matrix = any(WEIGHT_NAMES.match(g.name) and not g.elementwise for g in floats)
    tied = []
    for g in guesses:
        if _unshaped_float(g) and first is not None and g is not first and first.shape:
            g = _shaped_beside(g, first, matrix)
        g = _loop_bound(g, guesses)
        if g.kind == "tensor" and g.dtype == "int64":
            g = _tied_index(g, guesses, first.shape[:1] if first is not None else (), count)
        tied.append(g)
    return tied


def _unshaped_float(g: Guess) -> bool:
    return g.kind == "tensor" and g.dtype.startswith("float") and g.why == "a float tensor"


def _shaped_beside(g: Guess, first: Guess, matrix: bool) -> Guess:
    """A float tensor of no known shape, shaped after the first float tensor ``first``: a
    norm's per-feature weight, a layer's weight and bias, or alike (attention's k and v)."""
    shape = first.shape
    if (WEIGHT_NAMES.match(g.name) or BIAS_NAMES.match(g.name)) and g.elementwise \
            and not matrix:
        # multiplied or added: one value per feature (a norm's weight and bias)
        return replace(g, shape=shape[-1:], why=f"per feature: [{shape[-1]}]")
    if WEIGHT_NAMES.match(g.name) and len(shape) == 2:
        # a layer's parameters next to its input [N, D]: weight [K, D], bias [K]
        return replace(g, shape=("K", shape[-1]), why="a weight: [out, in]")
    if BIAS_NAMES.match(g.name) and len(shape) == 2:
        return replace(g, shape=("K",), why="a bias: [out]")
    if first.why.startswith("shape from forward's") and not PER_FEATURE_NAMES.match(g.name):
        # next to q [B, H, L, D] that forward unpacks: k and v alike
        return replace(g, shape=shape, why=f"shaped as {first.name}")
    return g


def _tied_index(g: Guess, guesses: list[Guess], lead: tuple[Any, ...], count: Any) -> Guess:
    """An index tensor: as long as the first float tensor's leading dim, its values in [0, the
    dim forward indexes with it), else in [0, forward's count)."""
    if g.shape == ("N",) and lead:
        g = replace(g, shape=lead)
    indexed = _indexed_dim(g, guesses)
    if indexed and g.indexes:
        return replace(g, high=indexed, why=f"indices (int64), values in [0, {indexed}): "
                                            f"forward indexes {g.indexes[0]} with them")
    if count:
        return replace(g, high=count, why=f"indices (int64), values in [0, {count})")
    return g


def _indexed_dim(g: Guess, guesses: list[Guess]) -> str | None:
    """The dim name of the tensor parameter an index's values index (``x[:, idx]``: x's
    second dim), where forward (or a helper it calls) says which; else None."""
    if g.indexes is None:
        return None
    owner, axis = g.indexes
    tensor = next((o for o in guesses if o.name == owner and o.kind == "tensor"), None)
    dim = tensor.shape[axis] if tensor is not None and axis < len(tensor.shape) else None
    return dim if isinstance(dim, str) else None


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
