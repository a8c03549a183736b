"""Running a call as if its tensors lived on another device than the CPU, on a machine without
one (the placement check; docs/checks.md, "placement: as if on a GPU").

Each input is an ``Elsewhere``: a tensor that tells torch it lives on the ``meta`` device and
holds real CPU data, on which every op really runs. ``OnAnotherDevice``, a dispatch mode, sees
every aten call of forward and backward, factory calls included: a factory given the inputs'
device (``device=x.device``) makes an ``Elsewhere``; one given none makes a plain CPU tensor, and
the mode remembers the user's line that made it. An op that meets a device tensor with a CPU
tensor of one or more dimensions raises ``Misplaced``, as CUDA does ("Expected all tensors to be
on the same device"); a 0-dim CPU tensor is a scalar PyTorch moves, and CPU index tensors are
legal in indexing. ``FromData``, a function mode, keeps the data of ``torch.tensor(...,
device=x.device)``, which torch copies below the dispatch mode. Because the data is real,
data-dependent code (``nonzero``, ``.item()``, a ``.cpu()`` statistic) runs as it does on a
GPU. Imported only from inside a check's ``run``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.weak import WeakTensorKeyDictionary

from gradverify import frames, torchcompat
from gradverify.checks import _tensors as tensors
from gradverify.results import Location

CLAIMED = "meta"
"""The device the inputs claim: not the CPU, and one every build of torch has (a CPU build
cannot even name a CUDA tensor in autograd)."""

_SHOWN = {"lift_fresh": "torch.tensor or torch.from_numpy", "_to_copy": "Tensor.to",
          "scalar_tensor": "torch.tensor"}
"""Factory ops by the names users call them (the rest are ``torch.<op>``)."""

INDICES = (torch.int64, torch.int32, torch.bool, torch.uint8)


@dataclass(frozen=True)
class Made:
    """Where a plain CPU tensor came from: the aten op and the user's line."""

    op: str
    line: frames.SourceLine | None
    from_before: bool = False
    """Made from a CPU tensor the call did not make (a cache, a global): the user's line is
    where it met the call, not where it was first made."""

    def describe(self) -> str:
        where = f" at {self.line}" if self.line is not None else ""
        before = (", from a CPU tensor kept from an earlier call (a cache or a global, filled "
                  "on the CPU)") if self.from_before else ""
        return f"made by {_SHOWN.get(self.op, 'torch.' + self.op)}{where} on the CPU{before}"

    def location(self) -> Location | None:
        return self.line.location() if self.line is not None else None


class Misplaced(RuntimeError):
    """An op met a tensor on the device with a CPU tensor of one or more dimensions."""

    def __init__(self, op: str, shape: tuple[int, ...], made: Made | None) -> None:
        self.op, self.shape, self.made = op, shape, made
        origin = made.describe() if made is not None else (
            "kept from an earlier call, on the CPU: a cache or a global not made per device")
        super().__init__(f"{op} got a CPU tensor of shape {list(shape)} ({origin}) with "
                         f"tensors on the device; on a GPU this raises \"Expected all tensors "
                         f"to be on the same device\"")


class ToNumpy(RuntimeError):
    """``.numpy()`` on a device tensor: on a GPU it raises, as here."""

    def __init__(self) -> None:
        super().__init__("can't convert a device tensor to numpy (on a GPU .numpy() raises "
                         "'Use Tensor.cpu() to copy the tensor to host memory first')")


class Elsewhere(torch.Tensor):
    """A tensor claiming the ``meta`` device, holding real CPU data in ``held``."""

    held: torch.Tensor

    @staticmethod
    def __new__(cls, real: torch.Tensor) -> Elsewhere:
        made = torchcompat.wrapper_tensor(cls, real, CLAIMED)
        made.held = real
        return made

    __torch_function__ = torchcompat.no_torch_function()

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (),  # type: ignore[override]
                           kwargs: Any = None) -> Any:
        return _dispatch(func, args, kwargs or {}, None)

    def numpy(self, *args: Any, **kwargs: Any) -> Any:
        raise ToNumpy

    def tolist(self) -> Any:
        return self.held.tolist()

    def __format__(self, spec: str) -> str:
        return self.held.__format__(spec)

    def __repr__(self) -> str:  # type: ignore[override]
        return f"Elsewhere({self.held!r})"


def placed(value: torch.Tensor) -> Elsewhere:
    """``value`` as a device tensor: a leaf with its own grad flag and a copy of its data."""
    made = Elsewhere(value.detach().clone())
    made.requires_grad_(value.requires_grad)
    return made


def placed_all(value: Any) -> Any:
    """``value`` with every tensor in it (in lists, tuples and dicts too) placed."""
    return _map(lambda v: placed(v) if isinstance(v, torch.Tensor) else v, value)


def unplaceable(name: str, value: Any) -> str | None:
    """Why input ``name`` cannot be placed, if it cannot: a tensor in it that is not dense and
    plain (a list's too), or a module, whose parameters would have to move with it."""
    if isinstance(value, torch.nn.Module):
        return (f"{name!r} is a module: its parameters live where it does; placement is judged "
                "on tensor inputs")
    if any(tensors.is_tensor(v) and (not tensors.is_strided(v) or (
            type(v) is not torch.Tensor and not isinstance(v, torch.nn.Parameter)))
           for v in leaves(value)):
        return f"{name!r} is not a dense tensor: placement is judged on dense inputs"
    return None


def on_device(value: object) -> bool:
    return isinstance(value, Elsewhere)


def on_cpu(value: object) -> bool:
    """A plain tensor on the CPU that a device would not move: one or more dimensions."""
    return (isinstance(value, torch.Tensor) and not isinstance(value, Elsewhere)
            and value.device.type == "cpu" and value.dim() > 0)


