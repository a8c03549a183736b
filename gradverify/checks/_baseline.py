"""The error-baseline rule for a target that computes in a low precision (docs/checks.md,
"The error-baseline rule").

A kernel that computes in float32 (or float16, bfloat16) cannot match float64; how far it may be
is what the same math, done by plain PyTorch in the same dtype, gets wrong. On the same inputs
(rounded to that dtype first, so rounding them is never blamed) and the same incoming
gradients, each output and each input's gradient of the target is compared with the spec's
``reference:`` run in float64 (the truth) and in the low dtype (the baseline):

    max |target - truth|  <=  K * max |baseline - truth|  +  FLOOR_ULPS * eps(dtype) * max |truth|

K is 2 (the ``k`` option). The floor, a few units in the last place of the tensor's largest
value, covers a baseline that happens to round exactly where the target rounds once. An element
past that limit is still a correct algorithm's rounding when it is within ``c`` times the
componentwise condition of the reference's math at that element (``_condition``): a kernel may
use another correct algorithm than its reference. The rule runs on several seeds (``seeds``,
default 3): a tensor that breaks it on at least half of them fails, on fewer it is a warning,
with the share of seeds (the flake rate).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gradverify.case.inputs import Args, InputMaker, case_seed
from gradverify.checks import _condition as conditioning
from gradverify.checks.base import Outcome
from gradverify.results import Finding, Severity
from gradverify.targets import op_calls as opcalls

if TYPE_CHECKING:
    import torch

    from gradverify.case.context import CheckContext
    from gradverify.case.inputs import Args
    from gradverify.checks.base import Outcome
    from gradverify.results import Finding

K = 2.0
FLOOR_ULPS = 4
SEEDS = 3


@dataclass
class Figures:
    """One tensor (an output, or an input's gradient) on one seed."""

    subject: str
    """``output 0`` or ``gradient for 'x'``."""
    error: float
    """max |target - truth|."""
    rms: float
    baseline: float
    """max |baseline - truth|."""
    scale: float
    """max |truth|."""
    eps: float
    """The low dtype's machine epsilon."""
    k: float = K
    condition: float | None = None
    """Past the limit: the worst element's error in units of its componentwise condition
    (``_condition``); None within the limit, or where the reference cannot say."""
    c: float = conditioning.C

    @property
    def limit(self) -> float:
        return self.k * self.baseline + FLOOR_ULPS * self.eps * self.scale

    @property
    def ulps(self) -> float:
        """The error in units of the last place of the tensor's largest value."""
        unit = self.eps * self.scale
        return self.error / unit if unit else (0.0 if self.error == 0 else math.inf)

    @property
    def broken(self) -> bool:
        past = not self.error <= self.limit  # NaN breaks it
        return past and not (self.condition is not None and self.condition <= self.c)

    def describe(self) -> str:
        said = (f"max abs error {self.error:.3g} (RMS {self.rms:.3g}, {self.ulps:.3g} ulp) "
                f"against {self.k:g} x {self.baseline:.3g} (plain PyTorch in the same dtype) "
                f"+ {FLOOR_ULPS} ulp = {self.limit:.3g}")
        if self.condition is not None and not self.error <= self.limit:
            said += (f"; its worst element is off by {self.condition:.3g} x what rounding "
                     f"the inputs alone moves it by (allowed {self.c:g} x)")
        return said


@dataclass
class Tally:
    """Every seed's figures for one tensor."""

    runs: list[Figures] = field(default_factory=list)

    @property
    def broken(self) -> list[Figures]:
        return [f for f in self.runs if f.broken]

    @property
    def worst(self) -> Figures:
        return max(self.runs, key=lambda f: (f.broken, f.error - f.limit))

    @property
    def fails(self) -> bool:
        """Broken on at least half of the seeds."""
        return 2 * len(self.broken) >= len(self.runs)


def figures(subject: str, got: torch.Tensor, truth: torch.Tensor, baseline: torch.Tensor,
            eps: float, k: float = K) -> Figures:
    """The rule's numbers for one tensor; non-finite values where the truth is finite count
    as an infinite error."""
    import torch

    truth = truth.detach().to(torch.float64)
    got = got.detach().to(torch.float64)
    baseline = baseline.detach().to(torch.float64)
    finite = torch.isfinite(truth)
    if not bool(finite.any()):
        return Figures(subject, 0.0, 0.0, 0.0, 0.0, eps, k)
    diff = (got - truth)[finite]
    error = float(diff.abs().max()) if bool(torch.isfinite(diff).all()) else math.inf
    rms = float(diff.pow(2).mean().sqrt()) if math.isfinite(error) else math.inf
    base = (baseline - truth)[finite].abs()
    base_error = float(base[torch.isfinite(base)].max()) if bool(torch.isfinite(base).any()) \
        else 0.0
    return Figures(subject, error, rms, base_error, float(truth[finite].abs().max()), eps, k)


def rounded(value: Any, dtype: torch.dtype) -> Any:
    """A floating tensor's values rounded to ``dtype`` (kept in its own dtype, a fresh leaf
    with the same requires_grad); anything else as it is."""
    import torch

    if not isinstance(value, torch.Tensor) or not value.is_floating_point() \
            or torch.finfo(dtype).eps <= torch.finfo(value.dtype).eps:
        return value  # not narrower: nothing to round
    with torch.no_grad():
        out = value.detach().to(dtype).to(value.dtype)
    return out.requires_grad_(value.requires_grad)


def cast(value: Any, dtype: torch.dtype) -> Any:
    """A floating tensor as ``dtype`` (a fresh leaf, same requires_grad); else as it is."""
    import torch

    if not isinstance(value, torch.Tensor) or not value.is_floating_point():
        return value
    with torch.no_grad():
        out = value.detach().to(dtype)
    return out.requires_grad_(value.requires_grad)


# ----------------------------------------------------------------------------- the check's run


def low_dtype(ctx: CheckContext) -> torch.dtype | None:
    """The dtype the rule judges in: the one the target computes in inside, else the working
    dtype of its first floating input when that is float32, float16 or bfloat16; None in
    float64 (or with no floating input)."""
    import torch

    if ctx.computes_in is not None:
        return getattr(torch, ctx.computes_in)
    floating = [v.dtype for v in ctx.args("working").values
                if isinstance(v, torch.Tensor) and v.is_floating_point()]
    low = (torch.float32, torch.float16, torch.bfloat16)
    return floating[0] if floating and floating[0] in low else None


def judge(ctx: CheckContext, low: torch.dtype) -> Outcome | None:
    """The rule on every seed; None when the reference cannot run in ``low`` (the caller
    then compares within the dtype's tolerance)."""
    seeds = max(1, int(ctx.options.get("seeds") or SEEDS))
    k = float(ctx.options.get("k") or K)
    tallies: dict[str, Tally] = {}
    where: dict[str, tuple[int | None, str | None]] = {}
    for seed in range(seeds):
        try:
            run = one_seed(ctx, _seed_args(ctx, seed), low, seed, k)
        except BaselineUnavailable:
            return None
        for fig, output, name in run:
            tallies.setdefault(fig.subject, Tally()).runs.append(fig)
            where[fig.subject] = (output, name)
    label = str(low).removeprefix("torch.")
    outcome = Outcome(data={"rule": {"dtype": label, "k": k, "floor_ulps": FLOOR_ULPS,
                                     "condition": conditioning.factor(ctx),
                                     "seeds": seeds, "tensors": {
                                         s: _data(t) for s, t in tallies.items()}}})
    for subject, tally in tallies.items():
        if tally.broken:
            output, name = where[subject]
            outcome.add(_finding(ctx, tally, label, output, name))
    worst = max((t.worst.ulps for t in tallies.values()), default=0.0)
    outcome.summary = (
        f"{label}: every output and gradient within {k:g} x plain PyTorch's own {label} error "
        f"of float64 on {seeds} seed(s) (worst {worst:.3g} ulp)" if not outcome.findings else
        f"{label}: " + ", ".join(f.message.split(" breaks")[0] for f in outcome.findings)
        + " off the error-baseline rule")
    return outcome


class BaselineUnavailable(Exception):
    """The reference raised: in the low dtype (an op without a float16 kernel on this
    device), or at all (the fallback reports that, GV333)."""


def _seed_args(ctx: CheckContext, seed: int) -> Args:
    """The case's working-dtype arguments on seed 0; fresh ones, made the same way, on the
    others."""
    if seed == 0:
        return ctx.args("working")
    maker = InputMaker(ctx.case, ctx.maker.bound, ctx.info,
                       case_seed(ctx.seed, f"{ctx.info.target}/reference-seed-{seed}",
                                 ctx.case.name), ctx.device)
    return maker.args("working")


def one_seed(ctx: CheckContext, working: Args, low: torch.dtype, seed: int, k: float
              ) -> list[tuple[Figures, int | None, str | None]]:
    """The figures of every output and input gradient on one seed's arguments."""
    import torch

    from gradverify.checks import _calls as calls

    values = [rounded(v, low) for v in working.values]
    diff = working.diff_positions
    applied = calls.apply(ctx.info, Args(list(working.names), values,
                                         list(working.differentiable)))
    grads = [rounded(g, low) for g in calls.random_grads(
        applied, ctx.generator(f"reference/{seed}"))] if applied.differentiable else None
    ours = calls.outputs_and_gradients(applied, grads, diff)
    try:  # user code: raising in float64, the fallback says so (GV333); in low, no baseline
        truth = reference_run(ctx, [cast(v, torch.float64) for v in values], grads, diff)
        base = reference_run(ctx, [cast(v, low) for v in values], grads, diff)
    except Exception as exc:
        raise BaselineUnavailable from exc
    eps = torch.finfo(low).eps
    condition = conditioning.Condition(ctx, values, grads, diff)
    c = conditioning.factor(ctx)
    found: list[tuple[Figures, int | None, str | None]] = []
    for j, (o, t, b) in enumerate(zip(ours[0], truth[0], base[0])):
        if all(isinstance(x, torch.Tensor) and x.is_floating_point() for x in (o, t, b)) \
                and o.shape == t.shape:
            fig = figures(f"output {j}", o, t, b, eps, k)
            fig.c = c
            if not fig.error <= fig.limit:
                fig.condition = conditioning.worst_ratio(condition, j, True, _errors(o, t),
                                                         fig.limit, eps)
            found.append((fig, j, None))
    for position, (i, o, t, b) in enumerate(zip(diff, ours[1], truth[1], base[1])):
        name = working.names[i]
        if isinstance(t, torch.Tensor) and isinstance(b, torch.Tensor):
            got = o if isinstance(o, torch.Tensor) else torch.zeros_like(t)
            fig = figures(f"gradient for {name!r}", got, t, b, eps, k)
            fig.c = c
            if not fig.error <= fig.limit and got.shape == t.shape:
                fig.condition = conditioning.worst_ratio(condition, position, False,
                                                         _errors(got, t), fig.limit, eps)
            found.append((fig, None, name))
    return found


def _errors(got: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """|got - truth| per element, flat, in float64: infinite where the truth is finite and
    ``got`` is not, zero where the truth itself is not finite (the rule judges nothing
    there)."""
    import torch

    truth = truth.detach().to(torch.float64).reshape(-1)
    diff = (got.detach().to(torch.float64).reshape(-1) - truth).abs()
    diff = torch.where(torch.isfinite(diff), diff, torch.full_like(diff, float("inf")))
    return torch.where(torch.isfinite(truth), diff, torch.zeros_like(diff))


def reference_run(ctx: CheckContext, values: list[Any], grads: list[Any] | None,
                  diff: list[int]) -> tuple[list[Any], list[Any]]:
    """The spec's reference called on ``values`` (forward's arguments, lists gathered back;
    leaves at ``diff``): its outputs, flat as the target's are compared, and autograd's
    gradients of the leaves at ``diff`` for the incoming gradients ``grads``."""
    import torch


    out = opcalls.flat_outputs(ctx.reference(*opcalls.op_values(ctx.info, values)))
    outs = list(out) if isinstance(out, tuple) else [out]
    pairs = [(o, g) for o, g in zip(outs, grads or []) if isinstance(o, torch.Tensor)
             and o.requires_grad and isinstance(g, torch.Tensor)]
    gradients = list(torch.autograd.grad([o for o, _ in pairs], [values[i] for i in diff],
                                         [g.to(o.dtype) for o, g in pairs], allow_unused=True)
                     ) if pairs else [None] * len(diff)
    return [o.detach() if isinstance(o, torch.Tensor) else o for o in outs], gradients


def _data(tally: Tally) -> dict[str, float | None]:
    worst = tally.worst
    conditions = [f.condition for f in tally.runs if f.condition is not None]
    return {"max_abs": worst.error, "rms": worst.rms, "ulp": worst.ulps,
            "baseline_max_abs": worst.baseline, "limit": worst.limit,
            "past_limit_rate": sum(not f.error <= f.limit for f in tally.runs)
            / len(tally.runs),
            "condition": max(conditions) if conditions else None, "condition_limit": worst.c,
            "flake_rate": len(tally.broken) / len(tally.runs)}


def _finding(ctx: CheckContext, tally: Tally, label: str, output: int | None,
             name: str | None) -> Finding:
    worst = tally.worst
    broken, runs = len(tally.broken), len(tally.runs)
    seeds = f"on {broken} of {runs} seed(s)"
    return Finding(
        "GV331" if output is not None else "GV332",
        Severity.ERROR if tally.fails else Severity.WARNING,
        f"{worst.subject} breaks the error-baseline rule against {ctx.spec.reference} in "
        f"{label}: {worst.describe()}, {seeds}"
        + ("" if tally.fails else " (flaky: fewer than half of the seeds)"),
        input=name, output=output,
        location=ctx.forward_location if output is not None else ctx.location,
        hint=("the kernel computes something else than the reference"
              + ("" if output is not None else "; its backward formula for this input is "
                 "wrong") + " (a mask on the last partial block, a loop bound, a reduction "
              "over rows, a missing factor)" if tally.fails else
              "an error past plain PyTorch's own on some inputs only: an unstable step "
              "(a sum in low precision, a cancellation); raise `k` or `seeds` under "
              "`checks: {reference: ...}` once it is understood"),
        data=_data(tally))
