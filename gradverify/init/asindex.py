"""The probe's retry of a float guess as an index. Where forward raised an indexing error on
the guessed inputs ("tensors used as indices must be long, int, byte or bool tensors", "index
-2 is out of bounds for dimension 0 with size 5", "index out of range in self") and reading
the source did not say which argument is an index (forward reached it in a way
``init.callees`` does not follow: a table of functions, a lambda), each float tensor is tried
as an integer tensor whose values index a dim of the others.
"""
from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gradverify.init.guess import Guess

if TYPE_CHECKING:
    from gradverify.init.probe import Attempt

INDEX_ERRORS = re.compile(
    r"tensors used as indices must be|expected dtype int(32|64)|index .*out of (bounds|range)|"
    r"out of bounds for dimension|expected .*index.* to (be|have) .*(long|int)|"
    r"index_select\(\): index|index is supposed to be", re.IGNORECASE)
"""How torch says that a tensor used as an index is not one (or indexes past the dim)."""

WRONG_DTYPE = re.compile(r"tensors used as indices must be|expected dtype int(32|64)|"
                         r"expected .*index.* to (be|have) .*(long|int)", re.IGNORECASE)

TRIES_PER_ARGUMENT = 12
"""Shapes and ranges tried for each float tensor turned into an index."""


def as_index(guesses: list[Guess], best: Attempt, order: list[int],
             evaluate: Callable[[list[Guess]], Attempt]) -> tuple[list[Guess], Attempt] | None:
    """Where ``best`` failed on an indexing error: the guesses with one float tensor (in
    ``order``) made an index, where that runs or gets further; else, where the error said a
    float was used as an index, where that error is gone (the search then goes on from there,
    over the index's shapes and ranges); else None."""
    if best.error is None or not INDEX_ERRORS.search(best.error):
        return None
    dtype = bool(WRONG_DTYPE.search(best.error))  # not a range: a float was the index
    settled = None
    for position in order:
        guess = guesses[position]
        if guess.kind != "tensor" or not guess.dtype.startswith("float"):
            continue
        for alternative in itertools.islice(_as_indices(guess, guesses), TRIES_PER_ARGUMENT):
            candidate = [alternative if k == position else g for k, g in enumerate(guesses)]
            attempt = evaluate(candidate)
            if attempt.ok or attempt.progress > best.progress:
                return candidate, attempt
            if settled is None and dtype and not INDEX_ERRORS.search(attempt.error or ""):
                settled = candidate, attempt
    return settled


def _as_indices(g: Guess, guesses: list[Guess]) -> Iterator[Guess]:
    """``g`` as an int64 index: a value per row of the other tensors, or its own shape, with
    values in the range of each of their dims."""
    others = [o.shape for o in guesses if o is not g and o.kind == "tensor"
              and o.dtype.startswith("float")]
    dims = list(dict.fromkeys(d for s in others for d in s if isinstance(d, str))) or ["N"]
    shapes: list[tuple[Any, ...]] = list(dict.fromkeys(
        [*(s[:1] for s in others if s), g.shape, *(s for s in others if s), ("N",)]))
    why = "indices (int64), values in [0, {}): forward raised an indexing error on floats"
    for shape, high in itertools.product(shapes, dims):
        yield replace(g, dtype="int64", shape=shape, high=high, init=None, requires_grad=None,
                      rank_at_least=0, elementwise=False, why=why.format(high))
