"""Spec files (YAML, version 1) into frozen dataclasses, validated before anything runs.

Never imports torch: dtype and init names are checked against tables here, so that spec
validation stays fast. Errors are ``SpecError`` with ``file:line`` and the key path.
"""
from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from gradverify.errors import SpecError, did_you_mean, one_of
from gradverify.yamlio import LDict, LList, load_documents

# Canonical dtype names, and the aliases torch also accepts.
DTYPES: dict[str, str] = {
    name: name
    for name in (
        "float16", "bfloat16", "float32", "float64", "complex64", "complex128",
        "uint8", "int8", "int16", "int32", "int64", "bool", "uint16", "uint32", "uint64",
    )
}
DTYPES.update(half="float16", float="float32", double="float64", cfloat="complex64",
              cdouble="complex128", short="int16", int="int32", long="int64")
FLOATING = {"float16", "bfloat16", "float32", "float64"}
COMPLEX = {"complex64", "complex128"}

# init -> the keys it takes, with their defaults.
INITS: dict[str, dict[str, float]] = {
    "randn": {},
    "rand": {},
    "uniform": {"low": -1.0, "high": 1.0},
    "normal": {"mean": 0.0, "std": 1.0},
    "positive": {},
    "randint": {"low": 0, "high": 10},
    "bernoulli": {"p": 0.5},
    "zeros": {},
    "ones": {},
    "arange": {},
    "eye": {},
    "randperm": {},
    "spd": {},
}
FLOAT_ONLY_INITS = {"randn", "rand", "uniform", "normal", "positive", "spd"}
INIT_PARAMS = ("low", "high", "mean", "std", "p")
TENSOR_KEYS = ("shape", "values", "dtype", "requires_grad", "init", "sorted", "device") + INIT_PARAMS
TOLERANCE_KEYS = ("atol", "rtol", "eps", "nondet_tol")
SPEC_KEYS = ("version", "target", "reference", "dims", "tolerance", "checks", "expect", "cases")
CASE_KEYS = ("name", "args", "factory", "dims", "dtype", "tolerance", "checks", "expect")
_TARGET_RE = re.compile(r"^[\w./\\-]+(\.py)?:[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*$")
_DEVICE_RE = re.compile(r"^(cpu|cuda|mps|xpu|meta)(:\d+)?$")
_DIM_RE = re.compile(r"^[A-Za-z_]\w*$")
MAX_SWEEP = 256


# ----------------------------------------------------------------------------- model


@dataclass(frozen=True)
class Tolerance:
    """Gradient-check tolerances; ``None`` means "not set here" (an outer level decides)."""

    atol: float | None = None
    rtol: float | None = None
    eps: float | None = None
    nondet_tol: float | None = None

    def over(self, base: Tolerance) -> Tolerance:
        """This level's values where set, else ``base``'s."""
        return Tolerance(*(mine if mine is not None else theirs
                           for mine, theirs in zip(self.astuple(), base.astuple())))

    def astuple(self) -> tuple[float | None, ...]:
        return (self.atol, self.rtol, self.eps, self.nondet_tol)


DEFAULT_TOLERANCE = Tolerance(atol=1e-5, rtol=1e-3, eps=1e-6, nondet_tol=0.0)


@dataclass(frozen=True)
class TensorArg:
    """A tensor argument, made by ``inputs.py`` from a seeded generator."""

    shape: tuple[int | str, ...] | None = None
    """Sizes, or names from ``dims``; None when ``values`` is given."""
    values: Any = None
    """Nested tuples of numbers, when given literally."""
    dtype: str = "float32"
    """The working dtype; gradient checks use float64/complex128 copies."""
    requires_grad: bool | None = None
    """None: true for floating and complex dtypes."""
    init: str | None = None
    params: Mapping[str, float] = field(default_factory=dict)
    sorted: bool = False
    device: str | None = None

    @property
    def differentiable(self) -> bool:
        floating = self.dtype in FLOATING or self.dtype in COMPLEX
        return floating if self.requires_grad is None else self.requires_grad

    @property
    def resolved_init(self) -> str:
        if self.init:
            return self.init
        if self.dtype == "bool":
            return "bernoulli"
        if self.dtype in FLOATING or self.dtype in COMPLEX:
            return "randn"
        return "randint"


