"""Cases for forward's branches on a parameter's rank: ``if x.dim() == 3:`` (a multichannel
signal) takes a path that a draft of x [N, D] never runs, and a bug there goes unseen. For
each rank forward compares a tensor's with (``init.ranks``) that the draft lacks, the same
guesses with leading dims added (or dropped) are tried on forward and backward; those that run
become more cases of the spec."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from gradverify.init.guess import Guess
from gradverify.init.probe import dims_of, evaluate
from gradverify.init.source import read_source
from gradverify.targets import Target

MAX_BRANCH_CASES = 2
"""More cases at most: each is run by every check."""

_LEADING = ("B", "C", "H", "W", "K")
"""Dims a branch's case may add in front, the first not in use taken."""


@dataclass(frozen=True)
class BranchCase:
    """One more case: its name (``x_3d``), its guesses, and why the spec has it."""

    name: str
    guesses: list[Guess]
    why: str


def branch_cases(info: Target, guesses: list[Guess]) -> list[BranchCase]:
    """The cases, beyond the draft, that take forward's branches on a tensor's rank."""
    hints = read_source(info)
    used = {d for g in guesses for d in dims_of(g)}
    found: list[BranchCase] = []
    for index, guess in enumerate(guesses):
        if guess.kind != "tensor" or not guess.shape:
            continue
        for rank in hints[guess.name].branches if guess.name in hints else ():
            shape = _reshaped(guess.shape, rank, used)
            if shape is None or len(found) >= MAX_BRANCH_CASES:
                continue
            candidate = [_with_shape(g, shape, rank) if k == index else g
                         for k, g in enumerate(guesses)]
            if evaluate(info, candidate).ok:
                found.append(BranchCase(f"{guess.name}_{rank}d", candidate,
                                        f"forward branches on {guess.name}'s rank {rank}"))
    return found


def _with_shape(g: Guess, shape: tuple[Any, ...], rank: int) -> Guess:
    """The guess with another shape (in the value strengthening fixed, where it did)."""
    fixed = {**g.fixed, "shape": list(shape)} if isinstance(g.fixed, dict) else g.fixed
    return replace(g, shape=shape, fixed=fixed,
                   why=f"{g.why}; {rank} dims, for forward's branch on {g.name}'s rank")


def _reshaped(shape: tuple[Any, ...], rank: int, used: set[str]) -> tuple[Any, ...] | None:
    """``shape`` with leading dims added (unused names) or dropped to ``rank`` dims, or None
    when it has that rank already (or the rank is none a tensor has)."""
    if rank == len(shape) or rank < 1 or rank > 5:
        return None
    if rank < len(shape):
        return shape[len(shape) - rank:]
    free = [d for d in _LEADING if d not in used]
    added = rank - len(shape)
    return None if len(free) < added else (*free[:added], *shape)
