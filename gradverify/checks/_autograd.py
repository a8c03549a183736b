"""Shared mechanics for the checks: applying a Function, raw backward calls, Jacobian diagnosis.

Imported only from inside ``run`` (it imports torch).
"""
from __future__ import annotations

import contextlib
import math
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from gradverify.checks._tensors import dense, is_inexact
from gradverify.inputs import Args
from gradverify.target import FunctionInfo

# ----------------------------------------------------------------------------- applying


@dataclass
class Applied:
    """One call of ``Function.apply`` and what came out."""

    args: Args
    """The arguments passed (leaf tensors; the Function may have seen clones of them)."""
    outputs: list[Any]
    single: bool
    """forward returned one value rather than a tuple."""

    @property
    def tensors(self) -> list[tuple[int, torch.Tensor]]:
        return [(j, o) for j, o in enumerate(self.outputs) if isinstance(o, torch.Tensor)]

    @property
    def differentiable(self) -> list[int]:
        """Indices of outputs that carry gradients (floating, requiring grad)."""
        return [j for j, o in self.tensors if o.requires_grad]

    @property
    def ctx(self) -> Any:
        """The Function's ctx: the ``grad_fn`` of its differentiable outputs."""
        for j in self.differentiable:
            fn = self.outputs[j].grad_fn
            if fn is not None:
                return fn
        return None


def apply(info: FunctionInfo, args: Args, *, protect_inputs: bool = True) -> Applied:
    """Call ``info.cls.apply``. With ``protect_inputs``, a Function that uses ``mark_dirty``
    sees clones, so the caller's leaves stay intact (DESIGN §3)."""
    values = list(args.values)
    if protect_inputs and info.uses_mark_dirty:
        values = [v.clone() if isinstance(v, torch.Tensor) else v for v in values]
    out = info.cls.apply(*values)
    if isinstance(out, tuple):
        return Applied(args, list(out), single=False)
    return Applied(args, [out], single=True)


def differentiable_call(ctx: Any) -> Applied | str:
    """Apply on fresh float64 arguments (differentiable inputs requiring grad); or, when there
    is nothing to differentiate, the reason to skip."""
    args = ctx.args("double")
    if not args.diff_positions:
        return "no input requires grad"
    applied = apply(ctx.info, args)
    if not applied.differentiable or applied.ctx is None:
        floating = [j for j, o in applied.tensors if is_inexact(o)]
        if floating:
            return (f"no output is differentiable, although output {floating[0]} is a floating "
                    "tensor (every output marked non-differentiable, or grad mode off)")
        return "no output is differentiable (every output is an integer tensor or not a tensor)"
    return applied


def random_grads(applied: Applied, generator: torch.Generator, *,
                 requires_grad: bool = False) -> list[torch.Tensor | None]:
    """What the engine passes backward: a gradient per output (random for differentiable
    outputs, zeros for non-differentiable tensor outputs, None for non-tensor outputs)."""
    grads: list[torch.Tensor | None] = []
    diff = set(applied.differentiable)
    for j, out in enumerate(applied.outputs):
        if not isinstance(out, torch.Tensor):
            grads.append(None)
        elif j in diff:
            g = randn_like(out, generator)
            grads.append(g.requires_grad_(requires_grad))
        else:
            grads.append(torch.zeros_like(out))
    return grads