class OnAnotherDevice(torchcompat.dispatch_mode_base()):  # type: ignore[misc]
    """Every aten call under it runs as on a device (see the module's docstring); ``made``
    holds where each plain CPU tensor it saw made came from."""

    def __init__(self, target_file: str | None) -> None:
        super().__init__()
        self.target_file = target_file
        self.made: Any = WeakTensorKeyDictionary()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:
        return _dispatch(func, args, kwargs or {}, self)

    def origin(self, value: object) -> Made | None:
        return self.made.get(value) if isinstance(value, torch.Tensor) else None


class FromData(torchcompat.function_mode_base()):  # type: ignore[misc]
    """``torch.tensor``, ``torch.as_tensor`` and ``Tensor.new_tensor`` given the inputs'
    device: torch copies the data to that device below the dispatch mode, and a ``meta``
    tensor holds none, so the data is kept on the CPU and claims the device."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:
        kwargs = kwargs or {}
        if func not in (torch.tensor, torch.as_tensor, torch.Tensor.new_tensor):
            return func(*args, **kwargs)
        device = kwargs.get("device")
        if device is None and func is torch.Tensor.new_tensor and args and on_device(args[0]):
            device = CLAIMED
        if device is None or torch.device(device).type != CLAIMED:
            return func(*args, **kwargs)
        if func is torch.Tensor.new_tensor:
            args = (_unwrap(args[0]), *args[1:])
        return Elsewhere(func(*args, **{**kwargs, "device": torch.device("cpu")}))


def leaves(value: Any) -> list[Any]:
    """The non-container values in ``value`` (lists, tuples and dicts opened)."""
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in leaves(item)]
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in leaves(item)]
    return [value]


def _map(fn: Any, value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return type(value)(_map(fn, item) for item in value)
    if isinstance(value, dict):
        return {key: _map(fn, item) for key, item in value.items()}
    return fn(value)


def _unwrap(value: Any) -> Any:
    return value.held if isinstance(value, Elsewhere) else value


_COPIES = frozenset({"copy_", "_to_copy", "_copy_from", "_copy_from_and_resize"})
"""The ops that move data between devices: legal with a CPU tensor."""


def _dispatch(func: Any, args: Any, kwargs: dict[str, Any], mode: OnAnotherDevice | None
              ) -> Any:
    """One aten call, as on a device: check the placement of its tensors, run it on the real
    data, and say where its results live."""
    name = func.overloadpacket.__name__
    values = leaves((args, kwargs))
    kwargs, asked = _device_asked(kwargs)
    meets = any(on_device(v) for v in values)
    kernel = torchcompat.any_device_kernel(func) if meets else None
    if kernel is not None and mode is not None:  # a custom op's kernel for every device
        with mode:
            return kernel(*args, **kwargs)
    if meets and name not in _COPIES:
        _require_same_device(name, args, values, mode)
    out = func(*_map(_unwrap, args), **_map(_unwrap, kwargs))
    if _in_place(name, args):
        return args[0]  # the destination, wherever it lives
    if asked if asked is not None else meets:
        return _as_placed(name, out)
    if mode is not None:
        _remember(mode, name, values, out)
    return out


def _device_asked(kwargs: dict[str, Any]) -> tuple[dict[str, Any], bool | None]:
    """``kwargs`` with the claimed device replaced by the CPU, where the data is, and whether
    the call asked for its results on the claimed device (True), on the CPU (False) or named
    no device (None)."""
    device = kwargs.get("device")
    if device is None:
        return kwargs, None
    if torch.device(device).type != CLAIMED:
        return kwargs, False
    return {**kwargs, "device": torch.device("cpu")}, True


def _in_place(name: str, args: Any) -> bool:
    return name == "copy_" or (name.endswith("_") and bool(args)
                               and isinstance(args[0], torch.Tensor))


def _as_placed(name: str, out: Any) -> Any:
    """The results of an op on the device: device tensors, but for the lengths that ops such as
    packed sequences return on the CPU on every device."""
    host = name in torchcompat.host_argument_ops()
    return _map(lambda v: Elsewhere(v) if isinstance(v, torch.Tensor) and not (
        host and not v.is_floating_point()) else v, out)


def _require_same_device(name: str, args: Any, values: list[Any], mode: OnAnotherDevice | None
                         ) -> None:
    """Raise ``Misplaced`` for a CPU tensor a device would refuse here: one of one or more
    dimensions (but indices in indexing and lengths where torch takes them on the CPU), or an
    in-place op's destination of any size."""
    legal: list[Any] = []
    if name in torchcompat.index_ops() and len(args) > 1:
        legal = [v for v in leaves(args[1]) if isinstance(v, torch.Tensor) and v.dtype in INDICES]
    elif name in torchcompat.host_argument_ops():
        legal = [v for v in values if isinstance(v, torch.Tensor) and not v.is_floating_point()]
    into = args[0] if _in_place(name, args) else None
    for value in values:
        refused = on_cpu(value) or (value is into and not on_device(into))
        if refused and not any(value is ok for ok in legal):
            raise Misplaced(name, tuple(value.shape), mode.origin(value) if mode else None)


def _remember(mode: OnAnotherDevice, name: str, values: list[Any], out: Any) -> None:
    """Where the plain CPU tensors ``out`` came from: the origin of a CPU input they derive
    from (``torch.zeros(n).double()`` was made by zeros), else this op at the user's line."""
    inherited = next((mode.origin(v) for v in values if mode.origin(v) is not None), None)
    made = inherited or Made(name, frames.calling_user_frame(mode.target_file),
                             from_before=name != "lift_fresh" and any(map(on_cpu, values)))
    for value in leaves(out):
        if isinstance(value, torch.Tensor) and not on_device(value) and value not in mode.made:
            mode.made[value] = made
