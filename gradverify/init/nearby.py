"""Values near a guess, the likelier first, for the probe (``init.probe``) to try when forward
raises on the guesses: other shapes for a tensor (taken from the other tensors, other ranks,
0-dim), other dims for a size or an index range, other numbers, other lengths for a list."""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from gradverify.init.guess import FLOAT_NAMES, PER_FEATURE_NAMES, TEMPLATES, Guess, arg_value
from gradverify.init.strengthen import LOOP_NAMES

PER_FEATURE = PER_FEATURE_NAMES
"""Names of a tensor that often holds one value per feature: the last dim of the input."""


def alternatives(g: Guess, guesses: list[Guess], last_resort: bool = False,
                 held: Sequence[tuple[tuple[int, ...], str]] = ()) -> Iterator[Guess]:
    """Nearby values of one parameter, the likelier first; then the guess's own choices; last,
    null where the parameter is optional. ``last_resort``: also a loop's count of -1, which
    runs the loop no step (forward then runs on shapes its loop body would reject). ``held``:
    sizes forward needs, each with where they come from: the shapes of a module's own
    parameters (``spec [B, F, K] @ self.weight.T`` with a weight [8, 4] needs K = 4), the
    sizes forward's last error named; a float tensor's last dim tries them first."""
    seen = [arg_value(g)]
    resort = [replace(g, value=-1)] if last_resort and g.kind == "int" \
        and LOOP_NAMES.match(g.name) else []
    meeting = [replace(g, shape=(*g.shape[:-1], size), init=None,
                       why=f"a float tensor (its last dim {whence})")
               for shape, whence in held for size in dict.fromkeys(reversed(shape))] \
        if g.kind == "tensor" and g.dtype.startswith("float") and g.shape else []
    for alternative in [*meeting, *_nearby(g, guesses),
                        *(replace(g, value=c) for c in g.choices), *resort]:
        value = arg_value(alternative)
        if value not in seen:
            seen.append(value)
            yield alternative
    if g.optional and g.kind != "none":
        yield replace(g, kind="none", value=None, why="optional: null")


def _nearby(g: Guess, guesses: list[Guess]) -> Iterator[Guess]:
    """Values near a guess, by its kind, from the shapes of the other float tensors."""
    floats = [o.shape for o in guesses if o is not g and o.kind == "tensor"
              and o.dtype.startswith("float")]
    if g.kind == "tensor" and g.dtype.startswith("float"):
        yield from _float_shapes(g, guesses, floats)
    elif g.kind in _NEARBY:
        yield from _NEARBY[g.kind](g, floats)


def _near_tensor(g: Guess, floats: list[tuple[Any, ...]]) -> Iterator[Guess]:
    """An index tensor (or a mask): the shapes of an index next to the float tensors, values
    indexing any of their dims; then a mask instead of an index."""
    shapes = [g.shape, *_index_shapes(floats)]
    highs = [g.high, *{d for s in floats for d in s if isinstance(d, str)}, "S", "N"]
    for shape in dict.fromkeys(shapes):
        for high in dict.fromkeys(h for h in highs if h):
            if (shape, high) != (g.shape, g.high):
                yield replace(g, shape=shape, high=high if g.dtype == "int64" else None)
    if g.dtype == "int64":
        yield replace(g, dtype="bool", high=None, why="a mask (bool)")


def _near_int(g: Guess, floats: list[tuple[Any, ...]]) -> Iterator[Guess]:
    # a count of steps or iterations at 0 or 1 leaves a loop with nothing to verify (and -1
    # is the search's last resort: ``alternatives``)
    small = () if LOOP_NAMES.match(g.name) else (0, 1, -1)
    for value in [*dict.fromkeys(d for s in floats for d in s if isinstance(d, str)),
                  "S", "N", *small]:
        if value != g.value:
            yield replace(g, value=value)


