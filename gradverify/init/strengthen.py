"""Strong specs: the drafted case of ``init`` or ``record``, perturbed where its
values can hide a bug, keeping each change that a scorer finds stronger.

A case whose inputs run can still prove nothing: rays that all miss and values that are all
clamped make every gradient zero, a mask that selects nothing or a weight of ones hides a
backward that forgets a factor, a loop that runs once (or not at all) hides its later steps, and
self-loop edges make forward 0/0. The candidates (``candidates``) are the perturbations that
undo these: random non-unit values for constants, signed or rescaled values, a mask that
selects some, a loop that runs more than once, edges without self-loops. Each is scored by a
``Scorer``; ``strengthen`` keeps, argument by argument, the candidate that scores highest, and
only a strictly stronger one.

The default scorer (``init.measure``) needs no mutants: it runs forward (which must be finite)
and one backward with a random signed output gradient in float64, and counts the inputs whose
gradient is not all zero, the constants left, the loops that run more than once. A mutation
scorer (the mutants the case kills, of how many) fills ``Strength.killed``/``total``, which rank
first, and the header then says ``mutation score: K/N``: plugging one in is one line in
``measure.scorer_for`` (``measure.with_mutants``). This module runs nothing itself: it is
tested with scorers of numbers.
"""
from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import KW_ONLY, dataclass, replace
from typing import Any

LOOP_NAMES = re.compile(r"^(n_\w+|num_\w+|\w*steps?|\w*iters?|\w*iterations?|rounds?|"
                        r"repeats?|times|layers)$")
"""An int with such a name counts the runs of a loop: below 2, its later runs go unchecked."""
FLOAT_DTYPES = ("float", "bfloat", "complex")
CONSTANT_FLOATS = (0.0, 1.0, -1.0)
"""A scalar at one of these hides a factor (x * 1, x + 0) or a sign."""
SCALAR_TRIES = (1.3, -0.7, 0.35, 2.2, -1.6)
"""Random-looking, non-unit values tried for a float scalar: signed, small and large."""
SCALES = (0.25, 3.0)
"""Standard deviations tried for a float tensor: near a point (rays from inside a sphere) and
spread out."""
MAX_TRIES = 60
"""Candidates scored per case at most: the bound that decides what is written, so that the
same code gets the same spec on an idle machine and on a loaded one."""
MAX_SECONDS = 40.0
"""A safety limit only, for a forward slow enough that ``MAX_TRIES`` scorings would stall the
command; a search it cuts says so in the strength line (``Strength.cut``)."""

Case = Mapping[str, Any]
"""A case as ``spec.file.from_dict`` reads it, with its own ``dims`` and ``args``."""


