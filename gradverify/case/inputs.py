"""A bound ``Case`` to concrete arguments: seeded, per dtype role.

Roles: ``double`` (float64/complex128 copies, for gradient checks), ``working`` (the declared
dtype, for precision and reference checks) and ``widened`` (the working values widened back to
float64: the reference a working-dtype run is compared against, so that input rounding is never
blamed on the formula). All come from one set of generated values (one factory call), so they
describe the same point. Tensor subclasses keep their class through every copy.
"""
from __future__ import annotations

import hashlib
import inspect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from gradverify.case import convert
from gradverify.case.binding import Bound, Default, names_for, resolve_shape
from gradverify.errors import InputError, did_you_mean
from gradverify.results import InputInfo
from gradverify.specmodel import COMPLEX, FLOATING, INITS, Case, SeqArg, TensorArg, ValueArg
from gradverify.targets import MISSING, ModuleParameter, Target, module_parameter, resolve_object
from gradverify.targets.op_calls import tensor_lists

if TYPE_CHECKING:
    import torch


@dataclass
class Args:
    """Concrete arguments for one call of ``Function.apply``."""

    names: list[str]
    values: list[Any]
    differentiable: list[bool] = field(default_factory=list)
    """Per position: a floating/complex tensor that requires grad in gradient checks."""

    @property
    def tensor_positions(self) -> list[int]:
        import torch

        return [i for i, v in enumerate(self.values) if isinstance(v, torch.Tensor)]

    @property
    def diff_positions(self) -> list[int]:
        return [i for i, d in enumerate(self.differentiable) if d]

    def clone(self, requires_grad: Sequence[int] | None = None) -> Args:
        """Fresh leaf copies of every tensor; ``requires_grad`` picks which require grad
        (default: the differentiable ones)."""
        import torch

        wanted = set(self.diff_positions if requires_grad is None else requires_grad)
        values = [fresh_leaf(v, i in wanted) if isinstance(v, torch.Tensor) else v
                  for i, v in enumerate(self.values)]
        return Args(list(self.names), values, list(self.differentiable))

    def info(self) -> tuple[InputInfo, ...]:
        return tuple(describe(n, v) for n, v in zip(self.names, self.values))


def fresh_leaf(t: torch.Tensor, requires_grad: bool) -> torch.Tensor:
    """A detached copy of ``t`` (a new leaf), of the same class and instance attributes: a
    tensor subclass whose ``detach``/``clone`` fall back to a plain tensor is copied another
    way, or, for one that cannot be copied and never requires grad, handed out as it is (it
    cannot carry a graph)."""
    import copy

    import torch

    with torch.no_grad():  # a clone made without grad is a detached copy
        out = _copied(t, lambda: t.clone())
        if type(out) is not type(t):
            out = _copied(t, lambda: t.detach().clone())
        if type(out) is not type(t):
            out = _copied(t, lambda: copy.deepcopy(t))
        if type(out) is not type(t) and not requires_grad:
            return t
        # A subclass's clone keeps its class but not the attributes set on the instance
        # (a quantized weight's scale): they are carried over, shared.
        for key, value in getattr(t, "__dict__", {}).items():
            out.__dict__.setdefault(key, value)
    if out.requires_grad != requires_grad:
        out.requires_grad_(requires_grad)
    return out


def _copied(t: Any, copy_of: Any) -> Any:
    """``copy_of()``, or None where it raises: a subclass that cannot copy itself (a frozen
    quantized weight whose clone re-quantizes with other block sizes)."""
    try:
        return copy_of()
    except Exception:  # noqa: BLE001 -- the subclass's own code
        return None


def describe(name: str, value: Any) -> InputInfo:
    import torch

    if isinstance(value, torch.Tensor):
        return InputInfo(name, "tensor", tuple(value.shape),
                         str(value.dtype).removeprefix("torch."), value.requires_grad)
    kind = "none" if value is None else type(value).__name__
    return InputInfo(name, kind if kind in ("bool", "int", "float", "str", "tuple", "list", "none")
                     else "other")


# ----------------------------------------------------------------------------- generation


