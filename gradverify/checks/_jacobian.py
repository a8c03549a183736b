"""Jacobians and what is wrong with them: numerical columns and analytical rows of a sampled
block, the diagnosis of a mismatch (recognised patterns, kinks, the worst element, the evidence),
and the guard that stops torch's fast-mode gradcheck from building a full Jacobian just to word
its message. Imported only from inside a check's ``run`` (it imports torch)."""
from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import torch

from gradverify.checks._tensors import unravel
from gradverify.results import EVIDENCE_CAP, JacobianBlock


@dataclass
class Block:
    """The mismatch of one (output, input) block of a Jacobian."""

    output: int
    input: int
    analytical: torch.Tensor
    """[rows, cols] sampled entries; rows index the output, cols the input (flattened)."""
    numerical: torch.Tensor
    rows: torch.Tensor
    cols: torch.Tensor
    out_shape: tuple[int, ...]
    in_shape: tuple[int, ...]
    kink: torch.Tensor
    """[rows, cols] True where left and right differences disagree."""
    bad: torch.Tensor
    full: bool
    """All rows and columns were computed (no sampling)."""
    projected: bool = False
    """The single row is a random projection of the output, not one of its elements."""
    pattern: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def only_kinks(self) -> bool:
        return bool(self.bad.any()) and bool((self.bad <= self.kink).all())

    @property
    def undefined_nearby(self) -> bool:
        """Every mismatch is where the finite differences are not finite: forward is NaN or
        inf within eps of the inputs (the edge of its domain), not a wrong backward."""
        undefined = (~torch.isfinite(self.numerical)).any(0, keepdim=True)  # by input entry
        return bool(self.bad.any()) and bool((self.bad <= undefined).all())


_HINTS = {
    "zero gradient": "backward returns zeros or None for {name!r} although the output depends on "
                     "it: check the order of the returned tuple and the needs_input_grad index",
    "sign flipped": "a sign error in the formula for {name!r}",
    "off by a constant factor": "a missing or extra constant in the formula for {name!r} (a 2 from "
                                "d(x**2), a 1/N from a mean, a scale saved on ctx)",
    "not multiplied by the incoming gradient": "multiply by the incoming gradient: return "
                                               "grad_output * (local derivative) for {name!r}",
    "not linear in the incoming gradient": "backward must return grad_output times the local "
                                           "derivative for {name!r}, with no clamp, mask, sign or "
                                           "power applied to grad_output itself",
    "transposed": "a transpose is missing or extra in the gradient of {name!r} (square shapes "
                  "made it fit; use distinct sizes)",
    "only rows": "an indexing or boundary error: only some rows of {name!r} get a wrong gradient",
}


def pattern_hint(pattern: str | None, name: str) -> str:
    """How to fix a mismatch of a recognised pattern (``recognise``) for input ``name``."""
    for key, hint in _HINTS.items():
        if pattern and pattern.startswith(key):
            return hint.format(name=name)
    return f"compare backward's formula for {name!r} with the math"


def mismatch_message(block: Block, subject: str, wrt: str, out_label: str) -> str:
    """One line for a mismatching block: the pattern, the worst entry, the errors, the share."""
    d = block.data
    if d["worst_output_index"] is None:
        worst = (f"worst at {format_index(wrt, d['worst_input_index'])} for a random projection "
                 f"of {out_label}")
    else:
        worst = (f"worst at {format_index(wrt, d['worst_input_index'])} for "
                 f"{format_index(out_label, d['worst_output_index'])}")
    share = f"{d['bad_entries']} of {d['entries']}{' sampled' if d['sampled'] else ''} entries off"
    pattern = f": {block.pattern}" if block.pattern else ""
    rel = (f", max rel error {d['max_rel_error']:.3g}" if d["max_rel_error"] is not None
           else " (numerical values are 0)")
    non_finite = d.get("non_finite_entries", 0)
    if non_finite:
        share += (f", {non_finite} of them non-finite (NaN or inf in backward's result: often "
                  "0 * inf from the derivative of sqrt, log or pow at 0)")
    return (f"{subject}{pattern}; {worst}: analytical {d['analytical']:.6g}, numerical "
            f"{d['numerical']:.6g}; max abs error {d['max_abs_error']:.3g}{rel}, {share}")