@dataclass(frozen=True)
class Strength:
    """How much a case can catch, as one scorer measured it."""

    finite: bool
    """forward's outputs are finite (NaN or inf from forward would be blamed on backward)."""
    _: KW_ONLY
    backward_finite: bool = True
    """backward's gradients are finite: NaN there where forward is finite is an input at a
    point forward is not differentiable at (a self-loop's length of 0), or a bug that no
    input avoids."""
    exercised: tuple[str, ...] = ()
    """The differentiable inputs whose gradient is not all zero."""
    inputs: tuple[str, ...] = ()
    """The differentiable inputs."""
    constants: tuple[str, ...] = ()
    """Arguments whose values are one constant (a unit scalar, ones, a mask of one value)."""
    loops: tuple[str, ...] = ()
    """Loop counts of at least 2."""
    empty: tuple[str, ...] = ()
    """Loop counts of 0 or less: the loop has nothing to verify."""
    nonzero: float = 0.0
    """The fraction of gradient entries that are not zero."""
    hits: int = 0
    """(draw, input) pairs whose gradient is not all zero: more draws exercised is stronger even
    where some draw exercises none."""
    killed: int | None = None
    """Mutants this case kills, and of how many (a mutation scorer's)."""
    total: int | None = None
    unran: tuple[int, ...] = ()
    """Lines of backward holding mutants that this case never runs (a branch it never takes):
    the score does not count them, and the header says so rather than claim them."""
    untaken: tuple[int, ...] = ()
    """Lines of backward with an arm of an ``a if c else b`` holding mutants that this case
    never takes."""
    gaps: tuple[tuple[int, str], ...] = ()
    """(line, what) no case exercises that a mutant surviving there needs (``MutantLine.gap``):
    the header names them rather than claim them."""
    error: str | None = None
    """Why it could not be measured (forward raised), else None."""
    cut: str | None = None
    """Why the search for stronger values ended before its tries did (a time limit), else
    None: the spec may be weaker than the same search finds on a faster machine."""

    def key(self, *, sizes: bool = False) -> tuple[Any, ...]:
        """Larger is stronger: forward finite first, then backward finite, mutants killed, no
        empty loop, inputs exercised, draws that exercise any, loops, fewer constants, more
        nonzero gradient entries (in tenths: noise is no gain). ``sizes``: only what pays for
        a larger case (up to the draws exercised)."""
        key = (self.error is None, self.finite, self.backward_finite, self.killed or 0,
               -len(self.empty), len(self.exercised), self.hits, len(self.loops),
               -len(self.constants), math.floor(self.nonzero * 10))
        return key[:7] if sizes else key

    @property
    def vacuous(self) -> bool:
        """Every gradient is zero: gradcheck would compare zeros with zeros."""
        return self.error is None and self.finite and bool(self.inputs) and not self.hits

    def score_line(self) -> str | None:
        """``mutation score: K/N``, where the case was scored with the mutants of backward."""
        if self.killed is not None and self.total:
            return (f"mutation score: {self.killed}/{self.total} (mutants of backward that "
                    "these inputs kill, gradgradcheck, checkpoint and the compile and "
                    "op-tracing checks left out; `gradverify check --mutate` runs them too "
                    "and names the survivors)")
        return None

    def unran_line(self) -> str | None:
        """``not run: ...``, where backward has lines this case never runs (a branch it never
        takes), which neither the checks nor the score cover."""
        parts = []
        if self.unran:
            which = ", ".join(str(n) for n in self.unran)
            parts.append(f"backward's line{'s' if len(self.unran) > 1 else ''} {which} never "
                         "ran")
        if self.untaken:
            which = ", ".join(str(n) for n in self.untaken)
            lines = "lines" if len(self.untaken) > 1 else "line"
            parts.append(f"an arm of the `... if ... else ...` on {lines} {which} was never "
                         "taken")
        if not parts:
            return None
        return (f"not run: {' and '.join(parts)} on these inputs, so no check covers them and "
                "the score does not count them; add a case that takes that path")

    def gaps_line(self) -> str | None:
        """``not exercised: ...``, where mutants survive for want of structure the case lacks
        (a layout, an overlap): what it does not prove."""
        if not self.gaps:
            return None
        said = "; ".join(f"line {line}: {what}" for line, what in self.gaps)
        return f"not exercised: {said} (`gradverify check --mutate` says what would)"

    def header(self) -> str:
        """The spec's line saying how strong its case is."""
        if self.error is not None:
            return f"strength not measured: {self.error}"
        if not self.finite:
            return "strength: forward returns NaN or inf on these inputs"
        parts = []
        if self.inputs:
            which = "every input's gradient" if len(self.exercised) == len(self.inputs) else \
                "the gradients of " + (", ".join(self.exercised) or "no input")
            parts.append(f"{which} nonzero in every draw ({len(self.exercised)}/"
                         f"{len(self.inputs)}; {round(self.nonzero * 100)}% of entries)")
        if not self.backward_finite:
            parts.append("backward returns NaN or inf on some draw")
        parts.append("constant: " + ", ".join(self.constants) if self.constants
                     else "no constant inputs")
        if self.loops:
            parts.append("loop counts and steps of at least 2 (" + ", ".join(self.loops) + ")")
        if self.cut:
            parts.append(self.cut)
        return "strength: " + ", ".join(parts)


Scorer = Callable[[Case], Strength]


@dataclass(frozen=True)
class Edit:
    """One change to a case: an argument's new value (``arg``), or a dim's size (``dim``)."""

    arg: str | None
    value: Any
    """For a tensor, the keys replacing its ``init`` and init parameters (or its literal
    ``values``); for a scalar, the value; for a dim, its size."""
    why: str
    dim: str | None = None


