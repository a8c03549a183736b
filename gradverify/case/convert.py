"""A case's arguments in another dtype: float64 for gradient checks, the working dtype for
precision, and the inputs that stay as they are (frozen tensors that cannot be converted).
Every floating tensor is converted, inside lists and an ``nn.Module``'s parameters too."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gradverify.errors import InputError
from gradverify.specmodel import FLOATING


def inexact(value: Any) -> bool:
    """A floating or complex tensor."""
    import torch

    return isinstance(value, torch.Tensor) and (value.is_floating_point() or value.is_complex())

if TYPE_CHECKING:
    import torch


def constants(values: list[Any], names: list[str], wanted: torch.dtype) -> dict[str, str]:
    """The factory's inputs that require no grad and cannot become ``wanted``: constants of
    the case, verified around (gradient checks differentiate the other inputs only). This
    holds whether or not the factory takes ``dtype``: a frozen quantized weight is kept in its
    own dtype on purpose."""
    found = {}
    for name, value in zip(names, values):
        if not inexact(value) or value.requires_grad or value.dtype == wanted:
            continue
        if _frozen_form(value, wanted) is None:
            found[name] = (f"{type(value).__name__} in "
                           f"{str(value.dtype).removeprefix('torch.')}")
    return found


def _frozen_form(value: torch.Tensor, wanted: torch.dtype) -> torch.Tensor | None:
    """``value`` (a floating tensor that requires no grad) in ``wanted``, or None where it
    cannot become it: the conversion raises, keeps its dtype, or loses its type (a quantized
    subclass whose ``to`` dequantizes into a plain tensor, which forward cannot use)."""
    import torch

    try:
        detached = value.detach()
        converted = detached.to(wanted)
    except Exception:  # noqa: BLE001 -- a subclass's own refusal
        return None
    if not isinstance(converted, torch.Tensor) or converted.dtype != wanted \
            or type(converted) is not type(detached):
        return None
    return converted


def require_double(values: list[Any], names: list[str], factory: str, wanted: torch.dtype,
                    target: str, constants: set[str]) -> None:
    """A factory that takes ``dtype`` must honour it: a gradient check in float32 would
    compare finite differences against float32 round-off (docs/spec.md, factories).
    ``constants`` (frozen inputs that cannot be converted) are exempt."""
    import torch

    for name, value in zip(names, values):
        if not isinstance(value, torch.Tensor) or name in constants:
            continue
        low = (value.is_floating_point() and value.dtype != torch.float64) or \
            (value.is_complex() and value.dtype != torch.complex128)
        if low:
            raise InputError(
                f"factory {factory} takes `dtype` but returned {name!r} as "
                f"{str(value.dtype).removeprefix('torch.')} when called with dtype="
                f"{str(wanted).removeprefix('torch.')}; create its floating tensors with "
                "dtype=dtype (gradient checks need float64; the working dtype is the case's "
                "`dtype`), or drop the `dtype` parameter and gradverify converts them",
                code="GV006", where=target)


def converted(values: list[Any], *, double: bool, working: str = "float32") -> list[Any]:
    """``values`` with floating and complex tensors in double precision, or rounded to the
    working dtype (``working``: a case's dtype name); everything else as it is."""
    import torch

    if double:
        real, cplx = torch.float64, torch.complex128
    else:
        real = getattr(torch, working) if working in FLOATING else (
            torch.float64 if working == "complex128" else torch.float32)
        cplx = torch.complex128 if working in ("float64", "complex128") else torch.complex64
    return [_convert(v, real, cplx) for v in values]


def _convert(value: Any, real: torch.dtype, cplx: torch.dtype) -> Any:
    """``value`` with every floating and complex tensor in it converted: top-level, inside
    lists and tuples, and an ``nn.Module``'s parameters and buffers (on a copy)."""
    import torch

    if isinstance(value, torch.Tensor) and (value.is_complex() or value.is_floating_point()):
        wanted = cplx if value.is_complex() else real
        if value.requires_grad:
            return value.detach().to(wanted)
        # A frozen input that cannot become ``wanted`` is a constant, kept as it is.
        frozen = _frozen_form(value, wanted) if value.dtype != wanted else value.detach()
        return value if frozen is None else frozen
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(_convert(v, real, cplx) for v in value)
    if isinstance(value, torch.nn.Module):
        return _module_copy(value, real, cplx)
    return value


def _module_copy(module: Any, real: torch.dtype, cplx: torch.dtype) -> Any:
    """A copy of ``module`` (and its submodules) whose parameters and buffers are converted;
    everything else it holds is shared, not deep-copied (a lock, a process group)."""
    import copy

    import torch

    def converted(t: Any) -> Any:
        if t is None or not (t.is_floating_point() or t.is_complex()):
            return t
        out = t.detach().to(cplx if t.is_complex() else real)
        return torch.nn.Parameter(out, t.requires_grad) if isinstance(t, torch.nn.Parameter) \
            else out

    new = copy.copy(module)
    new.__dict__["_parameters"] = {k: converted(p) for k, p in module._parameters.items()}
    new.__dict__["_buffers"] = {k: converted(b) for k, b in module._buffers.items()}
    new.__dict__["_modules"] = {k: None if m is None else _module_copy(m, real, cplx)
                                for k, m in module._modules.items()}
    return new