def case_seed(seed: int, target: str, case: str) -> int:
    # surrogateescape: a name read from argv under an ASCII locale holds its UTF-8 bytes as
    # escapes, which give back the same bytes, so the seed is the same in every locale
    digest = hashlib.sha256(f"{seed}\0{target}\0{case}".encode("utf-8", "surrogateescape")
                            ).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


ROLES = ("double", "working", "widened")


class InputMaker:
    """Makes a case's arguments once, then hands out fresh clones per role."""

    def __init__(self, case: Case, bound: Bound, info: Target, seed: int,
                 device: str) -> None:
        self.case = case
        self.bound = bound
        self.info = info
        self.seed = seed
        self.device = device
        self._cache: dict[str, Args] = {}
        self.constants: dict[str, str] = {}
        """Inputs held as they are in every role: a factory's frozen tensor that cannot become
        float64 (a quantized weight kept in bfloat16), by name, with what it is."""
        self.groups: tuple[int | None, ...] = ()
        """Per argument, the length of an op's tensor list spread into inputs, else None."""

    def args(self, role: str = "double") -> Args:
        """Fresh copies (new leaves) of the case's arguments for ``role`` (see ``ROLES``)."""
        if role not in self._cache:
            self._cache[role] = self._make(role)
        return self._cache[role].clone()

    def _generator(self) -> torch.Generator:
        import torch

        generator = torch.Generator()
        generator.manual_seed(self.seed)
        return generator

    def _make(self, role: str) -> Args:
        if role == "widened":
            return _converted(self.args("working"), double=True)
        if self.case.factory:
            if role == "double":
                return self._from_factory()
            return _converted(self.args("double"), double=False, working=self.case.dtype)
        generator = self._generator()
        values = [self._value(arg, role, generator) for arg in self.bound.args]
        diff = [(isinstance(arg, TensorArg) and arg.differentiable)
                or (isinstance(arg, Default) and _is_parameter(arg.value)
                    and convert.inexact(values[i])) for i, arg in enumerate(self.bound.args)]
        items = [[isinstance(i, TensorArg) and i.differentiable for i in arg.items]
                 if isinstance(arg, SeqArg) else None for arg in self.bound.args]
        return self._spread(Args(list(self.bound.names), values, diff), items)

    def _spread(self, args: Args, items: Sequence[list[bool] | None]) -> Args:
        """An op's ``Tensor[]`` arguments spread into one input per tensor, ``xs[0]``, ...
        (``op_calls.tensor_lists``, kept in ``groups``); ``items``: per argument, whether each
        of its elements is differentiable, when the spec says (else: floating ones are)."""
        self.groups = tensor_lists(self.info, args.names, args.values)
        if all(g is None for g in self.groups):
            return args
        names: list[str] = []
        values: list[Any] = []
        diff: list[bool] = []
        for k, (name, value, differentiable) in enumerate(zip(args.names, args.values,
                                                              args.differentiable)):
            if self.groups[k] is None:
                names.append(name)
                values.append(value)
                diff.append(differentiable)
                continue
            names += [f"{name}[{i}]" for i in range(len(value))]
            values += list(value)
            given = items[k] if k < len(items) else None
            diff += given if given is not None else [convert.inexact(v) for v in value]
        return Args(names, values, diff)

    def _value(self, arg: Any, role: str, generator: torch.Generator) -> Any:
        if isinstance(arg, Default) and _is_parameter(arg.value):
            return self._parameter(arg.value.name, role)
        if isinstance(arg, Default):
            return arg.value
        if isinstance(arg, ValueArg):
            return self.case.dims[arg.dim] if arg.dim else arg.value
        if isinstance(arg, SeqArg):
            items = [self._value(item, role, generator) for item in arg.items]
            return tuple(items) if arg.kind == "tuple" else items
        return self._tensor(arg, role, generator)

    def _tensor(self, arg: TensorArg, role: str, generator: torch.Generator) -> torch.Tensor:
        import torch

        dtype = getattr(torch, arg.dtype)
        if any(isinstance(v, str) for v in arg.params.values()):  # randint bounds named by a dim
            arg = replace(arg, params={k: self.case.dims[v] if isinstance(v, str) else v
                                       for k, v in arg.params.items()})
        base = _generate(arg, resolve_shape(arg, self.case.dims), generator)
        # The working dtype's values, widened for gradient checks: both roles hold one point.
        value = base.to(dtype)
        if role == "double" and arg.dtype in FLOATING:
            value = value.to(torch.float64)
        elif role == "double" and arg.dtype in COMPLEX:
            value = value.to(torch.complex128)
        return value.to(arg.device or self.device)

    def _parameter(self, name: str, role: str) -> torch.Tensor:
        """A module target's parameter: the built module's value, in float64 for the
        ``double`` role and in its own dtype for ``working``."""
        import torch


        value = module_parameter(self.info, name).clone()
        if role == "double" and convert.inexact(value):
            value = value.to(torch.complex128 if value.is_complex() else torch.float64)
        return value.to(self.device)

    def _from_factory(self) -> Args:
        """The factory's arguments in double precision: called once, with ``dtype`` float64
        (complex128 for a complex case) when it takes one; the working role rounds them."""
        import torch


        factory_name = self.case.factory or ""
        try:
            factory = resolve_object(factory_name)
        except InputError as exc:
            raise InputError(f"factory {factory_name!r}: {exc.message}", code="GV006",
                             where=self.info.target) from None
        wanted = torch.complex128 if self.case.dtype in COMPLEX else torch.float64
        offered = {"generator": self._generator(), "dtype": wanted,
                   "device": torch.device(self.device), "dims": dict(self.case.dims)}
        try:
            params = inspect.signature(factory).parameters
            takes_all = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values())
            kwargs = {k: v for k, v in offered.items() if takes_all or k in params}
        except (TypeError, ValueError):
            kwargs = {}
        try:
            result = factory(**kwargs)
        except Exception as exc:  # noqa: BLE001 -- user code
            raise InputError(f"factory {factory_name} raised {type(exc).__name__}: {exc}",
                             code="GV006", where=self.info.target) from None
        values = self._factory_values(result)
        shown = names_for(self.info, len(values))
        self.constants = convert.constants(values, shown, wanted)
        if "dtype" in kwargs:
            convert.require_double(values, shown, factory_name, wanted, self.info.target,
                            set(self.constants))
        diff = [isinstance(v, torch.Tensor) and v.requires_grad for v in values]
        if not any(diff):
            # Users forget requires_grad; treat every floating tensor as differentiable then
            # (but a constant: it cannot become float64).
            diff = [isinstance(v, torch.Tensor) and (v.is_floating_point() or v.is_complex())
                    and name not in self.constants for name, v in zip(shown, values)]
        if "device" not in kwargs:  # its tensors are moved to the case's device
            values = self._moved(values, shown, factory_name)
        values = [fresh_leaf(v, False) if isinstance(v, torch.Tensor) else v for v in values]
        for name in self.info.parameters:  # a module's parameters follow forward's arguments
            shown.append(name)
            values.append(self._parameter(name, "double"))
            diff.append(convert.inexact(values[-1]))
        # A factory that ignores dtype gets its floating tensors converted, as YAML inputs are.
        return _converted(self._spread(Args(shown, values, diff), ()), double=True)

    def _moved(self, values: list[Any], shown: list[str], factory: str) -> list[Any]:
        """A factory's tensors on the case's device; one whose class keeps it where it is
        (a ``to`` that hands back the tensor) is a spec error naming it."""
        import torch

        wanted = torch.device(self.device)

        def there(t: torch.Tensor) -> bool:
            return (t.device.type == wanted.type and None in (wanted.index, t.device.index)) \
                or t.device == wanted

        # one already there is left alone: a class's `to` may do more than move (dequantize)
        moved = [v.to(wanted) if isinstance(v, torch.Tensor) and not there(v) else v
                 for v in values]
        for name, value in zip(shown, moved):
            if isinstance(value, torch.Tensor) and not there(value):
                raise InputError(
                    f"factory {factory}: its tensor {name!r} stays on {value.device} when "
                    f"moved to {self.device} (its class's `to` keeps it); make the factory take "
                    f"`device` and build it there", code="GV006", where=self.info.target)
        return moved

    def _factory_values(self, result: Any) -> list[Any]:
        names = [p.name for p in self.info.positional]
        factory = self.case.factory
        if isinstance(result, Mapping):
            unknown = [k for k in result if k not in names]
            if unknown:
                raise InputError(f"factory {factory} returned argument {unknown[0]!r}, "
                                 f"which forward does not take{did_you_mean(unknown[0], names)}",
                                 code="GV006", where=self.info.target)
            last = max(names.index(k) for k in result) if result else -1
            values = []
            for p in self.info.positional[: last + 1]:
                if p.name in result:
                    values.append(result[p.name])
                elif p.default is not MISSING:
                    values.append(p.default)
                else:
                    raise InputError(f"factory {factory} did not return {p.name!r}",
                                     code="GV006", where=self.info.target)
            return values
        if isinstance(result, (tuple, list)):
            return list(result)
        raise InputError(f"factory {factory} returned {type(result).__name__}; "
                         "expected a tuple/list of forward's arguments or a dict by name",
                         code="GV006", where=self.info.target)


