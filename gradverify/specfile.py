"""Spec files (YAML, version 1) into the frozen dataclasses of ``gradverify.spec``, validated
before anything runs.

Never imports torch: dtype and init names are checked against the tables in ``gradverify.spec``,
so that spec validation stays fast. Errors are ``SpecError`` with ``file:line`` and the key path.

Long because one validator walks the whole document, key by key, so that every error carries
its file, line and key path; the generic reading of YAML values is ``yamlio.Reader``.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gradverify.errors import SpecError, did_you_mean, one_of, shown_path
from gradverify.spec import (CASE_KEYS, COMPLEX, DEVICE_RE, DIM_RE, DTYPES, FLOAT_ONLY_INITS,
                             FLOATING, INIT_PARAMS, INITS, MAX_ELEMENTS, MAX_RANK, MAX_SIZE,
                             MAX_SWEEP, SPEC_KEYS, TENSOR_KEYS,
                             TOLERANCE_KEYS, Arg, Case, CheckSetting, SeqArg, Spec, TensorArg,
                             Tolerance, ValueArg, is_target_string)
from gradverify.yamlio import Reader, join_key, kind_of, load_documents, looks_like_spec

# ----------------------------------------------------------------------------- loading


MAX_SPEC_BYTES = 16 * 1024**2
"""A spec file is small: a larger YAML file is refused before it is parsed."""


def load_file(path: str | Path) -> list[Spec]:
    """All specs of one YAML file (a ``---`` stream may hold several). A file that is not a spec
    (a data file in the spec folder, say) is told apart from its start, cheaply."""
    path = Path(path)
    shown = shown_path(path)
    try:
        size = path.stat().st_size
        if size > MAX_SPEC_BYTES:
            raise SpecError(f"not a spec: {size / 1024**2:.1f} MiB is far larger than a spec "
                            f"(at most {MAX_SPEC_BYTES // 1024**2} MiB); move the file out of the "
                            "spec folder or add it to `exclude` in [tool.gradverify]",
                            file=shown, line=None, code="GV001")
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


PRESCAN_BYTES = 64 * 1024
"""Above this size a file is first checked to start as a spec (cheap, from its first event);
smaller ones get the full validator's messages (did-you-mean, lines) at once."""


def load_text(text: str, file: str | None = None) -> list[Spec]:
    why_not = looks_like_spec(text, SPEC_KEYS) if len(text) > PRESCAN_BYTES else None
    if why_not:
        raise SpecError(f"not a gradverify spec: {why_not}; move the file out of the spec folder "
                        "or add it to `exclude` in [tool.gradverify]", file=file, line=1,
                        code="GV001")
    documents = [(doc, line) for doc, line in load_documents(text, file) if doc is not None]
    if not documents:
        raise SpecError("empty spec file: expected a mapping with 'target' and 'cases' "
                        "(run `gradverify init mod:Class` for a skeleton)",
                        file=file, line=None, code="GV001")
    specs, errors = [], []
    for doc, line in documents:  # every document of a stream is validated
        try:
            specs.append(_Validator(file).spec(doc, line))
        except SpecError as exc:
            errors += [exc, *exc.others]
    if errors:
        raise _together(errors)
    return specs


def from_dict(data: Mapping[str, Any], *, file: str | None = None) -> Spec:
    """Validate a spec given as a Python mapping (the same keys as the YAML format)."""
    return _Validator(file).spec(data, None)




# ----------------------------------------------------------------------------- validation


