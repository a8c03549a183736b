"""The strength of a case measured without mutants (``init.strengthen``'s default scorer): its
inputs made as ``check`` makes them, in float64, for a few seeds; forward run (its outputs must be
finite) and one backward with a random signed output gradient; the inputs whose gradient is not
all zero counted, with the constants and the loops the case has."""
from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from gradverify.case.binding import bind
from gradverify.case.inputs import InputMaker, case_seed
from gradverify.choices import DEFAULT_SEED
from gradverify.init.strengthen import CONSTANT_FLOATS, LOOP_NAMES, Case, Scorer, Strength
from gradverify.spec.file import from_dict
from gradverify.targets import Target
from gradverify.targets.op_calls import for_case

OTHER_SEEDS = (1, 2)
"""Inputs are drawn with the seed check draws this case with by default, and with each of
these: a strength that holds only for one draw (one ray in a hundred hits) is no strength."""


def scorer_for(info: Target, *, loops: frozenset[str] = frozenset()) -> Scorer:
    """The scorer ``init`` and ``record`` strengthen their cases with. A mutation engine plugs
    in here, in one line: ``return with_mutants(score, lambda case: <killed, total>)``."""
    def score(case: Case) -> Strength:
        return measure(info, case, loops=loops)
    return score


def with_mutants(probe: Scorer, mutants: Callable[[Case], tuple[int, int]]) -> Scorer:
    """``probe``'s strength with the mutants the case kills, ``mutants(case)`` = (killed,
    total), added where forward is finite: the kills then rank first and the header is the
    mutation score."""
    def score(case: Case) -> Strength:
        strength = probe(case)
        if strength.error is not None or not strength.finite:
            return strength
        killed, total = mutants(case)
        return replace(strength, killed=killed, total=total)
    return score


def measure(info: Target, case: Case, *, loops: frozenset[str] = frozenset()) -> Strength:
    """The case's strength over the draws of ``seeds``: what holds in every draw (an input
    exercised, backward finite), and the draws that exercise any input."""
    with warnings.catch_warnings():  # forward on trial values: its warnings are noise here
        warnings.simplefilter("ignore")
        found = [_measure_once(info, case, seed) for seed in seeds(info, case)]
    worst = min(found, key=lambda s: s.key())
    if worst.error is not None or not worst.finite:
        return worst
    exercised = tuple(n for n in worst.inputs if all(n in s.exercised for s in found))
    counts = _loop_counts(case, loops)
    return Strength(True, exercised=exercised, inputs=worst.inputs,
                    constants=_constants(case),
                    backward_finite=all(s.backward_finite for s in found),
                    loops=tuple(n for n, v in counts.items() if v >= 2),
                    nonzero=sum(s.nonzero for s in found) / len(found),
                    hits=sum(len(s.exercised) for s in found),
                    empty=tuple(n for n, v in counts.items() if v <= 0))


def seeds(info: Target, case: Case) -> tuple[int, ...]:
    """The seed ``check`` draws the case with (its default seed, the target, the case's name),
    then ``OTHER_SEEDS``."""
    return (case_seed(DEFAULT_SEED, info.target, str(case.get("name", ""))), *OTHER_SEEDS)


def _constants(case: Case) -> tuple[str, ...]:
    return tuple(name for name, value in case.get("args", {}).items() if _constant(value))


def _constant(value: Any) -> bool:
    """A unit scalar, a tensor of zeros or ones, or a mask of one value."""
    if isinstance(value, float):
        return value in CONSTANT_FLOATS
    return isinstance(value, Mapping) and (value.get("init") in ("zeros", "ones")
                                           or value.get("p") in (0, 1))


def _loop_counts(case: Case, loops: frozenset[str]) -> dict[str, int]:
    """The int arguments that count (or step) a loop, by name: their values."""
    found = {}
    for name, value in case.get("args", {}).items():
        if isinstance(value, str):
            value = case.get("dims", {}).get(value)
        if (name in loops or LOOP_NAMES.match(name)) and isinstance(value, int) \
                and not isinstance(value, bool):
            found[name] = value
    return found


def _measure_once(info: Target, case: Case, seed: int) -> Strength:
    import torch

    from gradverify.checks import _calls as calls
    try:
        spec = from_dict({"target": info.target, "cases": [dict(case)]})
        one = spec.cases[0]
        maker = InputMaker(one, bind(one, info, spec), info, seed, "cpu")
        args = maker.args("double")
        applied = calls.apply(for_case(info, maker.groups), args)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 -- the user's forward, or a spec it rejects
        return Strength(False, error=calls.describe_exception(exc)[:200])
    tensors = [o for o in applied.outputs if isinstance(o, torch.Tensor)]
    if not all(bool(torch.isfinite(o).all()) for o in tensors
               if o.is_floating_point() or o.is_complex()):
        return Strength(False)
    names = tuple(args.names[i] for i in args.diff_positions)
    outputs = [applied.outputs[j] for j in applied.differentiable]
    leaves = [args.values[i] for i in args.diff_positions]
    if not outputs or not leaves:
        return Strength(True, inputs=names)
    generator = torch.Generator().manual_seed(seed)
    cotangents = [torch.randn(o.shape, generator=generator, dtype=o.dtype) for o in outputs]
    try:
        grads = torch.autograd.grad(outputs, leaves, cotangents, allow_unused=True)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 -- the user's backward
        return Strength(False, error=calls.describe_exception(exc)[:200])
    present = [g for g in grads if isinstance(g, torch.Tensor)]
    finite = all(bool(torch.isfinite(g).all()) for g in present)
    exercised = tuple(n for n, g in zip(names, grads)
                      if isinstance(g, torch.Tensor) and bool(g.ne(0).any()))
    entries = sum(g.numel() for g in present)
    nonzero = sum(int(g.ne(0).sum()) for g in present) / entries if entries else 0.0
    return Strength(True, exercised=exercised, inputs=names, nonzero=nonzero,
                    backward_finite=finite)
