"""Trying guesses on the real forward: build the spec the guesses describe, make its inputs as
``check`` would, run forward and one backward. When that raises, search nearby specs (other
ranks, shapes taken from the other tensors, other dims for sizes and index ranges), one
parameter at a time, keeping a change when the Function gets further (a later line of forward,
or into backward), until it runs or the budget is spent.
"""
from __future__ import annotations

import re
import time
import warnings
from dataclasses import dataclass, replace
from typing import Any

from gradverify import frames
from gradverify.case.binding import bind
from gradverify.case.inputs import InputMaker
from gradverify.errors import InputError
from gradverify.init.asindex import TRIES_PER_ARGUMENT, as_index
from gradverify.init.guess import SIZES, Guess, arg_value
from gradverify.init.nearby import alternatives
from gradverify.spec.file import from_dict
from gradverify.targets import Target
from gradverify.targets.model import Built
from gradverify.targets.op_calls import for_case

MAX_CALLS = 300
"""Candidate specs tried per Function at most: the bound that decides the spec, the same on a
loaded machine as on an idle one."""
MAX_SECONDS = 40.0
"""A safety limit only, for a forward so slow that ``MAX_CALLS`` tries would stall ``init``.
With strengthening's (``init.strengthen.MAX_SECONDS``) and the mutation score, it stays below
the probe's deadline (``init.bounded.PROBE_DEADLINE``), so a cut search is said in the spec
rather than its target written unprobed."""


MATRIX_ONLY = "on tensors of dimension other than 2"
"""torch's warning for ``x.T`` on a tensor that is not a matrix: forward was written for
matrices, and on these inputs its formula means something else (a dot product, no transpose)."""


RAN_MISREAD = 10**9
"""The progress of a forward that ran to its end on inputs it misread (``MATRIX_ONLY``): past
any line inside forward, short of backward."""


@dataclass
class Attempt:
    ok: bool
    progress: tuple[int, int]
    """(0 forward / 1 backward / 2 done, line reached): larger is further."""
    error: str | None = None
    without: tuple[str, ...] = ()
    """Floating inputs backward gave no gradient (None)."""
    flat: bool = False
    """forward does not move along a random direction, yet backward gives a gradient: a
    surrogate (straight-through) gradient, by design or not."""


def spec_dict(guesses: list[Guess]) -> dict[str, Any]:
    """The spec the guesses describe (the keys of the YAML format)."""
    used = list(dict.fromkeys(d for g in guesses for d in dims_of(g)))
    args: dict[str, Any] = {}
    for g in guesses:
        if g.kind == "default":
            continue
        args[g.name] = arg_value(g)
    sizes = dim_sizes(used)
    longer = {g.longer[0]: g.longer[1] + 1 for g in guesses if g.longer and g.longer[0] in sizes}
    if longer:
        # a dim longer than a loop's step; the others as small as they go while distinct, so
        # that the case stays small enough for slow-mode gradcheck
        small = iter(range(2, 64))
        for name in sorted((n for n in sizes if n not in longer), key=sizes.__getitem__):
            sizes[name] = min(sizes[name], next(small))
        for name, size in longer.items():
            sizes[name] = max(sizes[name], size)
    return {"dims": sizes, "cases": [{"name": "basic", "args": args}]}


def dim_sizes(names: list[str]) -> dict[str, int]:
    """Sizes for the dims used: the usual letters' own, other names the free ones left."""
    known = [n for n in SIZES if n in names]
    free = iter(size for size in (4, 5, 6, 7, 8, 9, 10, 11, 12)
                if size not in {SIZES[n] for n in known})
    sizes = {n: SIZES[n] for n in known}
    sizes.update({n: next(free, 3) for n in names if n not in SIZES})
    return sizes


def dims_of(g: Guess) -> list[str]:
    names = [s for s in g.shape if isinstance(s, str)] if g.tensor() else []
    if g.kind == "tensor" and g.high:
        names.append(g.high)
    if g.kind == "int" and isinstance(g.value, str):
        names.append(g.value)
    if g.kind in ("tuple", "list"):
        names += [v for v in g.value if isinstance(v, str)]
    return names


