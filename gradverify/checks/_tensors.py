"""Tensor-kind-aware primitives: version counters, equality, snapshots, storage and bytes,
in-place changes and other memory layouts.

A Function may take, save or return any kind of tensor: strided (dense), sparse COO/CSR/CSC/
BSR/BSC, complex, integer or bool, zero-size, 0-dim, expanded (stride 0), or a subclass. Not
every kind has every operation (``untyped_storage()`` raises for sparse tensors, ``torch.equal``
has no sparse kernel, ``add_(scalar)`` is undefined on sparse), so the checks never call those
directly: they ask this module, which handles each kind or says it cannot.

Imported only from inside ``run`` (it imports torch).
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from gradverify.codes import refuses_write

SPARSE_LAYOUTS = frozenset({torch.sparse_coo, torch.sparse_csr, torch.sparse_csc,
                            torch.sparse_bsr, torch.sparse_bsc})


def is_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor)


def is_sparse(t: torch.Tensor) -> bool:
    return t.layout in SPARSE_LAYOUTS


def is_strided(t: torch.Tensor) -> bool:
    return t.layout == torch.strided


def has_own_dispatch(t: torch.Tensor) -> bool:
    """Whether ``t`` is a wrapper subclass with a ``__torch_dispatch__`` of its own (a frozen
    quantized weight such as torchao's NF4Tensor): what its memory looks like is its own."""
    return any("__torch_dispatch__" in vars(c) for c in type(t).__mro__
               if c is not torch.Tensor)


_PERMUTED = {
    "transposed": lambda n: [*range(n - 2), n - 1, n - 2] if n >= 2 else None,
    "leading dims permuted": lambda n: [*range(n - 3), n - 2, n - 3, n - 1] if n >= 3 else None,
    "reversed strides": lambda n: list(range(n))[::-1] if n >= 3 else None,
}
"""Memory orders (outermost dim first) of the permuted layouts ``noncontiguous`` makes."""


def layout_copy(t: torch.Tensor) -> torch.Tensor:
    """A differentiable copy of ``t`` with its strides (``clone`` makes a strided slice of a
    larger buffer contiguous, which would hide what the layout check varies); a plain clone
    for sparse, expanded or overlapping tensors and whatever else refuses a strided copy."""
    if is_strided(t) and all(s != 0 or n <= 1 for s, n in zip(t.stride(), t.shape)):
        try:
            out = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device)
            return out.copy_(t)
        except RuntimeError:
            pass
    return t.clone()


def is_inexact(t: torch.Tensor) -> bool:
    """Floating or complex: the kinds that carry gradients."""
    return t.is_floating_point() or t.is_complex()


def kind(t: torch.Tensor) -> str:
    """A short name for the tensor's kind, for messages: ``sparse_coo``, ``subclass``, ..."""
    if type(t) is not torch.Tensor and not isinstance(t, torch.nn.Parameter):
        return f"subclass {type(t).__name__}"
    if not is_strided(t):
        return str(t.layout).removeprefix("torch.")
    return "strided"


# ----------------------------------------------------------------------------- values


def version(t: torch.Tensor) -> int | None:
    """The version counter (bumped by every in-place write), or None for a kind without one."""
    try:
        return int(t._version)
    except (RuntimeError, AttributeError):
        return None


def dense(t: torch.Tensor) -> torch.Tensor:
    """The values as a plain strided tensor (sparse kinds densified, subclasses unwrapped)."""
    t = t.detach()
    if not is_strided(t):
        t = t.to_dense()
    if type(t) is not torch.Tensor:
        with contextlib.suppress(Exception):
            t = t.as_subclass(torch.Tensor)
    return t


def first_not_finite(value: Any) -> tuple[str, tuple[int, ...]] | None:
    """``("nan" | "inf" | "-inf", index)`` of the first entry of a floating or complex tensor
    that is not finite (sparse kinds by their dense values), or None."""
    if not isinstance(value, torch.Tensor) or not is_inexact(value):
        return None
    try:
        values = dense(value)
        bad = ~torch.isfinite(values)
        if not bool(bad.any()):
            return None
        flat = int(bad.reshape(-1).nonzero()[0, 0])
    except Exception:  # noqa: BLE001 -- a kind without dense values: nothing to say
        return None
    entry = values.reshape(-1)[flat]
    if entry.is_complex():
        entry = entry.real if not bool(torch.isfinite(entry.real)) else entry.imag
    text = "nan" if bool(torch.isnan(entry)) else "inf" if float(entry) > 0 else "-inf"
    return text, unravel(flat, tuple(values.shape))


