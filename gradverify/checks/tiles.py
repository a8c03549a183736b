"""tiles: a target that launches tiled Triton kernels, at the sizes around each tile.

Kernel bugs sit where a row stops filling whole tiles: a mask wrong on the last partial block,
a loop that stops one block early, a reduction over the rows that keeps one. A spec's sizes
rarely land there. For each tile size the target's launches declare (``BLOCK=128`` keywords,
autotune configs: ``targets.triton_launches``), this check reruns the spec's first case with
one named dim set to 1, BLOCK - 1, BLOCK, BLOCK + 1 and 2 * BLOCK + 1 wherever the case uses
it: the option ``dim``, else the dim the last axis of its first differentiable input names. A
named dim is how a spec says which sizes are one, so every input stays consistent; a literal
size is never varied (x's 32 may be twice another input's 16). Each run is judged as the case
is: by the error-baseline rule against the spec's ``reference:`` in a low precision, else by
gradcheck at the case's tolerances (a float32-inside kernel's, ``_computes``). A failure names
the sizes that show it (GV381); raising at a size where the case runs is GV382.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from gradverify.case.binding import bind
from gradverify.case.inputs import InputMaker
from gradverify.checks import _baseline as rule
from gradverify.checks.base import Check, CheckOption, Outcome, Trait
from gradverify.codes import Code
from gradverify.errors import SpecError
from gradverify.results import Finding, Severity
from gradverify.specmodel import TensorArg
from gradverify.targets import triton_launches as _triton
from gradverify.targets.model import Capability

if TYPE_CHECKING:
    from gradverify.case.context import CheckContext
    from gradverify.case.inputs import Args
    from gradverify.specmodel import Case

CODES = (
    Code("GV381", "tile-boundary-mismatch",
         "At a size around one of the kernel's tiles (1, BLOCK - 1, BLOCK, BLOCK + 1, "
         "2 * BLOCK + 1), an output or gradient is wrong where the spec's own sizes are right.",
         "Tiled kernels break where a row stops filling whole tiles: the last partial block's "
         "mask, a loop bound, a reduction across rows. Real shapes land there.",
         "cols = tl.arange(0, BLOCK)\nx = tl.load(X + cols)   # no mask: reads past the row",
         "Mask every load and store of the last block (cols < N), loop over cdiv(N, BLOCK) "
         "blocks, reduce over every row."),
    Code("GV382", "tile-boundary-raised",
         "At a size around one of the kernel's tiles, forward or backward raises where the "
         "spec's own case runs.",
         "Real shapes of that size crash.", "",
         "Handle sizes that are not multiples of the tile, and rows shorter than one tile."),
)


class TilesCheck(Check):
    name = "tiles"
    made_for = Capability.TRITON
    """A row only for targets that launch Triton kernels."""
    summary = "a tiled Triton kernel is right at the sizes around each tile"
    codes = CODES
    traits = frozenset({Trait.CALLS_BACKWARD, Trait.DIFFERENTIATES, Trait.COMPARES_RUNS})
    options = (CheckOption("max_size", int, "largest size tried (default 4096)"),
               CheckOption("dim", str, "the named dim to vary (default: the one the last axis "
                                       "of the first differentiable input names)"))

    def run(self, ctx: CheckContext) -> Outcome:
        if ctx.spec.cases and ctx.case.name != ctx.spec.cases[0].name:
            return Outcome.skip("runs on the spec's first case only")
        tiles = _triton.tile_sizes(ctx.info.function)
        if not tiles:
            return Outcome.skip(f"no launch of {', '.join(_triton.launches(ctx.info.function))} "
                                "gives a BLOCK or TILE size (a keyword at the launch, an "
                                "autotune config)")
        dim = ctx.options.get("dim") or _varied(ctx.case)
        if not isinstance(dim, str) or dim not in ctx.case.dims:
            return Outcome.skip(
                f"no named dim to vary: {_why_not(ctx.case, dim)}; name it in `dims:` "
                "(`shape: [R, N]`), or choose one with `checks: {tiles: {dim: N}}`")
        limit = int(ctx.options.get("max_size") or 4096)
        sizes = sorted({n for blocks in tiles.values() for block in blocks
                        for n in _triton.boundary_sizes(block) if n <= limit})
        outcome = Outcome(data={"tiles": {k: list(v) for k, v in tiles.items()},
                                "sizes": sizes})
        found = [f for f in (_at(ctx, dim, size) for size in sizes) if f is not None]
        for code in ("GV381", "GV382"):
            for finding in _merged([f for f in found if f.code == code], dim):
                outcome.add(finding)
        named = ", ".join(f"{k} {'/'.join(map(str, v))}" for k, v in tiles.items())
        outcome.summary = (f"{len(sizes)} sizes around the tiles ({named}) of {dim} "
                           f"judged like the case" if not found else
                           f"wrong at {dim} = "
                           + ", ".join(str(f.data["size"]) for f in found))
        return outcome


def _merged(found: list[Finding], dim: str) -> list[Finding]:
    """One finding per code: the first size's, naming every size that shows it."""
    if not found:
        return []
    first = found[0]
    sizes = [f.data["size"] for f in found]
    more = (f" (also wrong at {dim} = {', '.join(map(str, sizes[1:]))})"
            if len(sizes) > 1 else "")
    return [dataclasses.replace(first, message=first.message + more,
                                data={**first.data, "sizes": sizes})]