def _is_parameter(value: Any) -> bool:
    return isinstance(value, ModuleParameter)



def _generate(arg: TensorArg, shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    import torch

    if arg.values is not None:
        base_dtype = torch.complex128 if arg.dtype in COMPLEX else torch.float64
        if arg.dtype not in FLOATING | COMPLEX:
            base_dtype = getattr(torch, arg.dtype)
        return torch.tensor(_lists(arg.values), dtype=base_dtype)
    init = arg.resolved_init
    params = {**INITS[init], **arg.params}
    real = torch.float64
    if init == "randn":
        dtype = torch.complex128 if arg.dtype in COMPLEX else real
        out = torch.randn(shape, generator=generator, dtype=dtype)
    elif init == "rand":
        out = torch.rand(shape, generator=generator, dtype=real)
    elif init == "uniform":
        unit = torch.rand(shape, generator=generator, dtype=real)
        low, high = float(params["low"]), float(params["high"])
        out = low + (high - low) * unit
    elif init == "normal":
        out = float(params["mean"]) + float(params["std"]) * torch.randn(
            shape, generator=generator, dtype=real)
    elif init == "positive":
        out = 0.5 + 1.5 * torch.rand(shape, generator=generator, dtype=real)
    elif init == "randint":
        out = torch.randint(int(params["low"]), int(params["high"]), shape, generator=generator)
    elif init == "bernoulli":
        out = torch.bernoulli(torch.full(shape, float(params["p"]), dtype=real),
                              generator=generator)
    elif init == "zeros":
        out = torch.zeros(shape, dtype=real)
    elif init == "ones":
        out = torch.ones(shape, dtype=real)
    elif init == "arange":
        out = torch.arange(math.prod(shape), dtype=real).reshape(shape)
    elif init == "eye":
        out = torch.eye(shape[-2], shape[-1], dtype=real).expand(shape).clone()
    elif init == "randperm":
        if not shape:
            out = torch.zeros((), dtype=torch.int64)
        else:
            out = torch.argsort(torch.rand(shape, generator=generator), dim=-1)
    elif init == "spd":
        n = shape[-1]
        a = torch.randn(shape, generator=generator, dtype=real)
        out = a @ a.transpose(-1, -2) + n * torch.eye(n, dtype=real)
    else:  # pragma: no cover -- the spec validator allows only INITS
        raise ValueError(init)
    if arg.sorted and out.dim() > 0:
        out = out.sort(dim=-1).values if not out.is_complex() else out
    return out


def _lists(values: Any) -> Any:
    return [_lists(v) for v in values] if isinstance(values, tuple) else values


def _converted(args: Args, *, double: bool, working: str = "float32") -> Args:
    """``args`` with their tensors converted (``convert.converted``)."""
    return Args(list(args.names), convert.converted(args.values, double=double, working=working),
                list(args.differentiable))
