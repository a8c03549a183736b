"""What a passing gradcheck proved: whether the case's inputs exercise each input's gradient at
all (a Jacobian that is zero everywhere compares zeros with zeros: every ray misses, every value
is clamped, the mask selects nothing), and whether an input holds one constant value (a weight of
ones hides a backward that forgets to multiply by it). Measured per case by ``gradcheck``; said
once per spec, over every case, by its ``across_cases``."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gradverify.codes import Code
from gradverify.results import CheckResult, Finding, Location, Severity

if TYPE_CHECKING:
    import torch

    from gradverify.case.inputs import Args

CODES = (
    Code("GV129", "gradient-never-exercised",
         "An input's gradient was zero everywhere, analytical and numerical alike, on every "
         "case of the spec: gradcheck compared zeros with zeros for it.",
         "Such a PASS proves nothing about that input's gradient: a sign bug or a missing "
         "factor in its formula passes unseen. It usually means the inputs miss what the "
         "Function computes (every ray misses the sphere, every value is clamped, the mask "
         "selects nothing).",
         "cases:\n  - args:\n      x: {shape: [6], init: uniform, low: 1, high: 2}   "
         "# clamp(x, -0.01, 0.01): all clamped",
         "Choose inputs the output depends on (rays that hit, values inside the clamp range, a "
         "mask that selects some entries); if the gradient is zero by design, declare it with "
         "`zero_grad: [name]` at the top of the spec."),
    Code("GV130", "input-constant",
         "A floating input holds one constant value in every case (all ones, all zeros).",
         "A backward that forgets to multiply by a weight of ones gives the same numbers as a "
         "right one; a constant input also hides a backward that mixes up its entries.",
         "args: {x: {shape: [2, 3]}, w: {shape: [2, 3], init: ones}}",
         "Give the input random values (`init: uniform` with `low: 0.5, high: 1.5`, or "
         "`randn`)."),
)

ZERO_GRADIENT = "zero_gradient"
"""Data key of a gradcheck row: the inputs whose gradient was zero on that case."""
CONSTANT = "constant"
"""Data key of a gradcheck row: input name -> the one value every entry held."""
WHERE = "backward_location"
"""Data key of a gradcheck row: ``file:line`` of backward, where GV129 points."""


def zero_gradients(outputs: Sequence[torch.Tensor], leaves: Sequence[torch.Tensor],
                   names: Sequence[str], generator: torch.Generator) -> list[str]:
    """The inputs whose gradient is exactly zero (or None) for a signed random incoming
    gradient: their whole Jacobian is zero (an output that depends on an entry moves the
    vector-Jacobian product but for a measure-zero choice of the incoming gradient). The graph
    is retained; a backward that raises gives no answer (reported by gradcheck itself)."""
    import torch

    from gradverify.checks._calls import randn_like
    from gradverify.checks._tensors import dense

    grads_out = [randn_like(o, generator) for o in outputs]
    try:
        grads = torch.autograd.grad(outputs, leaves, grads_out, retain_graph=True,
                                    allow_unused=True)
    except Exception:  # noqa: BLE001 -- backward raised: gradcheck says so
        return []
    zero = []
    for name, leaf, grad in zip(names, leaves, grads):
        if leaf.numel() and (grad is None or not bool(dense(grad).ne(0).any())):
            zero.append(name)
    return zero


def constant_inputs(args: Args, exclude: Sequence[str] = ()) -> dict[str, float]:
    """Floating tensor inputs whose entries all hold one value, a value a forgotten factor
    hides behind: several entries alike, or a single 0, 1 or -1. ``exclude``: inputs the spec
    does not set (a module's parameters come from its constructor)."""
    import torch

    from gradverify.checks._tensors import is_strided

    found: dict[str, float] = {}
    for name, value in zip(args.names, args.values):
        if name in exclude or not isinstance(value, torch.Tensor) \
                or not value.is_floating_point() \
                or not is_strided(value) or not value.numel():
            continue
        try:
            flat = value.detach().reshape(-1)
            first = float(flat[0])
            alike = bool((flat == first).all())
        except (NotImplementedError, RuntimeError, TypeError):
            continue  # a frozen subclass without indexing (a quantized weight): no claim
        if alike and (flat.numel() > 1 or first in (0.0, 1.0, -1.0)):
            found[name] = first
    return found


def across_cases(rows: Sequence[CheckResult]) -> list[Finding]:
    """GV129 for an input whose gradient was zero on every case that measured it (gradcheck
    leaves the spec's ``zero_grad`` inputs out of what it records), GV130 for an input
    constant at one value in every case."""
    measured = [r for r in rows if ZERO_GRADIENT in r.data]
    findings = []
    if measured:
        zero = set.intersection(*(set(r.data[ZERO_GRADIENT]) for r in measured))
        where = measured[0].data.get(WHERE)
        location = Location.parse(where) if where else None
        for name in _in_order(measured, ZERO_GRADIENT, zero):
            findings.append(_never_exercised(name, len(measured), location))
    constant = [r.data.get(CONSTANT, {}) for r in measured]
    if constant:
        names = set.intersection(*(set(c) for c in constant))
        for name in _in_order(measured, CONSTANT, names):
            values = {c[name] for c in constant}
            if len(values) == 1:
                findings.append(_held_constant(name, values.pop()))
    return findings


def _in_order(rows: Sequence[CheckResult], key: str, names: set[str]) -> list[str]:
    """``names`` in the order the first row lists them (the inputs' order)."""
    return [n for n in rows[0].data[key] if n in names] if names else []


def _never_exercised(name: str, cases: int, location: Location | None) -> Finding:
    every = f"on all {cases} cases" if cases > 1 else "on the spec's one case"
    return Finding(
        "GV129", Severity.WARNING,
        f"the gradient for {name!r} was never exercised: zero in every entry {every}, "
        "analytical and numerical alike; gradcheck compared zeros with zeros, so nothing about "
        "it was verified: the inputs may not exercise it (every ray misses, every value "
        "clamped, every entry masked)",
        input=name, location=location,
        hint=f"choose inputs the output depends on through {name!r} (rays that hit, values "
             "inside the clamp range, a mask that selects some entries), or, if its gradient "
             f"is zero by design, declare it at the top of the spec: `zero_grad: [{name}]`")


def _held_constant(name: str, value: float) -> Finding:
    what = (f"every entry of {name!r} is {value:g} in every case: "
            + ("a backward that forgets to multiply by it cannot be seen" if value == 1.0 else
               "a wrong factor or term involving it cannot be seen"
               if value == 0.0 else
               "a backward that mixes up its entries or drops it cannot be told apart"))
    return Finding("GV130", Severity.INFO, what, input=name,
                   hint=f"give {name!r} random values (init: uniform, low: 0.5, high: 1.5)")


def row_data(zero: list[str], constant: dict[str, float], location: Location | None
             ) -> dict[str, Any]:
    """What a gradcheck row records for ``across_cases``."""
    return {ZERO_GRADIENT: zero, CONSTANT: constant,
            **({WHERE: str(location)} if location else {})}