SEEDS = (0, 1, 2)
"""Inputs are drawn with each of these seeds: an index range that is wrong only for some draws
(a column index of 4 in a 5 x 4 matrix) must not pass by luck."""


def evaluate(info: Target, guesses: list[Guess]) -> Attempt:
    """Run forward and one backward on the inputs the guesses make, for each seed; the
    attempt that got least far counts."""
    attempts = []
    for seed in SEEDS:
        attempt = _evaluate(info, guesses, seed)
        if not attempt.ok:
            return attempt
        attempts.append(attempt)
    return attempts[0]


def _evaluate(info: Target, guesses: list[Guess], seed: int) -> Attempt:
    import torch

    from gradverify.checks import _calls as calls
    try:
        spec = from_dict(spec_dict(guesses))
        case = spec.cases[0]
        maker = InputMaker(case, bind(case, info, spec), info, seed, "cpu")
        args = maker.args("double")
    except (InputError, KeyError, ValueError, RuntimeError) as exc:
        return Attempt(False, (-1, 0), str(exc))
    info = for_case(info, maker.groups)  # an op's tensor lists, spread into inputs: gathered
    # torch warns of x.T on a non-matrix once a process: always, here, so that every draft
    # (of every target, whichever came first) is judged alike
    warn_always = torch.is_warn_always_enabled()
    torch.set_warn_always(True)
    try:
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            applied = calls.apply(info, args)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 -- user code
        return Attempt(False, (0, _line(exc, info)), calls.describe_exception(exc))
    finally:
        torch.set_warn_always(warn_always)
    misread = next((str(w.message) for w in warned if MATRIX_ONLY in str(w.message)), None)
    if misread is not None:  # a matrix formula run on a vector: forward means another thing
        # further than any error inside forward (forward ran to its end), short of backward
        return Attempt(False, (0, RAN_MISREAD), misread)
    outputs = [applied.outputs[j] for j in applied.differentiable]
    leaves = [args.values[i] for i in args.diff_positions]
    without: tuple[str, ...] = ()
    if outputs and leaves:
        try:
            grads = torch.autograd.grad(outputs, leaves, [torch.ones_like(o) for o in outputs],
                                        allow_unused=True)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 -- user code
            return Attempt(False, (1, _line(exc, info)), calls.describe_exception(exc))
        without = tuple(args.names[i] for i, g in zip(args.diff_positions, grads) if g is None)
    return Attempt(True, (2, 0), without=without, flat=_flat_with_gradient(
        info, args, outputs, leaves, grads if outputs and leaves else ()))


def _flat_with_gradient(info: Target, args: Any, outputs: list[Any], leaves: list[Any],
                        grads: Any) -> bool:
    import torch

    from gradverify.checks import _calls as calls
    from gradverify.checks import _tensors as tk

    if not outputs or not any(g is not None and bool(g.ne(0).any()) for g in grads):
        return False
    try:
        generator = torch.Generator().manual_seed(0)
        moved = [(v.detach() + 1e-6 * torch.randn(v.shape, generator=generator, dtype=v.dtype)
                  .to(v.device)).requires_grad_(True)
                 if i in args.diff_positions else v for i, v in enumerate(args.values)]
        again = calls.apply(info, type(args)(args.names, moved, args.differentiable))
        if not again.differentiable:
            return False
        return all(tk.same_values(a.detach(), b) for a, b in zip(
            [again.outputs[j] for j in again.differentiable], [o.detach() for o in outputs]))
    except Exception:  # noqa: BLE001 -- a hint only
        return False


def _line(exc: BaseException, info: Target) -> int:
    """The last line of the Function's own source the traceback passed through."""
    found = frames.innermost_user_frame(exc, info.source_file, in_target=True)
    return found.line if found is not None else 0


def search(info: Target, guesses: list[Guess]) -> tuple[list[Guess], Attempt]:
    """The guesses, changed one parameter at a time while that gets further, until forward
    and backward run (or ``MAX_CALLS`` candidates or ``MAX_SECONDS`` are spent)."""
    with warnings.catch_warnings():  # forward on trial shapes: its warnings are noise here
        warnings.simplefilter("ignore")
        return _search(info, guesses)


