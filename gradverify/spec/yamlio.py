"""Safe YAML loading that remembers the line of every mapping key and sequence item.

Only ``yaml.SafeLoader`` constructors are used: tags such as ``!!python/object`` are refused,
never executed.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from gradverify.errors import SpecError, did_you_mean


class LDict(dict[Any, Any]):
    """A dict that knows its own line and the line of each key (1-based)."""

    line: int = 0
    key_lines: dict[Any, int]


class LList(list[Any]):
    """A list that knows its own line and the line of each item (1-based)."""

    line: int = 0
    item_lines: list[int]


class _Loader(yaml.SafeLoader):
    """Safe loading; numbers read as YAML 1.2 and Python read them: ``1e-5``, ``1E5`` and
    ``.5`` are floats (YAML 1.1, PyYAML's default, reads ``1e-5`` as a string)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."))


MAX_NODES = 200_000
"""A document may expand to at most this many values, aliases counted at each use: a spec is
small, and a "billion laughs" of nested aliases must fail at once, not hang."""


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> LDict:
    # Keys written in this mapping must be unique; keys merged in with `<<: *anchor` may be
    # overridden by them (YAML's merge semantics).
    explicit = [k for k, _ in node.value if k.tag != "tag:yaml.org,2002:merge"]
    loader.flatten_mapping(node)
    result = LDict()
    result.line = node.start_mark.line + 1
    result.key_lines = {}
    written: dict[Any, int] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        try:
            hash(key)
        except TypeError:
            raise SpecError("a mapping key must be a plain value, not a list or mapping",
                            file=loader.name, line=line, code="GV001") from None
        if any(key_node is k for k in explicit):
            if key in written:
                raise SpecError(f"duplicate key {key!r} (first on line {written[key]})",
                                file=loader.name, line=line, code="GV001")
            written[key] = line
        result[key] = loader.construct_object(value_node, deep=True)
        result.key_lines[key] = line
    return result


def _expanded_size(node: yaml.Node, file: str | None) -> int:
    """How many values ``node`` stands for once every alias is expanded, counted without
    expanding (each node once); SpecError past ``MAX_NODES`` or for a recursive alias."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(n: yaml.Node) -> int:
        key = id(n)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise SpecError("YAML error: an alias refers to a node that contains it (a "
                            "recursive structure); specs are plain trees",
                            file=file, line=n.start_mark.line + 1, code="GV001")
        active.add(key)
        if isinstance(n, yaml.SequenceNode):
            total = 1 + sum(size(child) for child in n.value)
        elif isinstance(n, yaml.MappingNode):
            total = 1 + sum(size(k) + size(v) for k, v in n.value)
        else:
            total = 1
        active.discard(key)
        if total > MAX_NODES:
            raise SpecError(f"YAML error: this document expands to more than {MAX_NODES:,} "
                            "values (aliases such as *a are counted at each use): too large to "
                            "be a spec", file=file, line=n.start_mark.line + 1, code="GV001")
        sizes[key] = total
        return total

    return size(node)


def looks_like_spec(text: str, keys: Sequence[str]) -> str | None:
    """None when the first document of ``text`` starts as a spec (a mapping whose first key is
    one of ``keys``), else why not. Only the start of the stream is read, so a large data file
    that is not a spec is told apart at once, whatever its size."""
    parser = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        events = yaml.parse(text, Loader=parser)
        first = next((e for e in events if not isinstance(
            e, (yaml.StreamStartEvent, yaml.DocumentStartEvent))), None)
        if isinstance(first, yaml.SequenceStartEvent):
            return "its top level is a list, not a mapping with 'target' and 'cases'"
        if isinstance(first, yaml.ScalarEvent) and first.value:
            return "its top level is a single value, not a mapping with 'target' and 'cases'"
        if isinstance(first, yaml.MappingStartEvent):
            key = next(events, None)
            if isinstance(key, yaml.ScalarEvent) and key.value not in (*keys, "<<"):
                return f"its first key is {key.value!r}, not one of {', '.join(keys)}"
    except yaml.YAMLError:
        return None  # the full reader reports it, with its line
    return None


def _construct_sequence(loader: _Loader, node: yaml.SequenceNode) -> LList:
    result = LList(loader.construct_object(child, deep=True) for child in node.value)
    result.line = node.start_mark.line + 1
    result.item_lines = [child.start_mark.line + 1 for child in node.value]
    return result


_Loader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)
_Loader.add_constructor("tag:yaml.org,2002:seq", _construct_sequence)


def load_documents(text: str, file: str | None) -> list[tuple[Any, int]]:
    """Parse a YAML stream into ``(document, first_line)`` pairs; raise SpecError (GV001)."""
    documents: list[tuple[Any, int]] = []
    loader = None
    try:
        loader = _Loader(text)  # the reader rejects unprintable characters right here
        loader.name = file or "<spec>"
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            _expanded_size(node, file)
            documents.append((loader.construct_document(node), node.start_mark.line + 1))
    except SpecError:
        raise
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = exc.problem or "invalid YAML"
        if exc.context and exc.context_mark is not None and exc.context_mark is not mark:
            problem = f"{exc.context} (line {exc.context_mark.line + 1}): {problem}"
        if isinstance(exc, yaml.constructor.ConstructorError) and "tag" in problem:
            problem = (f"{problem.strip()}; gradverify loads YAML safely and never constructs "
                       "objects from tags: write plain values instead")
        raise SpecError(f"YAML error: {problem}", file=file, line=line, code="GV001") from None
    except yaml.reader.ReaderError as exc:
        line = text[: exc.position].count("\n") + 1
        raise SpecError(f"YAML error: unacceptable character #x{exc.character:04x} "
                        f"({exc.reason}); specs must be printable UTF-8 text", file=file,
                        line=line, code="GV001") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"YAML error: {exc}", file=file, line=None, code="GV001") from None
    except RecursionError:
        raise SpecError("YAML error: document nested too deeply", file=file, line=None,
                        code="GV001") from None
    finally:
        if loader is not None:
            loader.dispose()
    return documents


class Reader:
    """Reads values out of a loaded YAML document; each failure is a ``SpecError`` naming the
    file, the line (from ``LDict``/``LList``) and the key path."""

    def __init__(self, file: str | None) -> None:
        self.file = file

    def fail(self, message: str, line: int | None, key: str | None) -> SpecError:
        return SpecError(message, file=self.file, line=line, key=key or None)

    @staticmethod
    def line_of(container: Any, key: Any, default: int | None) -> int | None:
        if isinstance(container, LDict):
            return container.key_lines.get(key, container.line) or default
        if isinstance(container, LList) and isinstance(key, int) \
                and key < len(container.item_lines):
            return container.item_lines[key]
        return getattr(container, "line", None) or default

    def mapping(self, value: Any, line: int | None, key: str, what: str) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(f"expected {what} (a mapping), got {kind_of(value)}", line, key)
        for k in value:
            if not isinstance(k, str):
                raise self.fail(f"keys must be strings, got {k!r}", self.line_of(value, k, line),
                                key)
        return value

    def known_keys(self, value: Mapping[str, Any], allowed: Sequence[str], line: int | None,
                   key: str) -> None:
        for k in value:
            if k not in allowed:
                raise self.fail(f"unknown key {k!r}{did_you_mean(k, allowed)}; allowed keys: "
                                f"{', '.join(allowed)}", self.line_of(value, k, line),
                                join_key(key, k))

    def number(self, value: Any, line: int | None, key: str, *, minimum: float | None = None,
               positive: bool = False, integer: bool = False) -> Any:
        kinds = (int,) if integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds):
            want = "an integer" if integer else "a number"
            raise self.fail(f"expected {want}, got {kind_of(value)}", line, key)
        if value != value or value in (float("inf"), float("-inf")):
            raise self.fail(f"expected a finite number, got {value}", line, key)
        if positive and value <= 0:
            raise self.fail(f"must be > 0, got {value}", line, key)
        if minimum is not None and value < minimum:
            raise self.fail(f"must be >= {minimum}, got {value}", line, key)
        return value

    def string(self, value: Any, line: int | None, key: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail(f"expected a non-empty string, got {kind_of(value)}", line, key)
        return value


def join_key(*parts: str) -> str:
    return ".".join(p for p in parts if p)


def kind_of(value: Any) -> str:
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


_YAML_WORDS = {"null", "true", "false", "yes", "no", "on", "off", "~"}
"""Words YAML 1.1 (PyYAML) reads as booleans or null, in any case."""


def _float(value: float) -> str:
    """A float that reads back as a float in YAML 1.1 too: ``1.0e-05``, not ``1e-05``."""
    if value != value:
        return ".nan"
    if value in (float("inf"), float("-inf")):
        return ".inf" if value > 0 else "-.inf"
    text = repr(value)
    mantissa, e, exponent = text.partition("e")
    return f"{mantissa}.0e{exponent}" if e and "." not in mantissa else text


def flow_scalar(value: Any) -> str:
    """A Python value as a YAML flow scalar that reads back as the same value."""
    import json

    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, int):
        return repr(value)
    text = str(value)
    if text and (text[0].isalpha() or text[0] == "_") and all(
            c.isalnum() or c in "_." for c in text) and text.lower() not in _YAML_WORDS:
        return text
    return json.dumps(text)