def _why_not(case: Case, dim: int | str | None) -> str:
    if case.factory:
        return "a factory case's sizes are the factory's"
    if dim is None:
        return "no differentiable tensor input is given by shape"
    if isinstance(dim, int):
        return f"the last axis of the first differentiable input is the literal size {dim}"
    return f"the case has no dim {dim!r}"


def _varied(case: Case) -> int | str | None:
    """The last axis of the case's first differentiable tensor input: a dim name or a literal
    size; None when there is none (a factory case)."""
    for _, arg in case.args:
        if isinstance(arg, TensorArg) and arg.shape and arg.differentiable:
            return arg.shape[-1]
    return None


def _resized(case: Case, dim: str, size: int) -> Case:
    """The case with the named dim ``dim`` set to ``size`` wherever it is used."""
    return dataclasses.replace(case, name=f"{case.name}[{dim}={size}]",
                               dims={**case.dims, dim: size})


def _at(ctx: CheckContext, dim: str, size: int) -> Finding | None:
    """The case at one size, judged; a finding naming the size, or None."""
    from gradverify.checks import _calls as calls
    case = _resized(ctx.case, dim, size)
    try:
        bound = bind(case, ctx.info, ctx.spec)
    except SpecError:  # the spec cannot take this size (an index range tied to the dim)
        return None
    maker = InputMaker(case, bound, ctx.info, ctx.maker.seed, ctx.device)
    where = f"{dim} = {size}"
    try:
        problem = _judged(ctx, maker)
    except Exception as exc:  # noqa: BLE001 -- user code
        return Finding("GV382", Severity.ERROR,
                       f"at {where}, the target raised {calls.describe_exception(exc)}",
                       location=calls.user_location(exc, ctx.info) or ctx.forward_location,
                       hint="handle sizes that are not a multiple of the tile and rows "
                            "shorter than one tile (mask the last block)",
                       data={"size": size})
    if problem is None:
        return None
    text, name, output = problem
    return Finding("GV381", Severity.ERROR, f"at {where}, {text}", input=name, output=output,
                   location=ctx.forward_location if output is not None else ctx.location,
                   hint="the last partial tile is mishandled: mask its loads and stores "
                        "(cols < N), loop over every block, reduce over every row",
                   data={"size": size})


def _judged(ctx: CheckContext, maker: Any) -> tuple[str, str | None, int | None] | None:
    """What is wrong with the run at this size: (what, input, output), or None."""
    low = rule.low_dtype(ctx)
    if low is not None and ctx.reference is not None:
        k = float(ctx.options.get("k") or rule.K)
        try:
            found = rule.one_seed(ctx, maker.args("working"), low, 0, k)
        except rule.BaselineUnavailable:
            found = None
        if found is not None:
            for fig, output, name in found:
                if fig.broken:
                    return (f"{fig.subject} breaks the error-baseline rule against "
                            f"{ctx.spec.reference}: {fig.describe()}", name, output)
            return None
    return _gradcheck(ctx, maker.args("double"))


def _gradcheck(ctx: CheckContext, args: Args) -> tuple[str, str | None, int | None] | None:
    import torch
    from torch.autograd.gradcheck import GradcheckError

    from gradverify.checks import _calls as calls

    diff = args.diff_positions
    if not diff:
        return None
    probe = calls.apply(ctx.info, args.clone())
    wanted = list(probe.differentiable)
    if not wanted:
        return None
    fn = calls.tensor_function(ctx.info, args, diff, wanted)
    tol = ctx.tolerance
    try:
        torch.autograd.gradcheck(fn, tuple(args.values[i] for i in diff), atol=tol.atol,
                                 rtol=tol.rtol, eps=tol.eps, fast_mode=True,
                                 raise_exception=True)
    except GradcheckError as exc:
        first = str(exc).strip().splitlines()[0].rstrip(" ,")
        return f"gradcheck fails (fast mode): {first}", None, None
    return None


CHECK = TilesCheck()