def unravel(index: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The multi-index of flat (row-major) ``index`` in ``shape``."""
    out = []
    for size in reversed(shape):
        index, rem = divmod(index, size)
        out.append(rem)
    return tuple(reversed(out))


def copy(t: torch.Tensor) -> torch.Tensor | None:
    """A detached copy of the values, or None when the kind cannot be copied."""
    try:
        with torch.no_grad():
            return t.detach().clone()
    except Exception:  # noqa: BLE001 -- a subclass without clone
        return None


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shape, dtype and values (NaN equal to NaN), whatever the kinds."""
    if a.shape != b.shape or a.dtype != b.dtype or a.layout != b.layout:
        return False
    a, b = dense(a), dense(b)
    if a.device != b.device:
        b = b.to(a.device)
    if torch.equal(a, b):
        return True
    if is_inexact(a):
        return bool(((a == b) | (a.isnan() & b.isnan())).all())
    return False


@dataclass
class Snapshot:
    """Versions and values of some tensors, to detect in-place writes afterwards."""

    tensors: list[torch.Tensor]
    versions: list[int | None]
    values: list[torch.Tensor | None]

    @classmethod
    def of(cls, tensors: Sequence[torch.Tensor]) -> Snapshot:
        tensors = list(tensors)
        return cls(tensors, [version(t) for t in tensors], [copy(t) for t in tensors])

    def changed(self) -> list[int]:
        """Indices of tensors written since the snapshot (version counter or values)."""
        found = []
        for k, (t, before, value) in enumerate(zip(self.tensors, self.versions, self.values)):
            bumped = before is not None and version(t) != before
            if bumped or (value is not None and not _same_or_unknown(t, value)):
                found.append(k)
        return found


def _same_or_unknown(a: torch.Tensor, b: torch.Tensor) -> bool:
    try:
        return same_values(a, b)
    except Exception:  # noqa: BLE001 -- a kind that cannot be compared: rely on versions
        return True


# ----------------------------------------------------------------------------- memory


def storages(t: torch.Tensor) -> dict[int, int]:
    """The memory a tensor holds: {storage address (or a stand-in key): bytes}. A sparse tensor
    holds its index and value tensors; a kind without storage counts its elements."""
    if t.layout == torch.sparse_coo:
        return {**storages(t._indices()), **storages(t._values())}
    if t.layout in (torch.sparse_csr, torch.sparse_bsr):
        return {**storages(t.crow_indices()), **storages(t.col_indices()),
                **storages(t.values())}
    if t.layout in (torch.sparse_csc, torch.sparse_bsc):
        return {**storages(t.ccol_indices()), **storages(t.row_indices()),
                **storages(t.values())}
    try:
        storage = t.untyped_storage()
        return {storage.data_ptr(): storage.nbytes()}
    except (RuntimeError, TypeError, AttributeError):
        return {id(t): t.numel() * t.element_size()}


def same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Both are strided views of one non-empty block of memory."""
    if not (is_strided(a) and is_strided(b)):
        return False
    try:
        sa, sb = a.untyped_storage(), b.untyped_storage()
        return sa.data_ptr() == sb.data_ptr() and sa.nbytes() > 0
    except (RuntimeError, TypeError, AttributeError):
        return False


def classify(tensor: torch.Tensor, inputs: dict[str, torch.Tensor],
             outputs: dict[int, torch.Tensor], *, same_shape: bool = True
             ) -> tuple[str, str | None]:
    """Whether a tensor is one of the inputs (by name), one of the outputs (by index) or an
    intermediate: the same object, or the same storage (with the same shape, if asked)."""
    def matches(value: torch.Tensor) -> bool:
        return tensor is value or (same_storage(tensor, value)
                                   and (not same_shape or tensor.shape == value.shape))

    for name, value in inputs.items():
        if matches(value):
            return "input", name
    for j, value in outputs.items():
        if matches(value):
            return "output", str(j)
    return "intermediate", None


# ----------------------------------------------------------------------------- in-place changes


class Unsupported(Exception):
    """The tensor's kind has no in-place operation that changes its values."""


def modify_in_place(t: torch.Tensor) -> None:
    """Change every value of t in place (under no_grad, so leaves may be written), bumping its
    version counter. Raises ``Unsupported`` when the kind has no such operation (or nothing to
    change); whatever autograd raises to refuse the write propagates (see ``is_protection``)."""
    if t.numel() == 0:
        raise Unsupported("it has no elements")
    if is_strided(t) and any(stride == 0 and size > 1 for stride, size in zip(t.stride(), t.shape)):
        raise Unsupported("its elements share memory (expanded), so torch refuses in-place writes")
    try:
        _change_values(t)
    except Unsupported:
        raise
    except Exception as exc:
        if is_protection(exc):
            raise
        # a frozen subclass (a quantized weight) without in-place arithmetic: our own write
        # failed, which says nothing of backward
        raise Unsupported(f"{type(t).__name__} has no in-place arithmetic "
                          f"({type(exc).__name__})") from exc


def _change_values(t: torch.Tensor) -> None:
    with torch.no_grad():
        if is_sparse(t):
            if not is_inexact(t):
                raise Unsupported(f"{kind(t)} {str(t.dtype)[6:]} tensors have no in-place "
                                  "arithmetic")
            t.mul_(1.5)  # sparse kinds have mul_ by a scalar, not add_
        elif is_inexact(t):
            t.mul_(1.5).add_(0.25)
        elif t.dtype == torch.bool:
            t.logical_not_()
        elif t.numel() > 1 and all(s != 0 for s in t.stride()):
            t.copy_(t.flatten().roll(1).reshape(t.shape))
        else:
            t.add_(1)


def is_protection(exc: BaseException) -> bool:
    """autograd refused an in-place change (at the op or at backward): the version-counter
    error, the view+inplace errors (a view of a custom Function's output, one made in no_grad
    or inference mode, one of several views), the leaf errors. That is protection, not a
    defect."""
    return isinstance(exc, RuntimeError) and refuses_write(str(exc))


def noncontiguous(t: torch.Tensor, how: str) -> torch.Tensor | None:
    """The same values in other memory: ``transposed`` storage (the last two dims, dim >= 2),
    ``leading dims permuted`` (the two dims before the last swapped in memory, dim >= 3: the
    gradient of an attention output that is ``transpose(1, 2).reshape(...)``-ed downstream),
    ``reversed strides`` (every dim's order reversed, column-major, dim >= 3) or ``strided``
    (every other element of a larger buffer). None when the layout does not apply (sparse
    kinds, too few elements or dims)."""
    if t.numel() < 2 or not is_strided(t) or has_own_dispatch(t):
        return None  # a wrapper subclass lays out its memory itself
    try:
        return _relaid(t, how)
    except (NotImplementedError, RuntimeError, TypeError, AssertionError):
        return None  # a frozen subclass that cannot be laid out otherwise (a quantized weight)


def _relaid(t: torch.Tensor, how: str) -> torch.Tensor | None:
    with torch.no_grad():
        if how in _PERMUTED:
            order = _PERMUTED[how](t.dim())
            if order is None:
                return None
            inverse = [order.index(d) for d in range(t.dim())]
            out = t.detach().permute(order).contiguous().permute(inverse)
        elif how == "strided":
            if not t.dim():
                return None
            buffer = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype, device=t.device)
            out = buffer[..., ::2]
            out.copy_(t.detach())
        else:  # pragma: no cover
            raise ValueError(how)
    if type(out) is not type(t):
        return None  # a subclass whose views come back as plain tensors: no such variant
    return None if out.is_contiguous() else out


# ----------------------------------------------------------------------------- what forward keeps


@dataclass
class Saved:
    """Tensors passed to save_for_backward during one forward, seen by saved_tensors_hooks."""

    tensors: list[torch.Tensor] = field(default_factory=list)


@contextlib.contextmanager
def record_saved() -> Iterator[Saved]:
    saved = Saved()

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.tensors.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield saved


def ctx_tensors(ctx: Any) -> list[tuple[str, torch.Tensor]]:
    """Tensors that forward stored as ctx attributes (also inside lists, tuples and dicts)."""
    found: list[tuple[str, torch.Tensor]] = []
    try:
        attrs = vars(ctx)
    except TypeError:
        return found
    for name, value in attrs.items():
        if isinstance(value, torch.Tensor):
            found.append((f"ctx.{name}", value))
        elif isinstance(value, (list, tuple)):
            found += [(f"ctx.{name}[{k}]", v) for k, v in enumerate(value)
                      if isinstance(v, torch.Tensor)]
        elif isinstance(value, dict):
            found += [(f"ctx.{name}[{k!r}]", v) for k, v in value.items()
                      if isinstance(v, torch.Tensor)]
    return found