@dataclass(frozen=True)
class Strengthened:
    """The case after strengthening, the edits that made it, and its strength."""

    case: Case
    edits: tuple[Edit, ...]
    strength: Strength
    before: Strength
    tried: int = 0
    """Cases scored."""


INIT_KEYS = ("init", "low", "high", "mean", "std", "p", "values")
"""The keys of a tensor an edit replaces; literal values replace its shape and order too."""
SHAPE_KEYS = ("shape", "sorted")


def apply_edit(case: Case, edit: Edit) -> dict[str, Any]:
    """``case`` with ``edit`` made (a new mapping; ``case`` is not changed)."""
    out = {**case, "args": dict(case.get("args", {})), "dims": dict(case.get("dims", {}))}
    if edit.dim is not None:
        out["dims"][edit.dim] = edit.value
        return out
    assert edit.arg is not None
    old = out["args"][edit.arg]
    if isinstance(old, dict) and isinstance(edit.value, dict):
        dropped = INIT_KEYS + (SHAPE_KEYS if "values" in edit.value else ())
        kept = {k: v for k, v in old.items() if k not in dropped}
        out["args"][edit.arg] = {**kept, **edit.value}
    else:
        out["args"][edit.arg] = edit.value
    return out


def strengthen(case: Case, score: Scorer, *, loops: frozenset[str] = frozenset(),
               max_tries: int = MAX_TRIES, max_seconds: float = MAX_SECONDS,
               fixed_dims: frozenset[str] = frozenset()) -> Strengthened:
    """The strongest case found by changing one argument at a time: for each argument, its
    candidates (``candidates``) are scored, and the best kept where it is strictly stronger
    than the case so far. ``loops``: int arguments known to count a loop's runs;
    ``fixed_dims``: dims whose size is never changed (3 coordinates)."""
    started = time.monotonic()
    before = best_strength = score(case)
    edits: dict[str, Edit] = {}
    tried, cut = 1, False
    for _ in range(PASSES):
        improved = False
        dims = [DIM + d for d in case.get("dims", {}) if d not in fixed_dims]
        for name in [*case.get("args", {}), *dims, None]:
            best: tuple[Edit, ...] = ()
            for group in _groups(case, name, loops):
                if tried >= max_tries:
                    break
                if time.monotonic() - started > max_seconds:
                    cut = True
                    break
                strength = score(_applied(case, group))
                tried += 1
                # a larger dim costs every check time: only for more killed or exercised
                dim = name is not None and name.startswith(DIM)
                if strength.key(sizes=dim) > best_strength.key(sizes=dim):
                    best_strength, best = strength, group
            if best:
                case, improved = _applied(case, best), True
                edits.update({e.arg or DIM + (e.dim or ""): e for e in best})
        if not improved or cut:
            break
    if cut:
        best_strength = replace(best_strength, cut=f"the search for stronger values stopped at "
                                                  f"its {max_seconds:g} s limit after {tried} "
                                                  "tries")
    return Strengthened(case, tuple(edits.values()), best_strength, before, tried)


PASSES = 2
"""Rounds over the arguments: a change can pay only after another (a sphere's radius grown,
then its centre moved near the rays)."""


DIM = "dim:"


def _groups(case: Case, name: str | None, loops: frozenset[str]
            ) -> Iterator[tuple[Edit, ...]]:
    """The candidate edits of one argument, one dim (``dim:N``) or, for None, of every float
    tensor at once."""
    if name is None:
        yield from joint(case)
    elif name.startswith(DIM):
        dim = name[len(DIM):]
        size = case["dims"][dim]
        if isinstance(size, int) and 2 <= size < LONGER_THAN:
            # more entries: fewer draws where every one misses; odd, so no block divides it
            yield (Edit(None, 2 * size + 1, "more entries, so that fewer draws exercise none",
                        dim=dim),)
        if isinstance(size, int) and size >= 4 and size & (size - 1) == 0:
            yield (Edit(None, size + 1, f"{size} is a multiple of every block up to it: a "
                        "partial last block goes unchecked", dim=dim),)
    else:
        yield from ((e,) for e in candidates(case, name, loops))


LONGER_THAN = 8
"""A dim shorter than this may double (plus one) where that makes the case stronger."""


def _applied(case: Case, edits: tuple[Edit, ...]) -> Case:
    for edit in edits:
        case = apply_edit(case, edit)
    return case