class _Validator(Reader):
    """Walks one spec document; every error names its file, line and key path."""

    def reference(self, value: Any, line: int | None, key: str) -> str:
        text = self.string(value, line, key)
        if not is_target_string(text):
            raise self.fail(f"expected 'package.module:Name' or 'path/to/file.py:Name', got {text!r}",
                            line, key)
        return text

    # -- the spec

    def spec(self, doc: Any, doc_line: int | None) -> Spec:
        """A spec document. Every error in it is found, not only the first: each part (the
        top-level keys, each case) is validated on its own, and all errors are raised together
        (the first, with the others attached)."""
        errors: list[SpecError] = []

        def attempt(read: Any, *args: Any, default: Any = None) -> Any:
            try:
                return read(*args)
            except SpecError as exc:
                errors.append(exc)
                return default

        data = self.mapping(doc, doc_line, "", "a spec")
        line = getattr(data, "line", None) or doc_line
        attempt(self.known_keys, data, SPEC_KEYS, line, "")
        at = lambda k: self.line_of(data, k, line)  # noqa: E731
        if "version" in data and data["version"] != 1:
            errors.append(self.fail(f"unsupported spec version {data['version']!r}; this "
                                    "gradverify reads version 1", at("version"), "version"))
        target = attempt(self.reference, data["target"], at("target"), "target") \
            if "target" in data else None
        reference = attempt(self.reference, data["reference"], at("reference"), "reference") \
            if "reference" in data else None
        raw_dims = data.get("dims", {})
        # when a dim is invalid, its uses are not errors of their own (one root cause)
        dims = attempt(self.dims, raw_dims, at("dims"), "dims", default={
            name: (1,) for name in raw_dims if isinstance(name, str)}
            if isinstance(raw_dims, dict) else {})
        tolerance = attempt(self.tolerance, data.get("tolerance", {}), at("tolerance"),
                            "tolerance", default=Tolerance())
        checks = attempt(self.checks, data.get("checks", {}), at("checks"), "checks", default={})
        expect = attempt(self.expect, data.get("expect", {}), at("expect"), "expect", default={})
        cases: list[Case] = []
        raw_cases = data.get("cases")
        if "cases" not in data:
            errors.append(self.fail("missing key 'cases': a list of cases, each with 'args' or "
                                    "'factory'", line, "cases"))
        elif not isinstance(raw_cases, list) or not raw_cases:
            errors.append(self.fail(f"expected a non-empty list of cases, got "
                                    f"{kind_of(raw_cases)}", at("cases"), "cases"))
        else:
            seen: dict[str, str] = {}
            for index, raw in enumerate(raw_cases):
                key = f"cases[{index}]"
                made = attempt(self.case, raw, self.line_of(raw_cases, index, line), key, index,
                               dims, default=[])
                for case in made:
                    if case.name in seen:
                        errors.append(self.fail(f"duplicate case name {case.name!r} (also "
                                                f"{seen[case.name]})", case.line, f"{key}.name"))
                    seen[case.name] = key
                    cases.append(case)
        if errors:
            raise _together(errors)
        return Spec(target=target, cases=tuple(cases), path=self.file, line=line,
                    reference=reference, tolerance=tolerance, checks=checks, expect=expect)

    def dims(self, value: Any, line: int | None, key: str) -> dict[str, tuple[int, ...]]:
        data = self.mapping(value, line, key, "named sizes like {N: [1, 4], D: 3}")
        dims: dict[str, tuple[int, ...]] = {}
        for name, raw in data.items():
            at = self.line_of(data, name, line)
            if not DIM_RE.match(name):
                raise self.fail("a dim name must be an identifier like N or batch", at,
                                join_key(key, name))
            sizes = raw if isinstance(raw, list) else [raw]
            if not sizes:
                raise self.fail("a sweep needs at least one size", at, join_key(key, name))
            dims[name] = tuple(self.size(s, at, join_key(key, name)) for s in sizes)
        return dims

    def tolerance(self, value: Any, line: int | None, key: str) -> Tolerance:
        data = self.mapping(value, line, key, "tolerances like {atol: 1.0e-5, rtol: 1.0e-3}")
        self.known_keys(data, TOLERANCE_KEYS, line, key)
        values = {k: float(self.number(v, self.line_of(data, k, line), join_key(key, k), minimum=0,
                                       positive=(k == "eps")))
                  for k, v in data.items()}
        return Tolerance(**values)

    def checks(self, value: Any, line: int | None, key: str) -> dict[str, CheckSetting]:
        from gradverify.registry import REGISTRY, unknown_check

        data = self.mapping(value, line, key, "check switches like {gradgradcheck: false}")
        result: dict[str, CheckSetting] = {}
        for name, raw in data.items():
            at = self.line_of(data, name, line)
            if unknown_check(name):
                raise self.fail(unknown_check(name), at, join_key(key, name))
            if isinstance(raw, bool):
                result[name] = CheckSetting(enabled=raw)
                continue
            if raw is None:
                raw = {}
            options = self.mapping(raw, at, join_key(key, name), "true, false or a mapping of options")
            allowed = {o.name: o for o in REGISTRY[name].options}
            parsed: dict[str, Any] = {}
            enabled = True
            for opt, opt_value in options.items():
                opt_at = self.line_of(options, opt, at)
                opt_key = join_key(key, name, opt)
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
        from gradverify.registry import unknown_check

        data = self.mapping(value, line, key, "expected failures like {gradcheck: \"reason\"}")
        result = {}
        for name, reason in data.items():
            at = self.line_of(data, name, line)
            if unknown_check(name):
                raise self.fail(unknown_check(name), at, join_key(key, name))
            result[name] = self.string(reason, at, join_key(key, name)).strip()
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
            if isinstance(data["factory"], str) and data["factory"].startswith("TODO"):
                raise self.fail(
                    f"this case needs a factory that gradverify could not write ({data['factory']}"
                    "); write `def make(generator, dtype, device, dims)` returning forward's "
                    "arguments as a tuple, and give it here as 'module:make'", at("factory"),
                    f"{key}.factory")
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

    def arg(self, value: Any, line: int | None, key: str, dims: Mapping[str, tuple[int, ...]]) -> Arg:
        if isinstance(value, str) and value in dims:
            return ValueArg(value, dim=value)  # an int that follows the dim (and its sweep)
        if value is None or isinstance(value, (bool, int, float, str)):
            return ValueArg(value)
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
            if not DEVICE_RE.match(device):
                raise self.fail(f"unknown device {device!r}; expected cpu, cuda or cuda:N",
                                at("device"), f"{key}.device")
        return TensorArg(shape=shape, values=values, dtype=dtype, requires_grad=requires_grad,
                         init=init, params=params, sorted=sort, device=device)

    def shape(self, value: Any, line: int | None, key: str, dims: Mapping[str, tuple[int, ...]]
              ) -> tuple[int | str, ...]:
        if not isinstance(value, list):
            raise self.fail(f"expected a list of sizes like [N, 3], got {kind_of(value)}", line, key)
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


def _together(errors: list[SpecError]) -> SpecError:
    """The first error, carrying the others (``others``), in file order."""
    flat: list[SpecError] = []
    for error in errors:
        flat += [e for e in (error, *error.others) if all(e is not f for f in flat)]
    flat.sort(key=lambda e: e.line or 0)
    first = flat[0]
    first.others = flat[1:]
    for rest in flat[1:]:
        rest.others = []
    return first


def _dims_used(args: Sequence[tuple[str | None, Arg]]) -> list[str]:
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
