"""A case's arguments in a spec (``args:``): tensors with their shape, dtype and init, literal
values, sequences and dims, validated key by key into ``specmodel`` values. Never imports
torch."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from gradverify.errors import did_you_mean, one_of
from gradverify.spec.settings import SettingsReader
from gradverify.spec.yamlio import join_key, kind_of
from gradverify.specmodel import (
    COMPLEX,
    DEVICE_RE,
    DTYPES,
    FLOAT_ONLY_INITS,
    FLOATING,
    INIT_PARAMS,
    INITS,
    MAX_ELEMENTS,
    MAX_RANK,
    MAX_SIZE,
    TENSOR_KEYS,
    Arg,
    SeqArg,
    TensorArg,
    ValueArg,
)


class ArgsReader(SettingsReader):
    """``SettingsReader`` with the arguments of a case."""

    def dtype(self, value: Any, line: int | None, key: str) -> str:
        if not isinstance(value, str) or value.removeprefix("torch.") not in DTYPES:
            shown = value if isinstance(value, str) else kind_of(value)
            raise self.fail(f"unknown dtype {shown!r}{did_you_mean(str(value), DTYPES)}; "
                            f"{one_of(sorted(set(DTYPES.values())))}", line, key)
        return DTYPES[value.removeprefix("torch.")]

    def args(self, value: Any, line: int | None, key: str, dims: Mapping[str, tuple[int, ...]]
             ) -> tuple[tuple[tuple[str | None, Arg], ...], bool]:
        if isinstance(value, Mapping):
            data = self.mapping(value, line, key, "arguments")
            return tuple((name, self.named_arg(v, self.line_of(data, name, line),
                                               join_key(key, name), dims))
                         for name, v in data.items()), True
        if isinstance(value, list):
            return tuple((None, self.arg(v, self.line_of(value, i, line), f"{key}[{i}]", dims))
                         for i, v in enumerate(value)), False
        if value is None:
            return (), False
        raise self.fail(f"expected forward's arguments as a mapping by parameter name or a list "
                        f"in order, got {kind_of(value)}", line, key)

    def named_arg(self, value: Any, line: int | None, key: str,
                  dims: Mapping[str, tuple[int, ...]]) -> Arg:
        """An argument given by parameter name: a bare YAML list is allowed here, for a
        ``*xs`` parameter (binding rejects it for any other parameter)."""
        if isinstance(value, list):
            return SeqArg("star", tuple(self.arg(v, self.line_of(value, i, line), f"{key}[{i}]",
                                                 dims) for i, v in enumerate(value)), line=line)
        return self.arg(value, line, key, dims)

    def arg(self, value: Any, line: int | None, key: str,
            dims: Mapping[str, tuple[int, ...]]) -> Arg:
        if isinstance(value, str) and value in dims:
            return ValueArg(value, dim=value, line=line)  # an int that follows the dim
        if value is None or isinstance(value, (bool, int, float, str)):
            return ValueArg(value, line=line)
        if isinstance(value, list):
            raise self.fail("a YAML list is ambiguous here: write {tuple: [...]} or {list: [...]} "
                            "for a Python sequence, or {values: [...]} for a tensor", line, key)
        if not isinstance(value, Mapping):
            raise self.fail(f"unsupported argument {kind_of(value)}", line, key)
        line = getattr(value, "line", None) or line
        if set(value) in ({"tuple"}, {"list"}):
            (kind, items), = value.items()
            if not isinstance(items, list):
                raise self.fail(f"expected a list after {kind}:, got {kind_of(items)}", line,
                                join_key(key, kind))
            return SeqArg(kind, tuple(self.arg(v, self.line_of(items, i, line),
                                               f"{key}.{kind}[{i}]", dims)
                                      for i, v in enumerate(items)))
        if "shape" in value or "values" in value:
            return self.tensor(value, line, key, dims)
        hint = did_you_mean(next(iter(value), ""), ("shape", "values", "tuple", "list"))
        raise self.fail("an argument mapping must be a tensor (with 'shape' or 'values') or "
                        f"{{tuple: [...]}} / {{list: [...]}}{hint}", line, key)

    def tensor(self, data: Mapping[str, Any], line: int | None, key: str,
               dims: Mapping[str, tuple[int, ...]]) -> TensorArg:
        self.known_keys(data, TENSOR_KEYS, line, key)
        at = lambda k: self.line_of(data, k, line)  # noqa: E731
        if "shape" in data and "values" in data:
            raise self.fail("give either 'shape' or 'values', not both", line, key)
        dtype = self.dtype(data["dtype"], at("dtype"), f"{key}.dtype") if "dtype" in data \
            else "float32"
        shape = values = None
        if "shape" in data:
            shape = self.shape(data["shape"], at("shape"), f"{key}.shape", dims)
        else:
            values = self.values(data["values"], at("values"), f"{key}.values")
        init = self.init(data, dtype, literal=values is not None, line=line, key=key)
        params = self.init_params(data, init, dtype, line, key, dims)
        if shape is not None and init in ("eye", "spd"):
            concrete = [dims[s][0] if isinstance(s, str) else s for s in shape]
            if len(shape) < 2 or (init == "spd" and concrete[-1] != concrete[-2]):
                raise self.fail(f"init {init!r} needs a shape of at least 2 dims"
                                + (" whose last two are equal" if init == "spd" else ""),
                                at("init"), f"{key}.init")
        requires_grad = None
        if "requires_grad" in data:
            requires_grad = self.boolean(data["requires_grad"], at("requires_grad"),
                                         f"{key}.requires_grad")
            if requires_grad and dtype not in FLOATING | COMPLEX:
                raise self.fail(f"only floating-point and complex tensors can require grad, and "
                                f"dtype is {dtype}", at("requires_grad"), f"{key}.requires_grad")
        sort = self.boolean(data.get("sorted", False), at("sorted"), f"{key}.sorted")
        device = None
        if "device" in data:
            device = self.string(data["device"], at("device"), f"{key}.device")
            if not DEVICE_RE.match(device):
                raise self.fail(f"unknown device {device!r}; expected cpu, cuda or cuda:N",
                                at("device"), f"{key}.device")
        return TensorArg(shape=shape, values=values, dtype=dtype, requires_grad=requires_grad,
                         init=init, params=params, sorted=sort, device=device)

    def init(self, data: Mapping[str, Any], dtype: str, *, literal: bool, line: int | None,
             key: str) -> str | None:
        """A tensor's ``init``: a known one, for a ``shape`` tensor, that makes values of its
        dtype."""
        if "init" not in data:
            return None
        at = self.line_of(data, "init", line)
        if literal:
            raise self.fail("'init' applies to 'shape' tensors, not to literal 'values'",
                            at, f"{key}.init")
        init = data["init"]
        if init not in INITS:
            raise self.fail(f"unknown init {init!r}{did_you_mean(str(init), INITS)}; "
                            f"{one_of(INITS)}", at, f"{key}.init")
        if init in FLOAT_ONLY_INITS and dtype not in FLOATING | COMPLEX:
            raise self.fail(f"init {init!r} makes floating-point values, but dtype is "
                            f"{dtype}; use randint, bernoulli, arange, randperm, zeros or ones",
                            at, f"{key}.init")
        return str(init)

    def init_params(self, data: Mapping[str, Any], init: str | None, dtype: str,
                    line: int | None, key: str, dims: Mapping[str, tuple[int, ...]]
                    ) -> dict[str, Any]:
        """The parameters of the init (given or implied by the dtype: integers are
        ``randint``): each one the init takes, in its range."""
        at = lambda k: self.line_of(data, k, line)  # noqa: E731
        resolved = init or ("randint" if dtype not in FLOATING | COMPLEX | {"bool"} else None)
        params: dict[str, Any] = {}
        for name in INIT_PARAMS:
            if name not in data:
                continue
            if name not in INITS.get(resolved or "", {}):
                users = [i for i, p in INITS.items() if name in p]
                raise self.fail(f"{name!r} applies only to init: {' or '.join(users)}", at(name),
                                join_key(key, name))
            if resolved == "randint" and isinstance(data[name], str) and name in ("low", "high"):
                if data[name] not in dims:  # an index range tied to a dim: [0, N)
                    raise self.fail(f"{name!r} names dim {data[name]!r}, which is not defined "
                                    f"here; defined dims: {', '.join(dims) or 'none'}",
                                    at(name), join_key(key, name))
                params[name] = data[name]
                continue
            params[name] = self.number(data[name], at(name), join_key(key, name),
                                       integer=resolved == "randint")
        if resolved in ("uniform", "randint"):
            sized = {k: min(dims[v]) if isinstance(v, str) else v for k, v in params.items()}
            low = sized.get("low", INITS[resolved]["low"])
            high = sized.get("high", INITS[resolved]["high"])
            if high <= low:
                raise self.fail(f"'high' ({high}) must be greater than 'low' ({low})",
                                at("high") or line, join_key(key, "high"))
        if "std" in params and params["std"] <= 0:
            raise self.fail("'std' must be > 0", at("std"), join_key(key, "std"))
        if "p" in params and not 0 <= params["p"] <= 1:
            raise self.fail("'p' must be between 0 and 1", at("p"), join_key(key, "p"))
        return params

    def shape(self, value: Any, line: int | None, key: str, dims: Mapping[str, tuple[int, ...]]
              ) -> tuple[int | str, ...]:
        if not isinstance(value, list):
            raise self.fail(f"expected a list of sizes like [N, 3], got {kind_of(value)}", line,
                            key)
        shape: list[int | str] = []
        for i, size in enumerate(value):
            at = self.line_of(value, i, line)
            if isinstance(size, str):
                if size not in dims:
                    known = f"; defined dims: {', '.join(dims)}" if dims else \
                        "; define it under 'dims:', e.g. dims: {" + size + ": 3}"
                    raise self.fail(f"unknown dim {size!r}{did_you_mean(size, dims)}{known}", at,
                                    f"{key}[{i}]")
                shape.append(size)
            else:
                shape.append(self.size(size, at, f"{key}[{i}]"))
        if len(shape) > MAX_RANK:
            raise self.fail(f"{len(shape)} dims; a tensor here has at most {MAX_RANK}", line, key)
        fixed = [n for n in shape if isinstance(n, int) and n]
        if math.prod(fixed) > MAX_ELEMENTS:
            raise self.fail(f"{math.prod(fixed):,} elements; gradient bugs show on small shapes "
                            f"(a case has at most {MAX_ELEMENTS:,})", line, key)
        return tuple(shape)

    def size(self, value: Any, line: int | None, key: str) -> int:
        size = self.number(value, line, key, minimum=0, integer=True)
        if size > MAX_SIZE:
            raise self.fail(f"size {size} is too large (at most {MAX_SIZE})", line, key)
        return int(size)

    def values(self, value: Any, line: int | None, key: str) -> Any:
        def walk(v: Any, path: str, depth: int = 0) -> tuple[Any, tuple[int, ...]]:
            if isinstance(v, list) and depth >= MAX_RANK:
                raise self.fail(f"values nested more than {MAX_RANK} deep; a tensor here has at "
                                f"most {MAX_RANK} dims", line, key)
            if isinstance(v, list):
                items = [walk(x, f"{path}[{i}]", depth + 1) for i, x in enumerate(v)]
                shapes = {s for _, s in items}
                if len(shapes) > 1:
                    raise self.fail("ragged nested list: every row must have the same length",
                                    line, path)
                inner = shapes.pop() if shapes else ()
                return tuple(x for x, _ in items), (len(items), *inner)
            if isinstance(v, (bool, int, float)):
                return v, ()
            raise self.fail(f"tensor values must be numbers or booleans, got {kind_of(v)}", line,
                            path)

        return walk(value, key)[0]


def dims_used(args: Sequence[tuple[str | None, Arg]]) -> list[str]:
    """Every dim the arguments use: in shapes, as an index range (``high: S``) or as a value
    (``num_segments: S``): a sweep applies wherever a dim is used."""
    used: list[str] = []

    def use(name: Any) -> None:
        if isinstance(name, str) and name not in used:
            used.append(name)

    def visit(arg: Arg) -> None:
        if isinstance(arg, TensorArg):
            for size in arg.shape or ():
                use(size)
            for bound in arg.params.values():
                use(bound)
        elif isinstance(arg, ValueArg):
            use(arg.dim)
        elif isinstance(arg, SeqArg):
            for item in arg.items:
                visit(item)

    for _, arg in args:
        visit(arg)
    return used