def joint(case: Case) -> Iterator[tuple[Edit, ...]]:
    """Every float tensor rescaled at once: values that meet only when all move (rays and the
    sphere they must hit, drawn near one point)."""
    floats = [n for n, v in case.get("args", {}).items() if isinstance(v, dict) and "shape" in v
              and _floating(v) and v.get("init") in (None, "randn", "normal")]
    if len(floats) < 2:
        return
    for std in SCALES:
        yield tuple(Edit(n, {"init": "normal", "std": std},
                         f"spread {std} with the others, at which more gradients are nonzero")
                    for n in floats)


def _floating(value: Mapping[str, Any]) -> bool:
    return str(value.get("dtype", "float32")).startswith(FLOAT_DTYPES)


def candidates(case: Case, name: str, loops: frozenset[str] = frozenset()) -> Iterator[Edit]:
    """The perturbations of one argument that may make the case stronger, the likelier first."""
    value = case["args"][name]
    dims = case.get("dims", {})
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, float):
        why = f"{value!r} hides a factor or a sign" if value in CONSTANT_FLOATS else \
            "a non-unit value that makes more gradients nonzero"
        # never the value of another scalar: two equal spacings hide one used for the other
        taken = {v for n, v in case["args"].items() if n != name and isinstance(v, float)}
        for v in SCALAR_TRIES:
            if v not in taken:
                yield Edit(name, v, why)
    elif isinstance(value, int):
        if (name in loops or LOOP_NAMES.match(name)) and value < 2:
            for v in (3, 2):
                yield Edit(name, v, f"{value} run(s) of the loop hide its later steps")
    elif isinstance(value, dict) and "shape" in value:
        yield from _tensor_candidates(name, value, dims)


def _tensor_candidates(name: str, value: Mapping[str, Any],
                       dims: Mapping[str, Any]) -> Iterator[Edit]:
    dtype = str(value.get("dtype", "float32"))
    init = value.get("init")
    if dtype == "bool":
        if init in ("zeros", "ones") or value.get("p") in (0, 1, 0.0, 1.0):
            yield Edit(name, {"init": "bernoulli", "p": 0.5},
                       "a mask of one value selects nothing (or everything)")
        return
    if _floating(value):
        if init in ("zeros", "ones"):
            yield Edit(name, {"init": "uniform", "low": 0.5, "high": 1.5},
                       f"random, since {init} hide a missing factor")
            yield Edit(name, {}, f"random, since {init} hide a missing factor")
        if init == "positive":
            yield Edit(name, {"init": "uniform", "low": -1.5, "high": 1.5}, "signed values")
        for std in SCALES:
            yield Edit(name, {"init": "normal", "std": std},
                       f"spread {std}, at which more gradients are nonzero")
        return
    edit = chain_edit({"args": {name: value}, "dims": dims}, name)
    if edit is not None:
        yield edit


def chain_edit(case: Case, name: str) -> Edit | None:
    """The integer tensor ``name`` of shape [2, E] and values below N, as the edges of a chain
    i -> i+1 (mod N): no self-loops (a self-loop makes an edge's length 0, and forward 0/0)."""
    value = case["args"].get(name)
    if not isinstance(value, dict) or not str(value.get("dtype", "")).startswith(("int", "uint")):
        return None
    pair = _pair_shape(value, case.get("dims", {}))
    if pair is None:
        return None
    size, high = pair
    return Edit(name, {"values": [[i % high for i in range(size)],
                                  [(i + 1) % high for i in range(size)]]},
                f"a chain of edges i -> i+1 (mod {high}): no self-loops")


def _pair_shape(value: Mapping[str, Any], dims: Mapping[str, Any]) -> tuple[int, int] | None:
    """(E, N) of an integer tensor of shape [2, E] whose values are below N >= 2 (an edge
    list), else None."""
    shape = [dims.get(s, s) for s in value.get("shape") or []]
    if len(shape) != 2 or shape[0] != 2:
        return None
    size = shape[1]
    high = value.get("high")
    high = dims.get(high, high) if isinstance(high, str) else high
    low = value.get("low", 0)
    if not isinstance(size, int) or not isinstance(high, int) or high - low < 2 or low != 0:
        return None
    return size, high
