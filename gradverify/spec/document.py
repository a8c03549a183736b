"""One spec document validated into ``gradverify.specmodel``'s ``Spec``: one validator walks
it key by key, so that every error carries its file, line and key path. A case's arguments are
read by ``spec.args``, the settings a spec shares with ``[tool.gradverify]`` by
``spec.settings``, plain YAML values by ``yamlio.Reader``.

Never imports torch: dtype and init names are checked against the tables in
``gradverify.specmodel``, so that spec validation stays fast.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import replace
from typing import Any

from gradverify.errors import SpecError
from gradverify.spec.args import ArgsReader, dims_used
from gradverify.spec.yamlio import join_key, kind_of
from gradverify.specmodel import (
    CASE_KEYS,
    COMPUTES_IN,
    DIM_RE,
    MAX_SWEEP,
    SPEC_KEYS,
    VERSION_RE,
    Arg,
    Case,
    Spec,
    Tolerance,
)
from gradverify.targets.names import is_target_string, named_by


class Validator(ArgsReader):
    """Walks one spec document; every error names its file, line and key path. A case's
    arguments are read by ``ArgsReader``; the settings a spec shares with ``[tool.gradverify]``
    (tolerance, checks) by ``SettingsReader``."""

    def reference(self, value: Any, line: int | None, key: str) -> str:
        text = self.string(value, line, key)
        if not is_target_string(text) or named_by(text) is not None:
            raise self.fail("expected 'package.module:Name' or 'path/to/file.py:Name', got "
                            f"{text!r}", line, key)
        return text

    def target(self, value: Any, line: int | None, key: str) -> str:
        text = self.string(value, line, key)
        if not is_target_string(text):
            raise self.fail("expected 'package.module:Name', 'path/to/file.py:Name' or an "
                            f"operator's name 'namespace::op', got {text!r}", line, key)
        return text

    def target_keys(self, data: Any, at: Any
                    ) -> tuple[tuple[str, ...], dict[str, Any], tuple[int, ...]]:
        """``imports:`` (an op-name target's modules), ``init_args:`` (a module's) and
        ``requires_torch:``."""
        return (self.imports(data.get("imports", []), at("imports"), "imports"),
                self.init_args(data.get("init_args", {}), at("init_args"), "init_args"),
                self.requires_torch(data["requires_torch"], at("requires_torch"),
                                    "requires_torch") if "requires_torch" in data else ())

    def requires_torch(self, value: Any, line: int | None, key: str) -> tuple[int, ...]:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            raise self.fail(f"quote the version: \"{value}\" (YAML reads an unquoted 2.10 as "
                            "the number 2.1)", line, key)
        match = VERSION_RE.match(self.string(value, line, key).strip())
        if match is None:
            raise self.fail(f"expected the oldest torch the target runs on, like \"2.4\" or "
                            f"\">=2.4.1\", got {value!r}", line, key)
        return tuple(int(n) for n in match.groups() if n is not None)

    def declared(self, data: Any, at: Any, attempt: Any
                 ) -> tuple[dict[str, str], tuple[str, ...], str | None, bool | None,
                            str | None]:
        """What the spec declares about its target's verdicts: ``expect:`` (failures it
        accepts) and ``zero_grad:`` (inputs whose gradient is zero by design); its ``device:``,
        ``compose:`` and ``computes_in:``."""
        return (attempt(self.expect, data.get("expect", {}), at("expect"), "expect", default={}),
                attempt(self.parameter_names, data.get("zero_grad", []), at("zero_grad"),
                        "zero_grad", default=()),
                attempt(self.device, data["device"], at("device"), "device")
                if "device" in data else None,
                attempt(self.compose, data["compose"], at("compose"), "compose")
                if "compose" in data else None,
                attempt(self.computes_in, data["computes_in"], at("computes_in"), "computes_in")
                if "computes_in" in data else None)

    def computes_in(self, value: Any, line: int | None, key: str) -> str:
        """``computes_in:``: the dtype a kernel computes in inside, over detection."""
        if isinstance(value, str) and value.strip() in COMPUTES_IN:
            return value.strip()
        raise self.fail(f"expected the dtype the target computes in inside: "
                        f"{', '.join(COMPUTES_IN)} (float64: never treat it as a low-precision "
                        f"kernel), got {value!r}", line, key)

    def compose(self, value: Any, line: int | None, key: str) -> bool:
        """``compose: all`` (or true) turns every composition check on for the spec's cases,
        ``false`` off (``--compose`` is over it)."""
        if value is True or value is False:
            return bool(value)
        if isinstance(value, str) and value.strip() == "all":
            return True
        raise self.fail(f"expected all (every composition check: torch.compile, autocast), "
                        f"true (the same) or false (none unless --compose), got "
                        f"{value!r}", line, key)

    def parameter_names(self, value: Any, line: int | None, key: str) -> tuple[str, ...]:
        """``zero_grad:``: input names as reports give them (``weight``, ``xs[1]``)."""
        names = self.strings(value, line, key)
        for name in names:
            if not re.match(r"^[A-Za-z_][\w.]*(\[\d+\])?$", name):
                raise self.fail(f"expected input names like 'weight' or 'xs[1]', got {name!r}",
                                line, key)
        return names

    def imports(self, value: Any, line: int | None, key: str) -> tuple[str, ...]:
        names = self.strings(value, line, key)
        for name in names:
            if not all(part.isidentifier() for part in name.split(".")):
                raise self.fail(f"expected dotted module names like 'mypkg.ops', got {name!r}",
                                line, key)
        return names

    def init_args(self, value: Any, line: int | None, key: str) -> dict[str, Any]:
        data = self.mapping(value, line, key, "constructor arguments by name")
        for name, item in data.items():
            if not isinstance(name, str) or not name.isidentifier():
                raise self.fail(f"expected parameter names, got {name!r}", line, key)
            if not _plain(item):
                raise self.fail(f"{name}: expected a number, string, bool, null or a list of "
                                f"them, got {kind_of(item)}", self.line_of(data, name, line),
                                f"{key}.{name}")
        return {str(name): _plain_copy(item) for name, item in data.items()}

    # -- the spec

    def spec(self, doc: Any, doc_line: int | None) -> Spec:
        """A spec document. Every error in it is found, not only the first: each part (the
        top-level keys, each case) is validated on its own, and all errors are raised together
        (the first, with the others attached). Long because it reads every top-level key in
        the order of the format, each through ``attempt``."""
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
        target = attempt(self.target, data["target"], at("target"), "target") \
            if "target" in data else None
        imports, init_args, requires_torch = attempt(self.target_keys, data, at,
                                                     default=((), {}, ()))
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
        expect, zero_grad, device, compose, computes_in = self.declared(data, at, attempt)
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
            raise together(errors)
        return Spec(target=target, cases=tuple(cases), path=self.file, line=line,
                    reference=reference, tolerance=tolerance, checks=checks, expect=expect,
                    zero_grad=zero_grad, imports=imports, init_args=init_args,
                    requires_torch=requires_torch, device=device, compose=compose,
                    computes_in=computes_in)

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

    def expect(self, value: Any, line: int | None, key: str) -> dict[str, str]:
        data = self.mapping(value, line, key, "expected failures like {gradcheck: \"reason\"}")
        result = {}
        for name, reason in data.items():
            at = self.line_of(data, name, line)
            self.check_name(name, at, join_key(key, name))
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
        base = Case(name=name, dtype=dtype, line=line,
                    tolerance=self.tolerance(data.get("tolerance", {}), at("tolerance"),
                                             f"{key}.tolerance"),
                    checks=self.checks(data.get("checks", {}), at("checks"), f"{key}.checks"),
                    expect=self.expect(data.get("expect", {}), at("expect"), f"{key}.expect"))
        if "factory" in data:
            if isinstance(data["factory"], str) and data["factory"].startswith("TODO"):
                raise self.fail(
                    f"this case needs a factory that gradverify could not write ({data['factory']}"
                    "); write `def make(generator, dtype, device, dims)` returning forward's "
                    "arguments as a tuple, and give it here as 'module:make'", at("factory"),
                    f"{key}.factory")
            base = replace(base, factory=self.reference(data["factory"], at("factory"),
                                                         f"{key}.factory"))
            args: tuple[tuple[str | None, Arg], ...] = ()
            by_name = False
            used = list(dims)
        else:
            args, by_name = self.args(data["args"], at("args"), f"{key}.args", dims)
            used = dims_used(args)
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
            cases.append(replace(base, name=f"{name}[{label}]" if label else name, args=args,
                                 by_name=by_name, dims=values))
        return cases


def together(errors: list[SpecError]) -> SpecError:
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


def _plain(value: Any) -> bool:
    if isinstance(value, list):
        return all(_plain(item) for item in value)
    return value is None or isinstance(value, (bool, int, float, str))


def _plain_copy(value: Any) -> Any:
    """A YAML value without its line-carrying wrapper types."""
    if isinstance(value, list):
        return [_plain_copy(item) for item in value]
    if isinstance(value, bool) or value is None:
        return value
    for kind in (int, float, str):
        if isinstance(value, kind):
            return kind(value)
    return value
