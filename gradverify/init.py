"""``gradverify init``: a commented spec skeleton from forward's signature."""
from __future__ import annotations

import inspect
import typing
from typing import Any

from gradverify.target import FunctionInfo, Param

_EMPTY = inspect.Parameter.empty


def _annotation_text(annotation: Any) -> str:
    if annotation is _EMPTY:
        return ""
    if isinstance(annotation, str):
        return annotation
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def _is_tensor_annotation(annotation: Any) -> bool:
    text = _annotation_text(annotation)
    return "Tensor" in text


def _is_optional(param: Param) -> bool:
    if param.default is None:
        return True
    text = _annotation_text(param.annotation)
    return "Optional" in text or "None" in text or type(None) in typing.get_args(param.annotation)


def _yaml_value(value: Any) -> str | None:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return None


def _arg_line(param: Param) -> tuple[str, str]:
    """(YAML value, comment) for one forward parameter."""
    annotation = _annotation_text(param.annotation)
    signature = f"{param.name}{': ' + annotation if annotation else ''}" + (
        "" if param.default is _EMPTY else f" = {param.default!r}")
    tensor = _is_tensor_annotation(param.annotation)
    if param.default is not _EMPTY and not tensor:
        value = _yaml_value(param.default)
        if value is not None:
            return value, f"{signature}: forward's default"
    if tensor or param.default is _EMPTY and annotation in ("", "Tensor", "torch.Tensor"):
        note = "; null passes None" if _is_optional(param) else ""
        return "{shape: [N, 4]}", f"{signature}: set the shape forward expects{note}"
    if annotation in ("int",):
        return "1", signature
    if annotation in ("float",):
        return "1.0", signature
    if annotation in ("bool",):
        return "false", signature
    if annotation in ("str",):
        return '""', signature
    return "{shape: [N, 4]}", f"{signature}: set a value or shape"


def skeleton(info: FunctionInfo, spec_path: str | None = None) -> str:
    run = f"gradverify check {spec_path}" if spec_path else f"gradverify check {info.target}"
    lines = [
        f"# gradverify spec for {info.target}",
        f"# forward: {info.forward_location or '?'}   backward: {info.backward_location or '?'}",
        "# Edit the shapes below, then run: " + run,
        "# Tensor keys: shape, values, dtype (float32), requires_grad, init (randn, rand, uniform,",
        "#   normal, positive, randint, bernoulli, zeros, ones, arange, eye, randperm, spd),",
        "#   low/high/mean/std/p, sorted, device. See the spec reference in the README.",
        f"target: {info.target}",
        "dims: {N: [1, 3]}   # named sizes; a list sweeps (one case per value)",
        "# tolerance: {atol: 1.0e-5, rtol: 1.0e-3, eps: 1.0e-6}",
        "# checks: {gradgradcheck: false}   # turn checks off (or opt-in checks on)",
        "# expect:                          # accepted failures, reported as xfail",
        "#   gradgradcheck: \"why it is expected to fail\"",
        "cases:",
        "  - name: basic",
    ]
    params = [p for p in info.params if p.kind in ("positional", "var_positional")]
    if not params:
        lines.append("    args: []")
    else:
        lines.append("    args:")
        rows = [(f"      {p.name}: {value}", comment) for p in params
                for value, comment in [_arg_line(p) if p.kind == "positional" else
                                       ("[{shape: [N, 4]}, {shape: [N, 4]}]",
                                        f"*{p.name}: a list, one entry per tensor forward takes")]]
        width = max(len(r) for r, _ in rows) + 2
        lines += [f"{r:<{width}}# {c}" for r, c in rows]
    if info.once_differentiable:
        lines.insert(-len(params) - 2, "# note: backward is @once_differentiable, so "
                                        "gradgradcheck will be skipped")
    return "\n".join(lines) + "\n"