@dataclass(frozen=True)
class ValueArg:
    """A plain Python value: None, a number, a string or a boolean."""

    value: Any


@dataclass(frozen=True)
class SeqArg:
    """``{tuple: [...]}`` or ``{list: [...]}``."""

    kind: str
    items: tuple[Arg, ...]


Arg = Union[TensorArg, ValueArg, SeqArg]


@dataclass(frozen=True)
class CheckSetting:
    enabled: bool
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Case:
    name: str
    """Unique in its spec; with a dims sweep, ``basic[N=4]``."""
    args: tuple[tuple[str | None, Arg], ...] = ()
    """Arguments in order; the name is forward's parameter name when given by name."""
    by_name: bool = False
    factory: str | None = None
    dims: Mapping[str, int] = field(default_factory=dict)
    dtype: str = "float32"
    """Working dtype of a factory case."""
    tolerance: Tolerance = Tolerance()
    checks: Mapping[str, CheckSetting] = field(default_factory=dict)
    expect: Mapping[str, str] = field(default_factory=dict)
    line: int | None = None


@dataclass(frozen=True)
class Spec:
    target: str | None
    cases: tuple[Case, ...]
    path: str | None = None
    line: int | None = None
    reference: str | None = None
    tolerance: Tolerance = Tolerance()
    checks: Mapping[str, CheckSetting] = field(default_factory=dict)
    expect: Mapping[str, str] = field(default_factory=dict)
    inferred: bool = False
    """Built from forward's signature because no spec file names the target."""

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}" if self.path and self.line else (self.path or "<spec>")


# ----------------------------------------------------------------------------- loading


