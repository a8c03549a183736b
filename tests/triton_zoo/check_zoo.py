"""Check the Triton zoo against its references: correct kernels agree, planted bugs show.

Run with the interpreter (set before triton is imported)::

    TRITON_INTERPRET=1 python tests/triton_zoo/check_zoo.py

For every Function, correct and buggy, at N in (1, BLOCK-1, BLOCK, BLOCK+1, 2*BLOCK+1) and
rows in (1, 3), it runs the kernel on float32 inputs with a random, non-contiguous incoming
gradient and compares the output and each input gradient with the reference computed in
float64 on the same float32 values. The kernel passes a size when, for every tensor,

    max|kernel - ref64| <= 2 * max|ref32 - ref64| + 4 * 2**-23 * max|ref64|

where ref32 is the reference computed in float32. Correct kernels must pass every size; each
buggy one must fail some size. It also shows that ``torch.autograd.gradcheck`` on float64 inputs
fails for every correct kernel: the kernels compute in float32 inside, whatever they are handed.
Exits 1 when an expectation does not hold.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from triton_zoo import buggy as B
from triton_zoo import kernels as K
from triton_zoo import references as R

EPS = 1e-6
SCALE = 1.7
ROWS = (1, 3)
Fn = Callable[..., torch.Tensor]


@dataclass(frozen=True)
class Case:
    """A Function under check: how to call it, its reference, and how to make its inputs."""

    name: str
    fn: Fn
    ref: Fn
    block: int
    make: Callable[[int, int], list[torch.Tensor]]  # (rows, N) -> float32 inputs
    diff: tuple[str, ...]  # names of the differentiable inputs, in input order
    buggy: bool = False
    contiguous_grad: bool = False


def _rows_n(rows: int, n: int) -> list[torch.Tensor]:
    return [torch.randn(rows, n)]


def _rms_inputs(rows: int, n: int) -> list[torch.Tensor]:
    return [torch.randn(rows, n), torch.randn(n)]


def _rotary_inputs(rows: int, n: int) -> list[torch.Tensor]:
    theta = torch.rand(rows, n) * 2 * math.pi
    return [torch.randn(rows, 2 * n), torch.cos(theta), torch.sin(theta)]


def _two(rows: int, n: int) -> list[torch.Tensor]:
    return [torch.randn(rows, n), torch.randn(rows, n)]


def _rms(f: type[torch.autograd.Function]) -> Fn:
    return lambda x, w: f.apply(x, w, EPS)


def _lse(f: type[torch.autograd.Function]) -> Fn:
    return lambda x: f.apply(x)


def _rotary(f: type[torch.autograd.Function]) -> Fn:
    return lambda x, c, s: f.apply(x.clone(), c, s)  # in place: rotate a non-leaf copy


def _silu(f: type[torch.autograd.Function]) -> Fn:
    return lambda x: f.apply(x, SCALE)


def cases() -> list[Case]:
    """Every Function under check: the correct ones, then the buggy ones."""
    silu_ref = lambda x: R.scaled_silu(x, SCALE)  # noqa: E731
    rms: dict[str, Any] = dict(ref=_rms_ref, block=16, make=_rms_inputs, diff=("x", "weight"))
    lse: dict[str, Any] = dict(ref=R.logsumexp, block=16, make=_rows_n, diff=("x",))
    rot: dict[str, Any] = dict(ref=R.rotary, block=16, make=_rotary_inputs, diff=("x",))
    silu: dict[str, Any] = dict(ref=silu_ref, block=32, make=_rows_n, diff=("x",))
    two: dict[str, Any] = dict(ref=R.mul_add, block=32, make=_two, diff=("x", "y"))
    return [
        Case("RMSNorm", _rms(K.RMSNorm), **rms),
        Case("LogSumExp", _lse(K.LogSumExp), **lse),
        Case("Rotary", _rotary(K.Rotary), **rot),
        Case("ScaledSiLU", _silu(K.ScaledSiLU), **silu),
        Case("gvzoo::mul_add", K.mul_add, **two),
        Case("RMSNormLastBlockMask", _rms(B.RMSNormLastBlockMask), **rms, buggy=True),
        Case("RMSNormWeightNotReduced", _rms(B.RMSNormWeightNotReduced), **rms, buggy=True),
        Case("LogSumExpLoopShort", _lse(B.LogSumExpLoopShort), **lse, buggy=True),
        Case("ScaledSiLUMissingFactor", _silu(B.ScaledSiLUMissingFactor), **silu, buggy=True),
        Case(
            "RotaryAssumesContiguousGrad", _rotary(B.RotaryAssumesContiguousGrad), **rot, buggy=True
        ),
        # the same bug with a contiguous incoming gradient: invisible, as it should be
        Case(
            "RotaryAssumesContiguousGrad",
            _rotary(B.RotaryAssumesContiguousGrad),
            **rot,
            contiguous_grad=True,
        ),
    ]


def _rms_ref(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return R.rmsnorm(x, w, EPS)


def _incoming(shape: torch.Size, contiguous: bool) -> torch.Tensor:
    """A random incoming gradient; by default every other column of a wider one (strided)."""
    if contiguous:
        return torch.randn(shape)
    wide = torch.randn(*shape[:-1], 2 * shape[-1])
    return wide[..., ::2]


def _run(case: Case, inputs: Sequence[torch.Tensor], g: torch.Tensor, fn: Fn) -> list[torch.Tensor]:
    """The output and the gradients of the differentiable inputs (leaves are fresh copies)."""
    leaves = [t.detach().clone() for t in inputs]
    diff = [leaves[i] for i in range(len(case.diff))]
    for t in diff:
        t.requires_grad_(True)
    out = fn(*leaves)
    grads = torch.autograd.grad(out, diff, g.to(out.dtype))
    return [out.detach(), *grads]


def check_size(case: Case, rows: int, n: int) -> tuple[bool, str]:
    """Compare the kernel with ref64 at one size; (passes, one table line)."""
    torch.manual_seed(1000 * rows + n)
    x32 = case.make(rows, n)
    x64 = [t.double() for t in x32]
    shape = case.ref(*x32).shape
    g = _incoming(shape, case.contiguous_grad)
    kern = _run(case, x32, g, case.fn)
    r32 = _run(case, x32, g, case.ref)
    r64 = _run(case, x64, g.double(), case.ref)
    names = ["out", *(f"d{name}" for name in case.diff)]
    ok, cells = True, []
    for name, k, a, b in zip(names, kern, r32, r64):
        k_err = (k.double() - b).abs().max().item()
        r_err = (a.double() - b).abs().max().item()
        bound = 2 * r_err + 4 * 2**-23 * b.abs().max().item()
        ok = ok and k_err <= bound
        cells.append(f"{name} {k_err:8.1e}/{r_err:8.1e}")
    return ok, f"{'ok ' if ok else 'BAD'} {rows}x{n:<3d} " + "  ".join(cells)


def check_case(case: Case) -> bool:
    """Run every size; print the lines; True when the case meets its expectation."""
    label = case.name + (" (contiguous incoming grad)" if case.contiguous_grad else "")
    kind = "buggy" if case.buggy else "control: must pass" if case.contiguous_grad else "correct"
    print(f"\n{label}  BLOCK={case.block}  [{kind}]")
    b = case.block
    failing = []
    for rows in ROWS:
        for n in (1, b - 1, b, b + 1, 2 * b + 1):
            ok, line = check_size(case, rows, n)
            print("  " + line)
            if not ok:
                failing.append(f"{rows}x{n}")
    if case.buggy:
        print(f"  -> bug shows at rows x N = {', '.join(failing) or 'NOWHERE (unexpected)'}")
        return bool(failing)
    print(f"  -> {'passes every size' if not failing else 'FAILS at ' + ', '.join(failing)}")
    return not failing


def check_gradcheck(case: Case) -> bool:
    """gradcheck on float64 inputs must fail: the kernel computes in float32 inside."""
    torch.manual_seed(7)
    inputs = [t.double() for t in case.make(2, 5)]
    for i in range(len(case.diff)):
        inputs[i].requires_grad_(True)
    passed = torch.autograd.gradcheck(case.fn, inputs, raise_exception=False)
    ref_passed = torch.autograd.gradcheck(case.ref, inputs, raise_exception=False)
    print(
        f"  {case.name:<16} kernel: {'passes' if passed else 'fails'}; "
        f"reference: {'passes' if ref_passed else 'fails'}"
    )
    return not passed and ref_passed


def main() -> int:
    if os.environ.get("TRITON_INTERPRET") != "1":
        print("set TRITON_INTERPRET=1 before running (the kernels run on CPU tensors)")
        return 2
    start = time.perf_counter()
    print("each cell: tensor  max|kernel - ref64| / max|ref32 - ref64|")
    good = [check_case(case) for case in cases()]
    print("\ngradcheck on float64 inputs (rows 2, N 5):")
    good += [check_gradcheck(c) for c in cases() if not (c.buggy or c.contiguous_grad)]
    print(
        f"\n{'all expectations hold' if all(good) else 'SOME EXPECTATION FAILED'}"
        f" ({time.perf_counter() - start:.1f} s)"
    )
    return 0 if all(good) else 1


if __name__ == "__main__":
    sys.exit(main())