def randn_like(t: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    g = torch.randn(t.shape, generator=generator, dtype=torch.float64)
    if t.is_complex():
        g = torch.complex(g, torch.randn(t.shape, generator=generator, dtype=torch.float64))
    return g.to(dtype=t.dtype, device=t.device)


def raw_backward(info: FunctionInfo, applied: Applied, grads: Sequence[Any]) -> tuple[Any, ...]:
    """backward's own return value, before the engine validates, casts or sums it.
    Grad mode is off, as the engine runs backward without create_graph."""
    with torch.no_grad():
        result = info.cls.backward(applied.ctx, *grads)
    return result if isinstance(result, tuple) else (result,)


def engine_grads(applied: Applied, grads: Sequence[Any], positions: Sequence[int], *,
                 create_graph: bool = False) -> list[torch.Tensor | None]:
    """Gradients for the inputs at ``positions`` through the real autograd engine."""
    outs = [applied.outputs[j] for j in applied.differentiable]
    gs = [grads[j] for j in applied.differentiable]
    inputs = [applied.args.values[i] for i in positions]
    return list(torch.autograd.grad(outs, inputs, gs, retain_graph=True, allow_unused=True,
                                    create_graph=create_graph))


def user_location(exc: BaseException, info: FunctionInfo) -> str | None:
    """``file:line`` of the innermost traceback frame in the Function's own source file."""
    frames = traceback.extract_tb(exc.__traceback__)
    if info.source_file:
        mine = [f for f in frames if f.filename == info.source_file]
        if mine:
            from gradverify.target import _short

            return f"{_short(mine[-1].filename)}:{mine[-1].lineno}"
    return None


def describe_exception(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def tensor_function(info: FunctionInfo, args: Args, positions: Sequence[int],
                    outputs: Sequence[int]) -> Callable[..., tuple[torch.Tensor, ...]]:
    """A function of the tensors at ``positions`` (the rest held fixed) returning the outputs
    at ``outputs``; inputs are always cloned, so a mutating forward cannot corrupt them."""
    base = list(args.values)

    def fn(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        values = list(base)
        for pos, t in zip(positions, tensors):
            values[pos] = t
        values = [v.clone() if isinstance(v, torch.Tensor) else v for v in values]
        out = info.cls.apply(*values)
        out = out if isinstance(out, tuple) else (out,)
        return tuple(out[j] for j in outputs)

    return fn


# ----------------------------------------------------------------------------- Jacobians


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


def numerical_columns(fn: Callable[..., tuple[torch.Tensor, ...]], inputs: list[torch.Tensor],
                      i: int, cols: torch.Tensor, rows: list[torch.Tensor], eps: float
                      ) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
    """Central, left and right differences of the selected ``rows`` of every output w.r.t.
    the selected ``cols`` of input i: lists over outputs of [len(rows[j]), len(cols)] tensors."""
    def pick(outs: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
        return [_select(o.detach().reshape(-1).to(torch.float64), r) for o, r in zip(outs, rows)]

    with torch.no_grad():
        base = pick(fn(*inputs))
        x = inputs[i].detach().clone()
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
            g = rows.reshape(out.shape).to(out.dtype)
        else:
            g = torch.zeros_like(out)
            g.view(-1)[int(rows[r])] = 1
        grads = torch.autograd.grad(out, leaves, g, retain_graph=True, allow_unused=True)
        for i, gi in enumerate(grads):
            if gi is not None:
                result[i][r] = gi.detach().reshape(-1).to(torch.float64)[: inputs[i].numel()]
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
        first = torch.tensor([_unravel(int(c), block.in_shape)[0] for c in block.cols])
        bad_rows = sorted(set(first[bad_cols].tolist()))
        if len(bad_rows) < block.in_shape[0]:
            return f"only rows {_short_list(bad_rows)} of {block.in_shape[0]} wrong"
    return None


def summarise(block: Block) -> dict[str, Any]:
    err = torch.nan_to_num((block.analytical - block.numerical).abs(), nan=math.inf)
    finite = torch.isfinite(err)
    # non-finite entries (NaN from 0 * inf in backward, say) show as the worst in the heatmap
    shown = torch.where(finite, err, err[finite].max() if finite.any() else torch.ones(()))
    flat = int(torch.argmax(torch.where(block.bad, err, torch.zeros_like(err))))
    r, c = divmod(flat, err.shape[1])
    out_index = None if block.projected else _unravel(int(block.rows[r]), block.out_shape)
    in_index = _unravel(int(block.cols[c]), block.in_shape)
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
        "heatmap": heatmap(shown),
    }


def _unravel(index: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    for size in reversed(shape):
        index, rem = divmod(index, size)
        out.append(rem)
    return tuple(reversed(out))


def _short_list(items: list[int], limit: int = 6) -> str:
    shown = ", ".join(map(str, items[:limit]))
    return f"[{shown}{', ...' if len(items) > limit else ''}]"


_SHADES = " .:-=+*#%@"


def heatmap(err: torch.Tensor, max_rows: int = 8, max_cols: int = 32) -> list[str]:
    """|analytical - numerical| as text: rows are output elements, columns input elements."""
    rows, cols = err.shape
    rh = math.ceil(rows / max_rows) if rows > max_rows else 1
    cw = math.ceil(cols / max_cols) if cols > max_cols else 1
    top = float(err.max()) or 1.0
    lines = []
    for r0 in range(0, rows, rh):
        line = []
        for c0 in range(0, cols, cw):
            v = float(err[r0:r0 + rh, c0:c0 + cw].max()) / top
            line.append(_SHADES[min(len(_SHADES) - 1, int(round(v * (len(_SHADES) - 1))))])
        lines.append("".join(line))
    return lines


def format_index(name: str, index: Sequence[int]) -> str:
    return f"{name}[{', '.join(map(str, index))}]" if index else name


@contextlib.contextmanager
def no_slow_rerun() -> Iterator[None]:
    """torch's fast-mode gradcheck re-runs slow mode on failure just to format its message,
    building the full Jacobian (numel_in x numel_out: 64 GB for 300x300 inputs). gradverify
    diagnoses failures itself, so that re-run is replaced by an empty message."""
    module = sys.modules.get("torch.autograd.gradcheck")
    original = getattr(module, "_run_slow_mode_and_get_error", None)
    if original is None:
        yield
        return
    module._run_slow_mode_and_get_error = lambda *args, **kwargs: ""  # type: ignore[union-attr]
    try:
        yield
    finally:
        module._run_slow_mode_and_get_error = original  # type: ignore[union-attr]


def jacobian_entries(inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor]) -> int:
    return sum(t.numel() for t in inputs) * sum(o.numel() for o in outputs)


# ----------------------------------------------------------------------------- comparing


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
    return float(diff.reshape(-1)[flat]), _unravel(flat, tuple(diff.shape))


# ----------------------------------------------------------------------------- low precision

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


def forward_backward(info: FunctionInfo, args: Args, grads: Sequence[Any] | None,
                     positions: Sequence[int]) -> tuple[list[Any], list[torch.Tensor | None]]:
    """Outputs (detached) and the gradients of the inputs at ``positions`` for incoming
    gradients ``grads`` (one per output, None for none), through the real engine."""
    applied = apply(info, args)
    outputs = [o.detach().clone() if isinstance(o, torch.Tensor) else o for o in applied.outputs]
    if grads is None or not applied.differentiable or not positions:
        return outputs, []
    matched = [g.to(dtype=o.dtype, device=o.device) if isinstance(g, torch.Tensor)
               and isinstance(o, torch.Tensor) else g for g, o in zip(grads, applied.outputs)]
    return outputs, engine_grads(applied, matched, positions)


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
        index = _unravel(int(bad_finite.reshape(-1).nonzero()[0]), tuple(got64.shape))
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
    return {"reason": "error", "index": list(_unravel(flat, tuple(got64.shape))),
            "max_abs_error": float(err.reshape(-1)[flat]),
            "relative_to_scale": float(err.reshape(-1)[flat]) / max(scale, 1e-300),
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
        return (f"{self.what} is off by {d['max_abs_error']:.3g} at {d['index']} "
                f"({d['relative_to_scale']:.2g} of its largest value; {d['count']} of "
                f"{d['entries']} elements): {_num(d['value'])} vs {_num(d['reference_value'])}")


def _num(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def compare_runs(ours: tuple[list[Any], list[Any]], reference: tuple[list[Any], list[Any]],
                 names: Sequence[str], rtol: float, atol: float) -> list[Mismatch]:
    """Outputs and gradients of a run against a float64 run, element by element."""
    found = []
    for j, (a, b) in enumerate(zip(ours[0], reference[0])):
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and \
                (b.is_floating_point() or b.is_complex()):
            data = compare(a, b, rtol, atol)
            if data:
                found.append(Mismatch(f"output {j}", None, j, data))
    for name, a, b in zip(names, ours[1], reference[1]):
        if a is None or b is None:
            if (a is None) != (b is None) and (a if a is not None else b).abs().max() > 0:
                found.append(Mismatch(f"gradient for {name!r}", name, None,
                                      {"reason": "missing on one side"}))
            continue
        data = compare(a, b, rtol, atol)
        if data:
            found.append(Mismatch(f"gradient for {name!r}", name, None, data))
    return found

