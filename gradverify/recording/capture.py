"""Recording what custom Functions really see, for ``gradverify record`` and
``gradverify.record()``.

While recording, ``torch.autograd.Function.apply`` is wrapped. A call of a user-defined Function
(not torch's own: classes from ``torch``, ``functorch`` and gradverify are never recorded) is
described once per distinct argument signature, up to ``limit`` signatures per class; after that
the class is skipped with one set lookup. A description is metadata only (shapes, dtypes and a
few value facts, computed once under ``no_grad``), never a tensor. It is appended at once to a
spool file of the process (``<pid>.jsonl``, read back by ``spool``), so that forked DataLoader
workers, and the script process that ``gradverify record -- python train.py`` starts
(``gradverify.recording.launch``), report to the process that writes the specs. Recording never
raises into the user's code: a value it cannot describe is recorded as needing a factory.
"""
from __future__ import annotations

import contextlib
import fnmatch
import inspect
import json
import os
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gradverify import frames, torchcompat
from gradverify.errors import shown_path
from gradverify.recording.spool import read_spool

if TYPE_CHECKING:
    from torch.autograd import Function

_BY_PATH = "_gradverify_user_"
"""The module name gradverify gives a file it imports by path: not a name a spec can import."""
DEFAULT_LIMIT = 3


@dataclass
class Recording:
    """What ``record`` wrote: spec files, and notes for the user."""

    written: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    calls: int = 0
    """Distinct signatures seen, over every class."""