def _near_float(g: Guess, floats: list[tuple[Any, ...]]) -> Iterator[Guess]:
    for value in (1.0, 2.0, 0.1):
        yield replace(g, value=value)


def _near_tuple(g: Guess, floats: list[tuple[Any, ...]]) -> Iterator[Guess]:
    # sizes, or dims of a tensor (a ``dims`` argument): the last, the first, both
    for shape in [*floats, *(s[:2] for s in floats), ("N", "D"), ("D", "N"),
                  (-1,), (0,), (0, 1)]:
        if tuple(shape) != tuple(g.value):
            yield replace(g, value=tuple(shape))


def _near_list(g: Guess, floats: list[tuple[Any, ...]]) -> Iterator[Guess]:
    for items in (1, 3):
        yield replace(g, items=items)
    for rank in (1, 3):
        yield replace(g, shape=TEMPLATES[rank])


_NEARBY: dict[str, Callable[[Guess, list[tuple[Any, ...]]], Iterator[Guess]]] = {
    "tensor": _near_tensor, "int": _near_int, "float": _near_float, "tuple": _near_tuple,
    "star": _near_list, "tensors": _near_list}
"""A guess's neighbours by its kind (a float tensor's: ``_float_shapes``)."""


def _float_shapes(g: Guess, guesses: list[Guess],
                  floats: list[tuple[Any, ...]]) -> Iterator[Guess]:
    """Shapes for a float tensor: those its neighbours suggest, the usual ranks, then 0-dim.
    A per-feature tensor (a weight, a bias, a scale) next to others tries the last dim they
    share first, which broadcasts against them; a temperature or a scale tries 0-dim first."""
    counted = [(d,) for o in guesses if o.kind == "tensor" and not o.dtype.startswith("float")
               for d in o.shape[-1:] if isinstance(d, str)]  # a value per index entry
    sized = [shape for o in guesses if o.kind == "tuple" and len(o.value) == 2
             for shape in ((o.value[-1], "K"), tuple(o.value))]  # a matrix times (rows, cols)
    shapes = [*_derived(floats), *counted, *sized, *(TEMPLATES[r] for r in range(1, 5)), ()]
    if PER_FEATURE.match(g.name):
        shapes = [s[-1:] for s in floats[:1] if s] + shapes
    if g.per_row:  # ``delay[..., None]``: a value per row of the input
        shapes = [s[:-1] for s in floats[:1] if len(s) > 1] + shapes
    if FLOAT_NAMES.match(g.name):
        shapes.insert(0, ())
    seen = {g.shape}
    for shape in shapes:
        if shape not in seen and len(shape) >= g.rank_at_least:
            seen.add(shape)
            if shape:
                yield replace(g, shape=shape, init=None,
                              why="a float tensor (shape found by trying)")
            elif FLOAT_NAMES.match(g.name):
                yield replace(g, shape=(), init="positive", why="a scalar tensor (0-dim), positive")
            else:
                yield replace(g, shape=(), init=None, why="a scalar tensor (0-dim)")


def _derived(shapes: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Shapes another float tensor often has next to these: the same, its last dim (a bias),
    a matrix sharing its last dim (a weight; square, when the product meets the input again:
    ``x + tanh(x @ W.T)``), its leading dim."""
    found = []
    for s in shapes[:2]:
        if not s:
            continue
        found += [s, s[-1:], s[-2:], ("K", s[-1]), (s[-1], s[-1]), (s[-1], "K"), s[:1], s[:-1],
                  ("K",)]
    return [f for f in found if f]


def _index_shapes(shapes: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Shapes of an index or mask next to these float tensors: a value per row, per position
    without the channel dim, or a pair of coordinates per entry."""
    found: list[tuple[Any, ...]] = []
    for s in shapes[:2]:
        if not s:
            continue
        found += [s[:1], s[:1] + s[2:], s[:-1], s]
    return [*found, (2, "E"), ("N",)]