def load_file(path: str | Path) -> list[Spec]:
    """All specs of one YAML file (a ``---`` stream may hold several)."""
    path = Path(path)
    shown = _display(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SpecError(f"cannot read spec file: {exc.strerror or exc}", file=shown, line=None,
                        code="GV001") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise SpecError(f"not valid UTF-8 (byte 0x{raw[exc.start]:02x}); save the spec as UTF-8",
                        file=shown, line=line, code="GV001") from None
    return load_text(text, shown)


def load_text(text: str, file: str | None = None) -> list[Spec]:
    documents = [(doc, line) for doc, line in load_documents(text, file) if doc is not None]
    if not documents:
        raise SpecError("empty spec file: expected a mapping with 'target' and 'cases' "
                        "(run `gradverify init mod:Class` for a skeleton)",
                        file=file, line=None, code="GV001")
    return [_Validator(file).spec(doc, line) for doc, line in documents]


def from_dict(data: Mapping[str, Any], *, file: str | None = None) -> Spec:
    """Validate a spec given as a Python mapping (the same keys as the YAML format)."""
    return _Validator(file).spec(data, None)


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def is_target_string(text: str) -> bool:
    return bool(_TARGET_RE.match(text))


# ----------------------------------------------------------------------------- validation


class _Validator:
    def __init__(self, file: str | None) -> None:
        self.file = file

    # -- helpers

    def fail(self, message: str, line: int | None, key: str | None) -> SpecError:
        return SpecError(message, file=self.file, line=line, key=key or None)

    @staticmethod
    def line_of(container: Any, key: Any, default: int | None) -> int | None:
        if isinstance(container, LDict):
            return container.key_lines.get(key, container.line) or default
        if isinstance(container, LList) and isinstance(key, int) and key < len(container.item_lines):
            return container.item_lines[key]
        return getattr(container, "line", None) or default

    def mapping(self, value: Any, line: int | None, key: str, what: str) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(f"expected {what} (a mapping), got {_kind(value)}", line, key)
        for k in value:
            if not isinstance(k, str):
                raise self.fail(f"keys must be strings, got {k!r}", self.line_of(value, k, line), key)
        return value

    def known_keys(self, value: Mapping[str, Any], allowed: Sequence[str], line: int | None,
                   key: str) -> None:
        for k in value:
            if k not in allowed:
                raise self.fail(f"unknown key {k!r}{did_you_mean(k, allowed)}; allowed keys: "
                                f"{', '.join(allowed)}", self.line_of(value, k, line), _join(key, k))

    def number(self, value: Any, line: int | None, key: str, *, minimum: float | None = None,
               positive: bool = False, integer: bool = False) -> Any:
        kinds = (int,) if integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds):
            want = "an integer" if integer else "a number"
            raise self.fail(f"expected {want}, got {_kind(value)}", line, key)
        if value != value or value in (float("inf"), float("-inf")):
            raise self.fail(f"expected a finite number, got {value}", line, key)
        if positive and value <= 0:
            raise self.fail(f"must be > 0, got {value}", line, key)
        if minimum is not None and value < minimum:
            raise self.fail(f"must be >= {minimum}, got {value}", line, key)
        return value

    def string(self, value: Any, line: int | None, key: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail(f"expected a non-empty string, got {_kind(value)}", line, key)
        return value

    def reference(self, value: Any, line: int | None, key: str) -> str:
        text = self.string(value, line, key)
        if not is_target_string(text):
            raise self.fail(f"expected 'package.module:Name' or 'path/to/file.py:Name', got {text!r}",
                            line, key)
        return text

    # -- the spec

    def spec(self, doc: Any, doc_line: int | None) -> Spec:
        data = self.mapping(doc, doc_line, "", "a spec")
        line = getattr(data, "line", None) or doc_line
        self.known_keys(data, SPEC_KEYS, line, "")
        at = lambda k: self.line_of(data, k, line)  # noqa: E731
        if "version" in data and data["version"] != 1:
            raise self.fail(f"unsupported spec version {data['version']!r}; this gradverify reads "
                            "version 1", at("version"), "version")
        target = self.reference(data["target"], at("target"), "target") if "target" in data else None
        reference = (self.reference(data["reference"], at("reference"), "reference")
                     if "reference" in data else None)
        dims = self.dims(data.get("dims", {}), at("dims"), "dims")
        tolerance = self.tolerance(data.get("tolerance", {}), at("tolerance"), "tolerance")
        checks = self.checks(data.get("checks", {}), at("checks"), "checks")
        expect = self.expect(data.get("expect", {}), at("expect"), "expect")
        if "cases" not in data:
            raise self.fail("missing key 'cases': a list of cases, each with 'args' or 'factory'",
                            line, "cases")
        raw_cases = data["cases"]
        if not isinstance(raw_cases, list) or not raw_cases:
            raise self.fail(f"expected a non-empty list of cases, got {_kind(raw_cases)}",
                            at("cases"), "cases")
        cases: list[Case] = []
        seen: dict[str, str] = {}
        for index, raw in enumerate(raw_cases):
            key = f"cases[{index}]"
            for case in self.case(raw, self.line_of(raw_cases, index, line), key, index, dims):
                if case.name in seen:
                    raise self.fail(f"duplicate case name {case.name!r} (also {seen[case.name]})",
                                    case.line, f"{key}.name")
                seen[case.name] = key
                cases.append(case)
        return Spec(target=target, cases=tuple(cases), path=self.file, line=line,
                    reference=reference, tolerance=tolerance, checks=checks, expect=expect)

    def dims(self, value: Any, line: int | None, key: str) -> dict[str, tuple[int, ...]]:
        data = self.mapping(value, line, key, "named sizes like {N: [1, 4], D: 3}")
        dims: dict[str, tuple[int, ...]] = {}
        for name, raw in data.items():
            at = self.line_of(data, name, line)
            if not _DIM_RE.match(name):
                raise self.fail("a dim name must be an identifier like N or batch", at,
                                _join(key, name))
            sizes = raw if isinstance(raw, list) else [raw]
            if not sizes:
                raise self.fail("a sweep needs at least one size", at, _join(key, name))
            dims[name] = tuple(self.number(s, at, _join(key, name), minimum=0, integer=True)
                               for s in sizes)
        return dims

    def tolerance(self, value: Any, line: int | None, key: str) -> Tolerance:
        data = self.mapping(value, line, key, "tolerances like {atol: 1.0e-5, rtol: 1.0e-3}")
        self.known_keys(data, TOLERANCE_KEYS, line, key)
        values = {k: float(self.number(v, self.line_of(data, k, line), _join(key, k), minimum=0,
                                       positive=(k == "eps")))
                  for k, v in data.items()}
        return Tolerance(**values)

    def checks(self, value: Any, line: int | None, key: str) -> dict[str, CheckSetting]:
        from gradverify.checks import REGISTRY, unknown_check

        data = self.mapping(value, line, key, "check switches like {gradgradcheck: false}")
        result: dict[str, CheckSetting] = {}
        for name, raw in data.items():
            at = self.line_of(data, name, line)
            if unknown_check(name):
                raise self.fail(unknown_check(name), at, _join(key, name))
            if isinstance(raw, bool):
                result[name] = CheckSetting(enabled=raw)
                continue
            if raw is None:
                raw = {}
            options = self.mapping(raw, at, _join(key, name), "true, false or a mapping of options")
            allowed = {o.name: o for o in REGISTRY[name].options}
            parsed: dict[str, Any] = {}
            enabled = True
            for opt, opt_value in options.items():
                opt_at = self.line_of(options, opt, at)
                opt_key = _join(key, name, opt)
                if opt == "enabled":
                    if not isinstance(opt_value, bool):
                        raise self.fail("expected true or false", opt_at, opt_key)
                    enabled = opt_value
                    continue
                if opt not in allowed:
                    names = sorted(allowed) + ["enabled"]
                    raise self.fail(f"unknown option {opt!r} for check {name!r}"
                                    f"{did_you_mean(opt, names)}; {one_of(names)}", opt_at, opt_key)
                parsed[opt] = self.option(allowed[opt], opt_value, opt_at, opt_key)
            result[name] = CheckSetting(enabled=enabled, options=parsed)
        return result

    def option(self, option: Any, value: Any, line: int | None, key: str) -> Any:
        if option.choices is not None and value not in option.choices:
            raise self.fail(f"invalid value {value!r}{did_you_mean(value, map(str, option.choices))}; "
                            f"{one_of(map(str, option.choices))}", line, key)
        if option.kind is bool and not isinstance(value, bool):
            raise self.fail("expected true or false", line, key)
        if option.kind in (int, float):
            return self.number(value, line, key, integer=option.kind is int)
        if option.kind is str and option.choices is None:
            return self.string(value, line, key)
        return value

    def expect(self, value: Any, line: int | None, key: str) -> dict[str, str]:
        from gradverify.checks import unknown_check

        data = self.mapping(value, line, key, "expected failures like {gradcheck: \"reason\"}")
        result = {}
        for name, reason in data.items():
            at = self.line_of(data, name, line)
            if unknown_check(name):
                raise self.fail(unknown_check(name), at, _join(key, name))
            result[name] = self.string(reason, at, _join(key, name)).strip()
        return result

    # -- cases

    def case(self, raw: Any, line: int | None, key: str, index: int,
             spec_dims: dict[str, tuple[int, ...]]) -> list[Case]:
        data = self.mapping(raw, line, key, "a case with 'args' or 'factory'")
        line = getattr(data, "line", None) or line
        self.known_keys(data, CASE_KEYS, line, key)
        at = lambda k: self.line_of(data, k, line)  # noqa: E731
        name = self.string(data["name"], at("name"), f"{key}.name").strip() if "name" in data \
            else f"case{index}"
        if "args" in data and "factory" in data:
            raise self.fail("give either 'args' or 'factory', not both", line, key)
        if "args" not in data and "factory" not in data:
            raise self.fail("missing 'args' (forward's arguments) or 'factory' (a callable that "
                            "makes them)", line, key)
        dims = dict(spec_dims)
        dims.update(self.dims(data.get("dims", {}), at("dims"), f"{key}.dims"))
        dtype = self.dtype(data["dtype"], at("dtype"), f"{key}.dtype") if "dtype" in data \
            else "float32"
        common = dict(
            factory=None, dtype=dtype, line=line,
            tolerance=self.tolerance(data.get("tolerance", {}), at("tolerance"), f"{key}.tolerance"),
            checks=self.checks(data.get("checks", {}), at("checks"), f"{key}.checks"),
            expect=self.expect(data.get("expect", {}), at("expect"), f"{key}.expect"),
        )
        if "factory" in data:
            common["factory"] = self.reference(data["factory"], at("factory"), f"{key}.factory")
            args: tuple[tuple[str | None, Arg], ...] = ()
            by_name = False
            used = list(dims)
        else:
            args, by_name = self.args(data["args"], at("args"), f"{key}.args", dims)
            used = _dims_used(args)
        swept = [d for d in dims if d in used and len(dims[d]) > 1]
        fixed = {d: sizes[0] for d, sizes in dims.items()}
        combos = list(itertools.product(*(dims[d] for d in swept)))
        if len(combos) > MAX_SWEEP:
            raise self.fail(f"the dims sweep makes {len(combos)} cases (at most {MAX_SWEEP})",
                            at("dims") or line, f"{key}.dims")
        cases = []
        for combo in combos:
            values = dict(fixed, **dict(zip(swept, combo)))
            label = ",".join(f"{d}={v}" for d, v in zip(swept, combo))
            cases.append(Case(name=f"{name}[{label}]" if label else name, args=args,
                              by_name=by_name, dims=values, **common))
        return cases

    def dtype(self, value: Any, line: int | None, key: str) -> str:
        if not isinstance(value, str) or value.removeprefix("torch.") not in DTYPES:
            shown = value if isinstance(value, str) else _kind(value)
            raise self.fail(f"unknown dtype {shown!r}{did_you_mean(str(value), DTYPES)}; "
                            f"{one_of(sorted(set(DTYPES.values())))}", line, key)
        return DTYPES[value.removeprefix("torch.")]

    def args(self, value: Any, line: int | None, key: str, dims: Mapping[str, tuple[int, ...]]
             ) -> tuple[tuple[tuple[str | None, Arg], ...], bool]:
        if isinstance(value, Mapping):
            data = self.mapping(value, line, key, "arguments")
            return tuple((name, self.arg(v, self.line_of(data, name, line), _join(key, name), dims))
                         for name, v in data.items()), True
        if isinstance(value, list):
            return tuple((None, self.arg(v, self.line_of(value, i, line), f"{key}[{i}]", dims))
                         for i, v in enumerate(value)), False
        if value is None:
            return (), False
        raise self.fail(f"expected forward's arguments as a mapping by parameter name or a list "
                        f"in order, got {_kind(value)}", line, key)

    def arg(self, value: Any, line: int | None, key: str, dims: Mapping[str, tuple[int, ...]]) -> Arg:
        if value is None or isinstance(value, (bool, int, float, str)):
            return ValueArg(value)
        if isinstance(value, list):
            raise self.fail("a YAML list is ambiguous here: write {tuple: [...]} or {list: [...]} "
                            "for a Python sequence, or {values: [...]} for a tensor", line, key)
        if not isinstance(value, Mapping):
            raise self.fail(f"unsupported argument {_kind(value)}", line, key)
        line = getattr(value, "line", None) or line
        if set(value) in ({"tuple"}, {"list"}):
            (kind, items), = value.items()
            if not isinstance(items, list):
                raise self.fail(f"expected a list after {kind}:, got {_kind(items)}", line,
                                _join(key, kind))
            return SeqArg(kind, tuple(self.arg(v, self.line_of(items, i, line), f"{key}.{kind}[{i}]",
                                               dims) for i, v in enumerate(items)))
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
        init = None
        if "init" in data:
            if values is not None:
                raise self.fail("'init' applies to 'shape' tensors, not to literal 'values'",
                                at("init"), f"{key}.init")
            init = data["init"]
            if init not in INITS:
                raise self.fail(f"unknown init {init!r}{did_you_mean(str(init), INITS)}; "
                                f"{one_of(INITS)}", at("init"), f"{key}.init")
            if init in FLOAT_ONLY_INITS and dtype not in FLOATING | COMPLEX:
                raise self.fail(f"init {init!r} makes floating-point values, but dtype is "
                                f"{dtype}; use randint, bernoulli, arange, randperm, zeros or ones",
                                at("init"), f"{key}.init")
        resolved = init or ("randint" if dtype not in FLOATING | COMPLEX | {"bool"} else None)
        params: dict[str, float] = {}
        for name in INIT_PARAMS:
            if name not in data:
                continue
            takes = INITS.get(resolved or "", {})
            if name not in takes:
                users = [i for i, p in INITS.items() if name in p]
                raise self.fail(f"{name!r} applies only to init: {' or '.join(users)}", at(name),
                                _join(key, name))
            params[name] = self.number(data[name], at(name), _join(key, name),
                                       integer=resolved == "randint")
        if resolved in ("uniform", "randint"):
            low = params.get("low", INITS[resolved]["low"])
            high = params.get("high", INITS[resolved]["high"])
            if high <= low:
                raise self.fail(f"'high' ({high}) must be greater than 'low' ({low})",
                                at("high") or line, _join(key, "high"))
        if "std" in params and params["std"] <= 0:
            raise self.fail("'std' must be > 0", at("std"), _join(key, "std"))
        if "p" in params and not 0 <= params["p"] <= 1:
            raise self.fail("'p' must be between 0 and 1", at("p"), _join(key, "p"))
        if shape is not None and init in ("eye", "spd"):
            concrete = [dims[s][0] if isinstance(s, str) else s for s in shape]
            if len(shape) < 2 or (init == "spd" and concrete[-1] != concrete[-2]):
                raise self.fail(f"init {init!r} needs a shape of at least 2 dims"
                                + (" whose last two are equal" if init == "spd" else ""),
                                at("init"), f"{key}.init")
        requires_grad = None
        if "requires_grad" in data:
            requires_grad = data["requires_grad"]
            if not isinstance(requires_grad, bool):
                raise self.fail("expected true or false", at("requires_grad"),
                                f"{key}.requires_grad")
            if requires_grad and dtype not in FLOATING | COMPLEX:
                raise self.fail(f"only floating-point and complex tensors can require grad, and "
                                f"dtype is {dtype}", at("requires_grad"), f"{key}.requires_grad")
        sort = data.get("sorted", False)
        if not isinstance(sort, bool):
            raise self.fail("expected true or false", at("sorted"), f"{key}.sorted")
        device = None
        if "device" in data:
            device = self.string(data["device"], at("device"), f"{key}.device")
            if not _DEVICE_RE.match(device):
                raise self.fail(f"unknown device {device!r}; expected cpu, cuda or cuda:N",
                                at("device"), f"{key}.device")
        return TensorArg(shape=shape, values=values, dtype=dtype, requires_grad=requires_grad,
                         init=init, params=params, sorted=sort, device=device)

    def shape(self, value: Any, line: int | None, key: str, dims: Mapping[str, tuple[int, ...]]
              ) -> tuple[int | str, ...]:
        if not isinstance(value, list):
            raise self.fail(f"expected a list of sizes like [N, 3], got {_kind(value)}", line, key)
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
                shape.append(self.number(size, at, f"{key}[{i}]", minimum=0, integer=True))
        return tuple(shape)

    def values(self, value: Any, line: int | None, key: str) -> Any:
        def walk(v: Any, path: str) -> tuple[Any, tuple[int, ...]]:
            if isinstance(v, list):
                items = [walk(x, f"{path}[{i}]") for i, x in enumerate(v)]
                shapes = {s for _, s in items}
                if len(shapes) > 1:
                    raise self.fail("ragged nested list: every row must have the same length",
                                    line, path)
                inner = shapes.pop() if shapes else ()
                return tuple(x for x, _ in items), (len(items), *inner)
            if isinstance(v, (bool, int, float)):
                return v, ()
            raise self.fail(f"tensor values must be numbers or booleans, got {_kind(v)}", line,
                            path)

        return walk(value, key)[0]


def _dims_used(args: Sequence[tuple[str | None, Arg]]) -> list[str]:
    used: list[str] = []

    def visit(arg: Arg) -> None:
        if isinstance(arg, TensorArg) and arg.shape:
            used.extend(s for s in arg.shape if isinstance(s, str) and s not in used)
        elif isinstance(arg, SeqArg):
            for item in arg.items:
                visit(item)

    for _, arg in args:
        visit(arg)
    return used


def _join(*parts: str) -> str:
    return ".".join(p for p in parts if p)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, (int, float)):
        return f"a number ({value})"
    if isinstance(value, str):
        return f"a string ({value!r})" if len(value) < 40 else "a string"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__