class Recorder:
    """Describes the calls of user-defined Functions into a spool folder, one line of JSON a
    call; shared by every thread of the process, and safe to fork."""

    def __init__(self, spool: Path, include: Sequence[str], exclude: Sequence[str], limit: int,
                 script: str | None) -> None:
        self.spool = spool
        self.include = tuple(include)
        self.exclude = tuple(exclude)
        self.limit = limit
        self.script = script
        self.skip: set[type[Function]] = set()
        self.seen: dict[type[Function], set[Any]] = {}
        self.params: dict[type[Function], list[str]] = {}
        self.defaults: dict[type[Function], dict[str, int]] = {}
        self.lock = threading.Lock()
        self.compiling = torchcompat.is_compiling()

    # -- the hot path: one set lookup for a class skipped or full, else a signature

    def see(self, cls: type[Function], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if cls in self.skip:
            return
        try:
            seen = self.seen.get(cls)
            if seen is None:
                if not self._wanted(cls):
                    self.skip.add(cls)
                    return
                seen = self.seen.setdefault(cls, set())
            if self.compiling():  # traced, not run: nothing to describe
                self.append({"compiled": self.target(cls)})
                return
            signature = tuple([_signature(a) for a in args])
            if kwargs:
                signature += tuple(sorted((k, _signature(v)) for k, v in kwargs.items()))
            if signature in seen:
                return
            with self.lock:
                if signature in seen or len(seen) >= self.limit:
                    return
                seen.add(signature)
                if len(seen) >= self.limit:
                    self.skip.add(cls)
            self._describe(cls, args, kwargs)
        except Exception:  # noqa: BLE001 -- recording must never break the user's run
            self.skip.add(cls)

    def _describe(self, cls: type[Function], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        import torch

        names = self._names(cls)
        described = []
        with torch.no_grad():
            for i, value in enumerate(args):
                name = names[i] if i < len(names) else f"args[{i}]"
                described.append({"name": name, **describe(value)})
            for key, value in kwargs.items():
                described.append({"name": key, **describe(value)})
        passed = {d["name"] for d in described}
        defaults = {n: v for n, v in self.defaults.get(cls, {}).items() if n not in passed}
        self.append({"target": self.target(cls), "args": described,
                     "grad_enabled": torch.is_grad_enabled(),
                     **({"defaults": defaults} if defaults else {})})

    # -- helpers

    def _wanted(self, cls: type[Function]) -> bool:
        module = _owner(cls)[0]
        if frames.owner_of_module(module) in (frames.Owner.TORCH, frames.Owner.GRADVERIFY) or \
                module.startswith(_BY_PATH):
            return False
        target = self.target(cls)
        if self.include and not any(fnmatch.fnmatchcase(target, p) for p in self.include):
            return False
        return not any(fnmatch.fnmatchcase(target, p) for p in self.exclude)

    def target(self, cls: type[Function]) -> str:
        module, qualname = _owner(cls)
        if module == "__main__":
            main = self.script or getattr(sys.modules.get("__main__"), "__file__", None)
            if main:
                module = shown_path(Path(main).resolve())
        return f"{module}:{qualname}"

    def _names(self, cls: type[Function]) -> list[str]:
        op = getattr(cls, "_opoverload", None)
        if op is not None and cls not in self.params:  # a custom op: its schema's names
            self.params[cls] = [a.name for a in op._schema.arguments]
        if cls not in self.params:
            try:
                params = list(inspect.signature(cls.forward).parameters.values())
            except (TypeError, ValueError):
                params = []
            if params and not torchcompat.setup_context_defined(cls.setup_context):
                params = params[1:]  # ctx
            self.params[cls] = [p.name for p in params
                                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
            # ints forward takes by default (a block size): the dims they bound stay above them
            self.defaults[cls] = {p.name: p.default for p in params if type(p.default) is int}
        return self.params[cls]

    def append(self, entry: dict[str, Any]) -> None:
        """Append one entry to this process's spool file: a described call, or
        ``{"compiled": target}``."""
        line = json.dumps(entry, default=str) + "\n"
        path = self.spool / f"{os.getpid()}.jsonl"
        with self.lock, open(path, "a", encoding="utf-8") as f:
            f.write(line)


def _signature(value: Any) -> Any:
    if isinstance(value, _Tensor):
        return (value.dtype, value.shape, value.requires_grad, value.layout)
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple([_signature(v) for v in value]))
    if value is None or isinstance(value, (bool, int, float, str)):
        return (type(value).__name__, value)
    return ("object", type(value).__qualname__)


def describe(value: Any) -> dict[str, Any]:
    """A JSON-able description of one argument: what a spec needs to make one like it."""
    import torch

    if isinstance(value, torch.Tensor):
        return _describe_tensor(value)
    if isinstance(value, (list, tuple)):
        return {"kind": type(value).__name__, "items": [describe(v) for v in value]}
    if value is None or isinstance(value, (bool, int, str)):
        return {"kind": "value", "value": value}
    if isinstance(value, float):
        return {"kind": "value", "value": value if value == value and abs(value) != float("inf")
                else str(value)}
    return {"kind": "object", "type": f"{type(value).__module__}.{type(value).__qualname__}",
            "callable": callable(value)}


def _describe_tensor(t: Any) -> dict[str, Any]:
    import torch

    layout = str(t.layout).removeprefix("torch.")
    out: dict[str, Any] = {"kind": "tensor", "shape": list(t.shape),
                           "dtype": str(t.dtype).removeprefix("torch."), "device": t.device.type,
                           "requires_grad": bool(t.requires_grad), "layout": layout}
    plain = type(t) in (torch.Tensor, torch.nn.Parameter)
    if layout.startswith("sparse") and t.numel():
        try:
            nnz = t._nnz()
            out["density"] = round(nnz / t.numel(), 4)
        except Exception:  # noqa: BLE001
            pass
    if layout != "strided" or not plain or t.numel() == 0:
        if not plain:
            out["subclass"] = f"{type(t).__module__}.{type(t).__qualname__}"
        return out
    try:
        out.update(_facts(t.detach()))
    except Exception:  # noqa: BLE001 -- a fact we cannot compute is left out
        pass
    return out


def _facts(x: Any) -> dict[str, Any]:
    import torch

    facts: dict[str, Any] = {}
    if x.dtype == torch.bool:
        facts["density"] = round(float(x.float().mean()), 3)
        return facts
    if x.is_complex():
        return facts
    flat = x.reshape(-1)
    if x.numel() > 1 and bool((flat == flat[0]).all()):
        facts["constant"] = flat[0].item()
    if not x.is_floating_point():
        facts["min"], facts["max"] = int(x.min()), int(x.max())
        if x.dim() == 2 and x.shape[0] == 2:  # an edge list: whether any edge is a self-loop
            facts["self_loops"] = bool((x[0] == x[1]).any())
    else:
        finite = torch.isfinite(x)
        facts["finite"] = bool(finite.all())
        if facts["finite"]:
            facts["positive"] = bool((x > 0).all())
    if x.dim() >= 1 and x.shape[-1] > 1:
        facts["sorted"] = bool((x[..., 1:] >= x[..., :-1]).all())
        binary = bool(((x == 0) | (x == 1)).all())
        if binary and "constant" not in facts:
            facts["onehot"] = bool((x.sum(-1) == 1).all())
    if x.is_floating_point() and x.dim() >= 2 and x.shape[-1] == x.shape[-2] > 1 \
            and facts.get("finite"):
        wide = x.to(torch.float64)
        if torch.allclose(wide, wide.transpose(-1, -2), rtol=1e-5, atol=1e-6):
            facts["spd"] = bool((torch.linalg.cholesky_ex(wide).info == 0).all())
    return facts




# ----------------------------------------------------------------------------- the hook

_ACTIVE: Recorder | None = None
_ORIGINAL: Any = None
_Tensor: Any = type(None)  # torch.Tensor once installed; no torch import before that


def _owner(cls: Any) -> tuple[str, str]:
    """(module, qualified name) a Function class or a custom op is reached by: a
    ``CustomOpDef`` by the function it decorated (``mod:myop``)."""
    fn = getattr(cls, "_init_fn", None)
    if fn is not None and hasattr(cls, "_opoverload"):
        return getattr(fn, "__module__", "") or "", fn.__qualname__
    return getattr(cls, "__module__", "") or "", cls.__qualname__


def install(recorder: Recorder) -> None:
    global _ACTIVE, _ORIGINAL
    from torch.autograd.function import Function

    if _ACTIVE is not None:
        raise RuntimeError("gradverify is already recording")
    original = Function.__dict__["apply"]
    # a Python classmethod's function, called directly (the hot path); torch >= 2.15's C
    # classmethod_descriptor has none and is bound per call
    func = getattr(original, "__func__", None)

    def apply(cls: type[Function], *args: Any, **kwargs: Any) -> Any:
        active = _ACTIVE
        if active is not None:
            active.see(cls, args, kwargs)
        if func is not None:
            return func(cls, *args, **kwargs)
        return original.__get__(None, cls)(*args, **kwargs)

    global _Tensor
    import torch

    _Tensor = torch.Tensor
    _ORIGINAL = original
    _ACTIVE = recorder
    Function.apply = classmethod(apply)  # type: ignore[assignment,method-assign]
    _install_op_hook()


_OP_CALL: Any = None
"""``CustomOpDef.__call__`` before recording wrapped it (None when not recording)."""


def _install_op_hook() -> None:
    """Custom ops are seen where the user calls them: ``CustomOpDef.__call__``."""
    global _OP_CALL
    CustomOpDef = torchcompat.custom_op_def_type()
    if CustomOpDef is None:  # a torch without custom ops
        return
    original = CustomOpDef.__call__

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        active = _ACTIVE
        if active is not None:
            active.see(self, args, kwargs)
        return original(self, *args, **kwargs)

    _OP_CALL = original
    CustomOpDef.__call__ = call


def uninstall() -> None:
    global _ACTIVE, _ORIGINAL, _OP_CALL
    from torch.autograd.function import Function

    if _ORIGINAL is not None:
        Function.apply = _ORIGINAL  # type: ignore[method-assign]
    if _OP_CALL is not None:
        torchcompat.custom_op_def_type().__call__ = _OP_CALL
    _ACTIVE = _ORIGINAL = _OP_CALL = None


@contextlib.contextmanager
def record(out: str | os.PathLike[str] = "specs/recorded", *, include: Sequence[str] = (),
           exclude: Sequence[str] = (), limit: int = DEFAULT_LIMIT, force: bool = False,
           shrink: bool = True) -> Iterator[Recording]:
    """Record the custom Functions called inside the block, then write one spec per class
    to ``out``. The yielded ``Recording`` lists the files written once the block has ended."""
    result = Recording()
    with tempfile.TemporaryDirectory(prefix="gradverify-record-") as spool:
        recorder = Recorder(Path(spool), include, exclude, limit, script=None)
        graphs = torchcompat.compiled_graph_count()
        install(recorder)
        try:
            yield result
        finally:
            uninstall()
            if torchcompat.compiled_graph_count() > graphs:
                recorder.append({"compiled": "*"})
        from gradverify.recording.write import write_specs

        seen = read_spool(Path(spool))
        script = shown_path(Path(sys.argv[0] or ".").resolve())
        written = write_specs(seen, Path(out), limit=limit, force=force, shrink=shrink,
                              origin=f"gradverify.record() in {script}")
        result.written, result.notes, result.calls = written.paths, written.notes, \
            len(seen.observations)