def numerical_columns(fn: Callable[..., tuple[torch.Tensor, ...]], inputs: list[torch.Tensor],
                      i: int, cols: torch.Tensor, rows: list[torch.Tensor], eps: float
                      ) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
    """Central, left and right differences of the selected ``rows`` of every output w.r.t.
    the selected ``cols`` of input i: lists over outputs of [len(rows[j]), len(cols)] tensors."""
    def pick(outs: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
        # compared on the CPU, where the sampled rows and the projections are
        return [_select(o.detach().reshape(-1).to("cpu", torch.float64), r)
                for o, r in zip(outs, rows)]

    with torch.no_grad():
        base = pick(fn(*inputs))
        # contiguous, so that `flat` is a view of x whatever layout the input had; requiring
        # grad as the input does (torch's gradcheck perturbs the input itself): code that
        # registers a hook on its input runs as it does for a user
        x = inputs[i].detach().clone(memory_format=torch.contiguous_format) \
            .requires_grad_(inputs[i].requires_grad)
        flat = x.view(-1)
        central = [torch.zeros(b.numel(), len(cols), dtype=torch.float64) for b in base]
        left = [c.clone() for c in central]
        right = [c.clone() for c in central]
        for c, k in enumerate(cols.tolist()):
            orig = flat[k].item()
            flat[k] = orig + eps
            plus = pick(fn(*[x if n == i else t for n, t in enumerate(inputs)]))
            flat[k] = orig - eps
            minus = pick(fn(*[x if n == i else t for n, t in enumerate(inputs)]))
            flat[k] = orig
            for j, (p, m) in enumerate(zip(plus, minus)):
                central[j][:, c] = (p - m) / (2 * eps)
                left[j][:, c] = (base[j] - m) / eps
                right[j][:, c] = (p - base[j]) / eps
    return central, left, right


def _select(flat: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """Selected entries (integer ``rows``) or one random projection (a float vector)."""
    if rows.is_floating_point():
        return (flat * rows).sum().reshape(1)
    return flat[rows]


def analytical_rows(fn: Callable[..., tuple[torch.Tensor, ...]], inputs: list[torch.Tensor],
                    j: int, rows: torch.Tensor) -> list[torch.Tensor]:
    """Rows of the Jacobian of output j (through backward): a list over inputs of
    [len(rows), numel_in] tensors."""
    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    outs = fn(*leaves)
    out = outs[j]
    projected = rows.is_floating_point()
    n_rows = 1 if projected else len(rows)
    result = [torch.zeros(n_rows, t.numel(), dtype=torch.float64) for t in inputs]
    if not out.requires_grad:
        return result
    for r in range(n_rows):
        if projected:
            g = rows.reshape(out.shape).to(out.device, out.dtype)
        else:  # a one-hot row, contiguous whatever the output's layout (an einsum's, say)
            g = torch.zeros(out.numel(), dtype=out.dtype, device=out.device)
            g[int(rows[r])] = 1
            g = g.reshape(out.shape)
        grads = torch.autograd.grad(out, leaves, g, retain_graph=True, allow_unused=True)
        for i, gi in enumerate(grads):
            if gi is not None:
                result[i][r] = gi.detach().reshape(-1).to("cpu", torch.float64)[
                    : inputs[i].numel()]
    return result


def _sample(n: int, limit: int, generator: torch.Generator) -> torch.Tensor:
    if n <= limit:
        return torch.arange(n)
    return torch.randperm(n, generator=generator)[:limit].sort().values


def diagnose(fn: Callable[..., tuple[torch.Tensor, ...]], inputs: list[torch.Tensor], *,
             atol: float, rtol: float, eps: float, generator: torch.Generator,
             max_rows: int = 256, max_cols: int = 256) -> list[Block]:
    """Compare analytical and numerical Jacobians block by block (sampled when large).
    Returns the blocks that have mismatching entries, each with a recognised pattern."""
    with torch.no_grad():
        outs = [o.detach() for o in fn(*inputs)]
    if any(t.is_complex() for t in [*inputs, *outs]):
        return []  # Wirtinger Jacobians: torch's own gradcheck message is reported instead
    cols = [_sample(t.numel(), max_cols, generator) for t in inputs]
    # Outputs too large for explicit rows are compared through one random projection v:
    # v^T J from backward against v^T (finite differences), per sampled input element.
    rows = [_sample(o.numel(), max_rows, generator) if o.numel() <= max_rows
            else torch.randn(o.numel(), generator=generator, dtype=torch.float64) for o in outs]
    numeric = [numerical_columns(fn, inputs, i, cols[i], rows, eps) for i in range(len(inputs))]
    blocks: list[Block] = []
    for j, out in enumerate(outs):
        if not out.is_floating_point():
            continue
        analytic = analytical_rows(fn, inputs, j, rows[j])
        for i, x in enumerate(inputs):
            central, left, right = (n[j] for n in numeric[i])
            a = analytic[i][:, cols[i]]
            # as torch's allclose: a NaN on either side is a mismatch
            bad = ~((a - central).abs() <= atol + rtol * central.abs())
            if not bad.any():
                continue
            jump = (left - right).abs()
            kink = jump > torch.maximum(torch.full_like(jump, 10 * atol),
                                        0.1 * torch.maximum(left.abs(), right.abs()))
            projected = rows[j].is_floating_point()
            block = Block(j, i, a, central, rows[j], cols[i], tuple(out.shape), tuple(x.shape),
                          kink, bad, projected=projected,
                          full=not projected and len(rows[j]) == out.numel()
                          and len(cols[i]) == x.numel())
            block.pattern = recognise(block, atol, rtol)
            block.data = summarise(block)
            blocks.append(block)
    return blocks


def _close(x: torch.Tensor, y: torch.Tensor, atol: float, rtol: float) -> bool:
    return bool(((x - y).abs() <= atol + rtol * y.abs()).all())


def value_pattern(a: torch.Tensor, n: torch.Tensor, atol: float, rtol: float) -> str | None:
    """How analytical values ``a`` relate to numerical ``n`` when the relation is a familiar
    one: zero, sign flipped, a constant factor. Shared by the Jacobian and jvp diagnoses."""
    if n.abs().max() <= atol:
        return None
    if a.abs().max() <= atol:
        return "zero gradient"
    if _close(a, -n, atol, rtol):
        return "sign flipped"
    denom = float((n * n).sum())
    factor = float((a * n).sum()) / denom if denom else 0.0
    if factor and _close(a, factor * n, atol, rtol):
        return f"off by a constant factor {factor:.4g}"
    return None


def recognise(block: Block, atol: float, rtol: float) -> str | None:
    """Name the shape of a mismatch when it has a familiar one."""
    a, n = block.analytical, block.numerical
    if n.abs().max() <= atol:
        return None
    pattern = value_pattern(a, n, atol, rtol)
    if pattern:
        return pattern
    if block.full and len(block.in_shape) >= 2 and block.in_shape[-1] == block.in_shape[-2]:
        rows = a.reshape(a.shape[0], *block.in_shape).transpose(-1, -2).reshape(a.shape[0], -1)
        if _close(rows, n, atol, rtol):
            return "transposed"
    if block.full and len(block.in_shape) >= 1 and block.in_shape[0] > 1:
        bad_cols = block.bad.any(0)
        first = torch.tensor([unravel(int(c), block.in_shape)[0] for c in block.cols])
        bad_rows = sorted(set(first[bad_cols].tolist()))
        if len(bad_rows) < block.in_shape[0]:
            return f"only rows {_short_list(bad_rows)} of {block.in_shape[0]} wrong"
    return None


def summarise(block: Block) -> dict[str, Any]:
    err = torch.nan_to_num((block.analytical - block.numerical).abs(), nan=math.inf)
    finite = torch.isfinite(err)
    flat = int(torch.argmax(torch.where(block.bad, err, torch.zeros_like(err))))
    r, c = divmod(flat, err.shape[1])
    out_index = None if block.projected else unravel(int(block.rows[r]), block.out_shape)
    in_index = unravel(int(block.cols[c]), block.in_shape)
    significant = block.bad & (block.numerical.abs() > 1e-12)
    rel = err[significant] / block.numerical.abs()[significant]
    return {
        "worst_input_index": list(in_index),
        "worst_output_index": list(out_index) if out_index is not None else None,
        "analytical": float(block.analytical[r, c]),
        "numerical": float(block.numerical[r, c]),
        "max_abs_error": float(err.max()),
        "max_rel_error": float(rel.max()) if rel.numel() else None,
        "bad_entries": int(block.bad.sum()),
        "entries": int(block.bad.numel()),
        "sampled": not block.full,
        "projected": block.projected,
        "non_finite_entries": int((~finite).sum()),
    }


def _short_list(items: list[int], limit: int = 6) -> str:
    shown = ", ".join(map(str, items[:limit]))
    return f"[{shown}{', ...' if len(items) > limit else ''}]"


def evidence(block: Block, name: str, output: str, cap: int = EVIDENCE_CAP) -> JacobianBlock:
    """The block as a finding's evidence: at most ``cap`` rows and columns, those with the
    worst mismatches first (kept in their order), each labelled with its element's index."""
    err = torch.nan_to_num((block.analytical - block.numerical).abs(), nan=math.inf)
    err = torch.where(block.bad, err, torch.zeros_like(err))
    rows, cols = _worst(err.amax(1), cap), _worst(err.amax(0), cap)

    def values(t: torch.Tensor) -> tuple[tuple[float, ...], ...]:
        return tuple(tuple(row) for row in t[rows][:, cols].tolist())

    return JacobianBlock(
        output=output, input=name,
        analytical=values(block.analytical), numerical=values(block.numerical),
        rows=tuple(() if block.projected else unravel(int(block.rows[r]), block.out_shape)
                   for r in rows.tolist()),
        cols=tuple(unravel(int(block.cols[c]), block.in_shape) for c in cols.tolist()),
        projected=block.projected,
        truncated=len(rows) < err.shape[0] or len(cols) < err.shape[1])


def _worst(score: torch.Tensor, cap: int) -> torch.Tensor:
    """The indices of the ``cap`` largest scores (all when there are no more), in order."""
    if len(score) <= cap:
        return torch.arange(len(score))
    order = torch.argsort(score, descending=True, stable=True)
    return order[:cap].sort().values


def format_index(name: str, index: Sequence[int]) -> str:
    return f"{name}[{', '.join(map(str, index))}]" if index else name


@contextlib.contextmanager
def no_slow_rerun() -> Iterator[None]:
    """torch's fast-mode gradcheck re-runs slow mode on failure just to format its message,
    building the full Jacobian (numel_in x numel_out: 64 GB for 300x300 inputs). gradverify
    diagnoses failures itself, so that re-run is replaced by an empty message."""
    module = sys.modules.get("torch.autograd.gradcheck")
    if getattr(module, "_run_slow_mode_and_get_error", None) is None:
        yield
        return
    with mock.patch.object(module, "_run_slow_mode_and_get_error",
                           lambda *args, **kwargs: ""):
        yield


def jacobian_entries(inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor]) -> int:
    return sum(t.numel() for t in inputs) * sum(o.numel() for o in outputs)


def failing_input(fn: Callable[..., Any], inputs: Sequence[torch.Tensor], tol: Any
                  ) -> int | None:
    """The first differentiable input whose own gradcheck (the others held fixed) fails."""
    if len(inputs) == 1:
        return 0
    for k in range(len(inputs)):
        def alone(x: Any, k: int = k) -> Any:
            return fn(*[x if n == k else t.detach() for n, t in enumerate(inputs)])

        try:
            ok = torch.autograd.gradcheck(alone, (inputs[k],), eps=tol.eps, atol=tol.atol,
                                          rtol=tol.rtol, nondet_tol=tol.nondet_tol,
                                          check_undefined_grad=False, raise_exception=False,
                                          fast_mode=inputs[k].numel() > 256)
        except Exception:  # noqa: BLE001 -- a diagnosis only
            continue
        if not ok:
            return k
    return None
