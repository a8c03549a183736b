"""Comparing gradients and whole runs: closeness, the largest difference and where, per-dtype
tolerances against float64, and the first mismatch between two runs (ours against a reference,
a low-precision run against float64, one device against another). Imported only from inside a
check's ``run`` (it imports torch)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from gradverify.checks._tensors import dense, unravel
from gradverify.results import Finding, Location, Severity


def grads_close(a: torch.Tensor | None, b: torch.Tensor | None, *, atol: float = 1e-10,
                rtol: float = 1e-7) -> bool:
    if a is None or b is None:
        return a is None and b is None
    a, b = dense(a), dense(b)
    if a.shape != b.shape:
        try:
            a = a.sum_to_size(b.shape)
        except RuntimeError:
            return False
    return bool(torch.allclose(a.to(b.dtype), b, atol=atol, rtol=rtol, equal_nan=True))


def max_difference(a: torch.Tensor, b: torch.Tensor) -> tuple[float, tuple[int, ...]]:
    wide = torch.complex128 if a.is_complex() or b.is_complex() else torch.float64
    diff = (dense(a).to(wide) - dense(b).to(wide)).abs()
    diff = torch.nan_to_num(diff, nan=float("inf"))
    if not diff.numel():
        return 0.0, ()
    flat = int(torch.argmax(diff))
    return float(diff.reshape(-1)[flat]), unravel(flat, tuple(diff.shape))


DTYPE_TOLERANCE: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-9),
    torch.complex128: (1e-7, 1e-9),
    torch.float32: (1e-4, 1e-5),
    torch.complex64: (1e-4, 1e-5),
    torch.float16: (1e-2, 1e-3),
    torch.bfloat16: (5e-2, 1e-2),
}
"""(rtol, atol) per working dtype when comparing against float64: an element is off when
|working - float64| > atol * max(1, max|float64|) + rtol * |float64|. About 800 ulp for
float32, 10 for float16 and 6 for bfloat16: beyond round-off, short of a wrong formula."""


def tolerance_for(dtype: torch.dtype) -> tuple[float, float]:
    return DTYPE_TOLERANCE.get(dtype, DTYPE_TOLERANCE[torch.float32])


PRECISION_LIMITS: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1e-4, 1e-2),
    torch.complex64: (1e-4, 1e-2),
    torch.float16: (1e-2, 1e-1),
    torch.bfloat16: (4e-2, 2e-1),
}
"""(warn, fail) per working dtype: the relative error of a whole tensor against float64 on the
same (rounded) inputs, ||working - float64|| / ||float64||. Correct formulas stay within a few
hundred ulps of their dtype (float32 ~1e-7 each): beyond ``warn`` (about 800 ulps for float32,
10 for float16, 5 for bfloat16) the formula loses precision; beyond ``fail`` (1% in float32,
10% in float16, 20% in bfloat16) fewer than two correct digits remain, which no correct formula
of a well-posed computation produces."""


def precision_limits(dtype: torch.dtype) -> tuple[float, float]:
    return PRECISION_LIMITS.get(dtype, PRECISION_LIMITS[torch.float32])


def relative_error(got: torch.Tensor, want: torch.Tensor) -> dict[str, Any] | None:
    """How far ``got`` (a working-dtype result) is from ``want`` (float64), measured against the
    tensor's own scale: ||got - want|| / ||want|| (Frobenius norms; against 1 when ``want`` is
    all zeros), plus the worst element. None when both are equal or ``want`` is not floating.
    Non-finite values where float64 is finite are reported as such (``reason: non-finite``)."""
    wide = torch.complex128 if want.is_complex() or got.is_complex() else torch.float64
    got64, want64 = dense(got).to(wide).cpu(), dense(want).to(wide).cpu()
    if got64.shape != want64.shape:
        return {"reason": f"shape {list(got64.shape)} instead of {list(want64.shape)}"}
    finite = torch.isfinite(want64)
    broken = finite & ~torch.isfinite(got64)
    if broken.any():
        flat = int(broken.reshape(-1).nonzero()[0])
        return {"reason": "non-finite", "index": list(unravel(flat, tuple(got64.shape))),
                "value": str(got64.reshape(-1)[flat].item()),
                "reference": float(want64.abs().reshape(-1)[flat]), "count": int(broken.sum())}
    diff = torch.where(finite, got64 - want64, torch.zeros_like(got64))
    if not diff.numel() or not bool(diff.ne(0).any()):
        return None
    norm = float(torch.linalg.vector_norm(torch.where(finite, want64, torch.zeros_like(want64))))
    relative = float(torch.linalg.vector_norm(diff)) / (norm if norm > 0 else 1.0)
    flat = int(torch.argmax(diff.abs()))
    worst_got, worst_want = got64.reshape(-1)[flat], want64.reshape(-1)[flat]
    return {"reason": "error", "relative_error": relative, "scale": norm,
            "index": list(unravel(flat, tuple(got64.shape))),
            "max_abs_error": float(diff.abs().reshape(-1)[flat]),
            "element_relative_error": float((worst_got - worst_want).abs()
                                            / worst_want.abs()) if worst_want != 0 else None,
            "value": _plain(worst_got), "reference_value": _plain(worst_want),
            "entries": diff.numel()}


def _plain(value: torch.Tensor) -> Any:
    return float(value.real) if not value.is_complex() else str(value.item())


def compare(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float
            ) -> dict[str, Any] | None:
    """None when ``got`` matches ``want`` (float64) within tolerance, else the numbers."""
    got64 = got.detach().to(want.dtype if want.is_complex() else torch.float64).cpu()
    want64 = want.detach().to(got64.dtype).cpu()
    if got64.shape != want64.shape:
        return {"reason": f"shape {list(got64.shape)} instead of {list(want64.shape)}"}
    finite_want = torch.isfinite(want64)
    bad_finite = finite_want & ~torch.isfinite(got64)
    if bad_finite.any():
        index = unravel(int(bad_finite.reshape(-1).nonzero()[0]), tuple(got64.shape))
        return {"reason": "non-finite", "index": list(index),
                "value": str(got64.reshape(-1)[int(bad_finite.reshape(-1).nonzero()[0])].item()),
                "reference": float(want64.abs().reshape(-1)[
                    int(bad_finite.reshape(-1).nonzero()[0])]),
                "count": int(bad_finite.sum())}
    scale = float(want64[finite_want].abs().max()) if finite_want.any() else 1.0
    err = (got64 - want64).abs()
    err = torch.where(finite_want, err, torch.zeros_like(err))
    allowed = atol * max(1.0, scale) + rtol * want64.abs()
    allowed = torch.where(finite_want, allowed, torch.full_like(allowed, float("inf")))
    bad = err > allowed
    if not bad.any():
        return None
    flat = int(torch.argmax(torch.where(bad, err, torch.zeros_like(err))))
    return {"reason": "error", "index": list(unravel(flat, tuple(got64.shape))),
            "max_abs_error": float(err.reshape(-1)[flat]),
            "relative_to_scale": float(err.reshape(-1)[flat]) / max(scale, 1e-300),
            "scale": scale,
            "value": complex(got64.reshape(-1)[flat]).real if not got64.is_complex()
            else str(got64.reshape(-1)[flat].item()),
            "reference_value": complex(want64.reshape(-1)[flat]).real
            if not want64.is_complex() else str(want64.reshape(-1)[flat].item()),
            "count": int(bad.sum()), "entries": bad.numel()}


@dataclass
class Mismatch:
    what: str
    """``output 0`` or ``gradient for 'x'``."""
    input: str | None
    output: int | None
    data: dict[str, Any]

    @property
    def non_finite(self) -> bool:
        return self.data.get("reason") == "non-finite"

    def describe(self) -> str:
        d = self.data
        if self.non_finite:
            return (f"{self.what} has {d['count']} non-finite value(s) where float64 is finite "
                    f"(first at {d['index']}: {d['value']}, float64 magnitude "
                    f"{d['reference']:.3g})")
        if d.get("reason") != "error":
            return f"{self.what}: {d['reason']}"
        if "run_scale" in d:
            return (f"{self.what} is off by {_percent(d['relative_error'])} of the run's "
                    f"largest gradient (float64 gives it as zero, {d['scale']:.1g}); worst at "
                    f"{d['index']}: "
                    f"{_num(d['value'])} vs {_num(d['reference_value'])}")
        if "relative_error" in d:
            element = (f", {d['element_relative_error']:.0%} off"
                       if d.get("element_relative_error") is not None else "")
            return (f"{self.what} is off by {_percent(d['relative_error'])} of its float64 "
                    f"value (relative norm); worst at {d['index']}: {_num(d['value'])} vs "
                    f"{_num(d['reference_value'])}{element}")
        share = (f"{d['relative_to_scale']:.2g} of its largest value" if d["scale"] > 0
                 else "the expected value is 0 there")
        return (f"{self.what} is off by {d['max_abs_error']:.3g} at {d['index']} "
                f"({share}; {d['count']} of {d['entries']} elements): {_num(d['value'])} vs "
                f"{_num(d['reference_value'])}")


def _percent(value: float) -> str:
    return f"{value:.2%}" if value >= 1e-3 else f"{value:.2g}"


def _num(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def compare_runs(ours: tuple[list[Any], list[Any]], reference: tuple[list[Any], list[Any]],
                 names: Sequence[str], rtol: float, atol: float) -> list[Mismatch]:
    """Outputs and gradients of a run against a float64 run, element by element."""
    return _pairs(ours, reference, names, lambda a, b: compare(a, b, rtol, atol))


def against_eager(got: tuple[list[Any], list[Any]], eager: tuple[list[Any], list[Any]],
                  names: Sequence[str], code: str, under: str, location: Location | None,
                  hint: str) -> list[Finding]:
    """An error ``code`` for each output and gradient of a run under a composition (``under``:
    "under checkpoint") that differs from eager on the same inputs and incoming gradients, at
    float64's tolerance for two runs of the same computation."""
    return [Finding(code, Severity.ERROR,
                    f"{under}, {mismatch.describe()} (against eager on the same inputs and "
                    "incoming gradients)", input=mismatch.input, location=location,
                    data=dict(mismatch.data), hint=hint)
            for mismatch in compare_runs(got, eager, names, 1e-7, 1e-9)]


def measure_runs(ours: tuple[list[Any], list[Any]], reference: tuple[list[Any], list[Any]],
                 names: Sequence[str]) -> list[Mismatch]:
    """Every output and gradient of a working-dtype run whose values differ from the float64
    run, with its relative error (``relative_error``); the caller judges the numbers."""
    return _pairs(ours, reference, names, relative_error)


def _pairs(ours: tuple[list[Any], list[Any]], reference: tuple[list[Any], list[Any]],
           names: Sequence[str], judge: Any) -> list[Mismatch]:
    found = []
    for j, (a, b) in enumerate(zip(ours[0], reference[0])):
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and \
                (b.is_floating_point() or b.is_complex()):
            data = judge(a, b)
            if data:
                found.append(Mismatch(f"output {j}", None, j, data))
    for name, a, b in zip(names, ours[1], reference[1]):
        if a is None or b is None:
            if (a is None) != (b is None) and dense(a if a is not None else b).abs().max() > 0:
                found.append(Mismatch(f"gradient for {name!r}", name, None,
                                      {"reason": "missing on one side"}))
            continue
        data = judge(a, b)
        if data:
            found.append(Mismatch(f"gradient for {name!r}", name, None, data))
    return found