def _search(info: Target, guesses: list[Guess]) -> tuple[list[Guess], Attempt]:
    started = time.monotonic()
    best = evaluate(info, guesses)
    calls = 1
    last_resort = False
    held = _held_shapes(info)
    while not best.ok:
        improved = False
        for index in _order(guesses):
            guess = guesses[index]
            sizes = [*held, *_sizes_in(best.error, guesses)]
            for alternative in alternatives(guess, guesses, last_resort, sizes):
                if calls >= MAX_CALLS or time.monotonic() - started > MAX_SECONDS:
                    return guesses, best
                candidate = [alternative if k == index else g for k, g in enumerate(guesses)]
                attempt = evaluate(info, candidate)
                calls += 1
                if attempt.ok or attempt.progress > best.progress:
                    guesses, best, improved = candidate, attempt, True
                    break
            if best.ok:
                break
        if not improved and not best.ok:
            # Two arguments that must change together (an index range and the matrix it
            # indexes): the first few alternatives of each pair, once.
            pair = _pairs(info, guesses, best, started, calls)
            if pair is not None:
                guesses, best = pair
                improved = True  # and go on from there
        if not improved and calls < MAX_CALLS:
            # last, an indexing error on floats: a float argument as an index (init.asindex)
            retried = as_index(guesses, best, _order(guesses), lambda c: evaluate(info, c))
            if retried is not None:
                (guesses, best), calls = retried, calls + TRIES_PER_ARGUMENT
                improved = True
        if not improved and not last_resort:
            last_resort = improved = True  # once more, with values that run a loop no step
        if not improved:
            break
    if best.ok and best.without:  # inputs backward gives no gradient need none
        guesses = [replace(g, requires_grad=False,
                           why=f"{g.why}; backward gives it no gradient: requires_grad false")
                   if g.name in best.without and g.kind == "tensor" else g for g in guesses]
    return guesses, best


def _held_shapes(info: Target) -> list[tuple[tuple[int, ...], str]]:
    """The shapes of a module's own parameters (which the spec does not draft): an input
    often meets one of their dims (``spec @ self.weight.T``)."""
    built = info.detail(Built)
    if built is None:
        return []
    return [(tuple(p.shape), f"a size of the module's {name}")
            for name, p in list(built.instance.named_parameters())[:2]]


def _sizes_in(error: str | None, guesses: list[Guess]) -> list[tuple[tuple[int, ...], str]]:
    """The sizes forward's error names that no dim of the guesses has: ``mat1 and mat2
    shapes cannot be multiplied (5x4 and 3x3)`` on x [N=5, D=4] says a dim of 3."""
    used = set(dim_sizes(list(dict.fromkeys(d for g in guesses for d in dims_of(g)))).values())
    found = [int(n) for n in re.findall(r"(?<![\d.])(\d{1,2})(?![\d.])", error or "")]
    new = tuple(dict.fromkeys(n for n in found if 2 <= n <= 16 and n not in used))
    return [(new, "a size forward's error named")] if new else []


def _order(guesses: list[Guess]) -> list[int]:
    """The parameters in the order the search changes them: the first float tensor (the
    input, whose shape the others follow) last, so that a weight [K, D] that does not
    broadcast against x [N, D] becomes [D], rather than x becoming [K, D]."""
    first = next((i for i, g in enumerate(guesses)
                  if g.kind == "tensor" and g.dtype.startswith("float")), None)
    return [i for i in range(len(guesses)) if i != first] + ([first] if first is not None else [])


def _pairs(info: Target, guesses: list[Guess], best: Attempt, started: float,
           calls: int) -> tuple[list[Guess], Attempt] | None:
    """A change of two arguments at once that gets further, or None."""
    import itertools

    options = [list(itertools.islice(alternatives(g, guesses), 5)) for g in guesses]
    for i, j in itertools.combinations(range(len(guesses)), 2):
        for a, b in itertools.product(options[i], options[j]):
            if calls >= MAX_CALLS or time.monotonic() - started > MAX_SECONDS:
                return None
            candidate = [a if k == i else b if k == j else g for k, g in enumerate(guesses)]
            attempt = evaluate(info, candidate)
            calls += 1
            if attempt.ok or attempt.progress > best.progress:
                return candidate, attempt
    return None
