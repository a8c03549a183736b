"""What a spec is: frozen dataclasses for specs, cases and arguments, and the tables (dtypes,
inits, keys) they are validated against. Reading and validating spec files is
``gradverify.spec.file``. Never imports torch.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gradverify.results import Location

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
TENSOR_KEYS = ("shape", "values", "dtype", "requires_grad", "init", "sorted", "device",
               *INIT_PARAMS)
TOLERANCE_KEYS = ("atol", "rtol", "eps", "nondet_tol")
SPEC_KEYS = ("version", "target", "requires_torch", "imports", "init_args", "reference", "dims",
             "device", "compose", "computes_in", "tolerance", "checks", "expect", "zero_grad",
             "cases")
COMPUTES_IN = ("float32", "float16", "bfloat16", "float64")
"""What ``computes_in:`` may say: a kernel's dtype inside, or float64 (not a low-precision
kernel: detection off)."""
CASE_KEYS = ("name", "args", "factory", "dims", "dtype", "tolerance", "checks", "expect")
SPEC_SUFFIXES = (".yaml", ".yml")
"""What a spec file's name ends with."""
NAMED_SPEC_SUFFIXES = (*SPEC_SUFFIXES, ".json")
"""What a spec file named on the command line may end with: JSON is YAML, so a spec a tool
wrote as JSON reads as it is (spec folders hold ``.yaml``/``.yml`` files only)."""
DEVICE_RE = re.compile(r"^(cpu|cuda|mps|xpu|meta)(:(0|[1-9][0-9]?|1[01][0-9]|12[0-7]))?\Z")
"""A device as torch reads one: the index in ASCII digits, no leading zero, at most 127."""
DIM_RE = re.compile(r"^[A-Za-z_]\w*\Z")
MAX_SWEEP = 256
MAX_RANK = 16
"""A tensor may have at most this many dims (deeper nesting of ``values`` is refused)."""
MAX_SIZE = 2**31 - 1
"""Largest size of one dim."""
MAX_ELEMENTS = 2**34
"""Largest product of a shape's non-zero sizes (past this, strides overflow and no machine has
the memory): refused before anything is allocated."""


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

    def resolved(self, base: Tolerance | None = None) -> ResolvedTolerance:
        """Every value: this level's where set, else ``base``'s (default: gradcheck's)."""
        full = self.over(base or DEFAULT_TOLERANCE)
        return ResolvedTolerance(*(float(v) for v in full.astuple() if v is not None))


@dataclass(frozen=True)
class ResolvedTolerance:
    """The tolerances a check runs with: every level resolved, each value set."""

    atol: float
    rtol: float
    eps: float
    nondet_tol: float


DEFAULT_TOLERANCE = Tolerance(atol=1e-5, rtol=1e-3, eps=1e-6, nondet_tol=0.0)
FLOAT32_INSIDE_TOLERANCE = Tolerance(atol=1e-3, rtol=1e-2, eps=4e-3, nondet_tol=0.0)
"""The defaults for a target that computes in float32 inside (``computes_in``): finite
differences of a float32 forward carry its round-off (a few ulps, 1e-7 of the values) divided by
``eps``; a step of 4e-3 keeps that near 1e-4, and the truncation error (eps**2/6 of the third
derivative) near 3e-6, both well inside the tolerances, while a wrong factor, sign, mask or
missing term is off by far more. Narrower dtypes inside have no finite-difference step that
works: only a ``reference:`` judges them (docs/checks.md)."""


@dataclass(frozen=True)
class TensorArg:
    """A tensor argument, made by ``gradverify.case.inputs`` from a seeded generator."""

    shape: tuple[int | str, ...] | None = None
    """Sizes, or names from ``dims``; None when ``values`` is given."""
    values: Any = None
    """Nested tuples of numbers, when given literally."""
    dtype: str = "float32"
    """The working dtype; gradient checks use float64/complex128 copies."""
    requires_grad: bool | None = None
    """None: true for floating and complex dtypes."""
    init: str | None = None
    params: Mapping[str, float | str] = field(default_factory=dict)
    """Init parameters; randint's low and high may name a dim (an index range tied to it)."""
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
    """A plain Python value: None, a number, a string or a boolean; or, when a string names a
    dim of the case (``num_segments: S``), that dim's size."""

    value: Any
    dim: str | None = None
    line: int | None = field(default=None, compare=False)
    """Where the spec gives it, for errors found when the case is bound to forward."""


@dataclass(frozen=True)
class SeqArg:
    """``{tuple: [...]}`` or ``{list: [...]}``; kind ``star`` is a bare YAML list given for a
    ``*xs`` parameter by name, spread into forward's positional arguments."""

    kind: str
    items: tuple[Arg, ...]
    line: int | None = None


Arg = TensorArg | ValueArg | SeqArg


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
    imports: tuple[str, ...] = ()
    """Modules whose import registers the op an op-name target (``ns::op``) names."""
    init_args: Mapping[str, Any] = field(default_factory=dict)
    """Constructor arguments of an ``nn.Module`` target."""
    zero_grad: tuple[str, ...] = ()
    """Inputs whose gradient is zero by design (``zero_grad: [mask_logits]``): a gradient that
    is zero on every case is no warning for them (GV129)."""
    inferred: bool = False
    """Built from forward's signature because no spec file names the target."""
    device: str | None = None
    """``device:``: where its cases run, over ``device =`` of pyproject, under ``--device``."""
    compose: bool | None = None
    """``compose: all`` (or true): every composition check on for its cases; false: off. Over
    ``compose =`` of pyproject, under ``--compose``; None: not said."""
    computes_in: str | None = None
    """``computes_in:``: the dtype the target computes in inside whatever dtype it is handed
    (``float32`` for a kernel that converts its loads), over detection; ``float64`` turns
    detection off. None: detected per case (``gradverify.case.computes``)."""
    requires_torch: tuple[int, ...] = ()
    """The oldest torch the target runs on (``requires_torch: "2.4"``); on an older one its
    cases are skipped with that reason, the target never imported."""
    todo: tuple[tuple[int, str], ...] = ()
    """(line, text) of each TODO comment left in a spec ``gradverify init`` wrote: it is
    unfinished (GV019)."""
    guessed: Mapping[str, tuple[int, str]] = field(default_factory=dict)
    """In a spec ``gradverify init`` wrote: each argument's line and the comment saying what
    was guessed, for findings that a wrong guess may explain."""

    @property
    def where(self) -> str:
        return str(self.location) if self.location else "<spec>"

    @property
    def location(self) -> Location | None:
        """The spec's place in its file (None for a spec given as data)."""
        return Location(self.path, self.line or None) if self.path else None


VERSION_RE = re.compile(r"^(?:>=\s*)?(\d+)\.(\d+)(?:\.(\d+))?$")
"""A minimum torch version: ``2.4``, ``2.4.1`` or ``>=2.4``."""


def version_tuple(text: str) -> tuple[int, ...]:
    """``2.1.2+cu121`` or ``2.6.0a0`` as (2, 1, 2) / (2, 6, 0): the release numbers only."""
    numbers = []
    for part in text.split("+")[0].split(".")[:3]:
        digits = re.match(r"\d+", part)
        numbers.append(int(digits.group()) if digits else 0)
    return tuple(numbers)


