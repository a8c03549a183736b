"""How a plain function or an ``nn.Module`` target is built and called: the module built
from ``init_args`` (seeded), keyword-only parameters passed by name, buffers copied per call,
and the same random numbers on every call (dropout draws one mask)."""
from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from gradverify.errors import TargetError, did_you_mean
from gradverify.targets.model import Param

MODULE_SEED = 0
"""A module target is built after ``torch.manual_seed(MODULE_SEED)``: its parameters' values
are the same in every run; every call of a function or module draws random numbers from it."""


def split(params: tuple[Param, ...], values: Sequence[Any]
           ) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A case's values for a function or forward as positional arguments and keyword-only
    ones (which the binding puts after every positional one, in declared order)."""
    if any(p.kind == "var_positional" for p in params):
        return tuple(values), {}
    positional = sum(1 for p in params if p.kind == "positional")
    keyword = [p.name for p in params if p.kind == "keyword_only"]
    return tuple(values[:positional]), dict(zip(keyword, values[positional:]))


class InitArgsError(TargetError):
    """A module class cannot be built from its ``init_args``."""


def build_module(cls: type, name: str, init_args: Mapping[str, Any]) -> Any:
    """``cls(**init_args)``, seeded; InitArgsError with the reason when construction fails
    (an unknown or missing argument named, with the closest spelling)."""
    import torch


    try:
        signature: inspect.Signature | None = inspect.signature(cls)
    except (TypeError, ValueError):
        signature = None
    if signature is not None:
        try:
            signature.bind(**init_args)
        except TypeError as exc:
            accepted = list(signature.parameters)
            unknown = [k for k in init_args if k not in accepted]
            takes_any = any(p.kind == inspect.Parameter.VAR_KEYWORD
                            for p in signature.parameters.values())
            reason = (f"{unknown[0]!r} is not an argument of {cls.__name__}{signature}"
                      f"{did_you_mean(unknown[0], accepted)}" if unknown and not takes_any
                      else f"{cls.__name__}{signature}: {exc} (give the constructor's "
                      "arguments under the spec's `init_args:`)")
            raise InitArgsError(f"cannot build {name} from init_args {dict(init_args)}: "
                                f"{reason}", code="GV020", where=name) from None
    try:
        with torch.random.fork_rng(devices=[]):  # a module is built on the CPU
            torch.default_generator.manual_seed(MODULE_SEED)
            return cls(**init_args)
    except Exception as exc:  # noqa: BLE001 -- user code
        raise InitArgsError(f"building {name}(**init_args) raised {type(exc).__name__}: {exc}",
                            code="GV020", where=name) from None


def buffer_copy(buffer: Any, like: Any) -> Any:
    """A copy of a buffer for one call (what forward writes into it, running statistics, stays
    in that call), on the device of the floating tensors passed; a floating buffer is widened
    to float64 for the gradient checks' float64 run (a module checked in float64 keeps float64
    running statistics) and otherwise keeps its own dtype (a float64 accumulator stays one)."""
    import torch

    if like is None:
        return buffer.clone()
    wide = like.dtype in (torch.float64, torch.complex128) and buffer.is_floating_point()
    return buffer.to(dtype=torch.float64 if wide else buffer.dtype, device=like.device,
                     copy=True)


class RandomUse:
    """Whether a call of a function or module drew random numbers (``same_random_numbers``):
    then float32 and float64 runs draw different numbers, and a strided input gets its noise
    in another order, so ``precision`` and ``layout`` cannot compare runs."""

    def __init__(self) -> None:
        self.drew = False


@contextlib.contextmanager
def same_random_numbers(values: Sequence[Any], use: RandomUse | None = None
                        ) -> Iterator[None]:
    """Run with the random generators of the devices of ``values`` (the CPU's, and the CUDA
    devices the tensors are on) seeded with ``MODULE_SEED``, each given back afterwards:
    random ops (dropout) draw the same numbers on every call, so a function or module is one
    function of its inputs, as opcheck's tests do. ``use`` learns whether the call drew."""
    import torch

    devices = sorted({v.device.index or 0 for v in values if isinstance(v, torch.Tensor)
                      and v.device.type == "cuda"})
    with torch.random.fork_rng(devices=devices):
        torch.default_generator.manual_seed(MODULE_SEED)
        for device in devices:
            torch.cuda.default_generators[device].manual_seed(MODULE_SEED)
        watch = use is not None and not use.drew  # once it drew, it is known to draw
        seeded = torch.default_generator.get_state() if watch else None
        yield
        if use is not None and seeded is not None:
            use.drew = bool((seeded != torch.default_generator.get_state()).any())
