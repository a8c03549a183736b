"""Process-wide state that a verdict depends on: torch's settings, the functions gradverify
verifies with, and the working directory. Captured before any user code runs, restored around
each import and each case.

A module that runs ``torch.set_grad_enabled(False)`` or replaces ``torch.autograd.gradcheck``
at import, or a forward that sets the default dtype or changes directory, would otherwise change
the verdict of every target checked after it in the same process. ``execute.run_case`` restores
the baseline before and after each case and reports what a target's import or a case changed
(GV012), naming the setting.

The baseline is torch's defaults (grad mode on, inference and anomaly mode off, float32, no
deterministic algorithms, no autocast, no saved-tensor hooks) with the verification functions
as torch defines them, whatever state the caller is in: ``isolated()`` runs a block on it and
gives the caller its own state back afterwards (``gradverify.verify()`` inside
``torch.no_grad()``). Nothing here imports torch until the baseline is first needed, which
happens only where user code is about to run (a worker, ``--no-isolate``, the API); the parent
process never calls it.
"""
from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from gradverify import torchcompat

_BASELINE: dict[str, Any] | None = None
_ORIGINALS: dict[str, Any] = {}
"""The verification functions as torch defined them, bound the first time this module looks
(before any user module is imported)."""
_GUARDS: list[Any] = []
"""Context guards entered to undo a guard the user entered and never left (inference mode)."""

_LOCK = threading.RLock()
"""Held while a block runs on the baseline (``isolated``)."""

IMPORT_CHANGES: dict[str, list[str]] = {}
"""What importing a module changed, by module name (reported on that module's targets)."""

VERIFIERS = (
    "torch.autograd.gradcheck", "torch.autograd.gradgradcheck", "torch.autograd.grad",
    "torch.autograd.backward", "torch.autograd.gradcheck.gradcheck",
    "torch.autograd.gradcheck.gradgradcheck", "torch.allclose", "torch.isclose", "torch.equal",
    "torch.Tensor.backward", "torch.func.vmap", "torch.func.jvp", "torch.compile",
)
"""What gradverify's checks call: a user module that replaces one (to silence a library, in a
test helper) would otherwise make another target's check pass without running."""


@dataclass(frozen=True)
class Setting:
    name: str
    get: Callable[[], Any]
    set: Callable[[Any], None]
    default: Any = None
    """torch's default, or ``_CAPTURED``: the value found when the baseline is taken."""


_CAPTURED = object()


def import_torch() -> Any:
    """torch, imported quietly: without NumPy installed, torch warns at import ("Failed to
    initialize NumPy"), which is about torch's environment, not about any Function, and must
    not reach gradverify's output."""
    if "torch" in sys.modules:
        return sys.modules["torch"]
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
        import torch
    return torch


def warm_up(*, checkpoint: bool = False) -> None:
    """Run one tiny backward, so that what torch imports on a process's first backward (its
    symbolic shapes, and with them sympy: a second on an idle machine, several on a loaded one)
    is imported while a process of ours starts, not inside the first case's or probe's time
    limit. Called by the workers, ``init``'s probe child and ``record``'s probe process before
    they say they are ready. ``checkpoint``: one tiny ``torch.utils.checkpoint`` too, whose
    first call imports torch's compiler (another second or more), for a process that scores
    mutants with every default check."""
    torch = import_torch()
    x = torch.ones(1, requires_grad=True)
    torch.autograd.grad(x * 2, x, torch.ones(1))
    if checkpoint:
        import torch.utils.checkpoint

        y = torch.utils.checkpoint.checkpoint(lambda t: t * 2, x, use_reentrant=False)
        torch.autograd.grad(y, x, torch.ones(1))


def _owner(path: str) -> tuple[Any, str]:
    """The object holding a dotted name's last attribute (a module or a class), and that
    attribute's name; (None, name) when there is none."""
    import importlib

    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            obj: Any = sys.modules.get(module_name) or importlib.import_module(module_name)
        except ImportError:
            continue
        for part in parts[cut:-1]:
            obj = getattr(obj, part, None)
        return obj, parts[-1]
    return None, parts[-1]


@functools.cache
def _settings() -> tuple[Setting, ...]:
    """The table of settings, built once (at the first capture, when torch is imported)."""
    import importlib

    torch = import_torch()
    for module in ("torch.autograd.gradcheck", "torch.func"):  # the modules, for their functions
        importlib.import_module(module)

    def set_inference(value: bool) -> None:
        guard = torch.inference_mode(value)
        guard.__enter__()  # left entered on purpose: it undoes a guard the user left entered
        _GUARDS.append(guard)

    torchcompat.watch_saved_tensor_hooks()

    def saved_hooks() -> bool:
        return torchcompat.top_saved_tensor_hooks() is not None

    def pop_hooks(wanted: bool) -> None:
        while not wanted and saved_hooks():
            torchcompat.pop_saved_tensor_hooks()

    def set_deterministic(value: tuple[bool, bool]) -> None:
        torch.use_deterministic_algorithms(value[0], warn_only=value[1])

    def set_anomaly(value: tuple[bool, bool]) -> None:
        torch.autograd.set_detect_anomaly(value[0], check_nan=value[1])

    settings = [
        Setting("grad mode", torch.is_grad_enabled, torch.set_grad_enabled, True),
        Setting("inference mode", torch.is_inference_mode_enabled, set_inference, False),
        Setting("default dtype", torch.get_default_dtype, torch.set_default_dtype,
                torch.float32),
        Setting("deterministic algorithms (enabled, warn_only)",
                lambda: (torch.are_deterministic_algorithms_enabled(),
                         torch.is_deterministic_algorithms_warn_only_enabled()),
                set_deterministic, (False, False)),
        Setting("anomaly mode (enabled, check_nan)",
                lambda: (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()),
                set_anomaly, (False, True)),
        Setting("number of threads", torch.get_num_threads, torch.set_num_threads, _CAPTURED),
        Setting("CPU autocast", *_autocast(torch), False),
        Setting("saved-tensor hooks installed", saved_hooks, pop_hooks, False),
        Setting("working directory", os.getcwd, os.chdir, _CAPTURED),
    ]
    device = torchcompat.default_device_accessors()
    if device is not None:
        settings.append(Setting("default device", *device, "cpu"))
    for path in VERIFIERS:
        owner, attr = _owner(path)
        if owner is None or not hasattr(owner, attr):
            continue
        _ORIGINALS.setdefault(path, _original(torch, path, getattr(owner, attr)))
        settings.append(Setting(path, functools.partial(getattr, owner, attr),
                                functools.partial(setattr, owner, attr), _ORIGINALS[path]))
    return tuple(settings)


def _original(torch: Any, path: str, found: Any) -> Any:
    """torch's own function for ``path``: ``found`` unless code outside torch replaced it
    before gradverify first looked (the API called after importing such a module)."""
    if str(getattr(found, "__module__", "torch")).startswith("torch"):
        return found
    name = path.rpartition(".")[2]
    if torchcompat.builtin(name) is not None:  # allclose, isclose, equal
        return torchcompat.builtin(name)
    if name in ("gradcheck", "gradgradcheck"):  # a fresh copy of torch's module
        import importlib.util

        spec = importlib.util.spec_from_file_location(
            "_gradverify_torch_gradcheck", sys.modules["torch.autograd.gradcheck"].__file__)
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return getattr(module, name)
    return found


def _autocast(torch: Any) -> tuple[Callable[[], bool], Callable[[bool], None]]:
    try:  # torch >= 2.4 takes the device type; the cpu-only calls are deprecated there
        torch.is_autocast_enabled("cpu")
        return (lambda: torch.is_autocast_enabled("cpu"),
                lambda value: torch.set_autocast_enabled("cpu", value))
    except TypeError:
        return torch.is_autocast_cpu_enabled, torch.set_autocast_cpu_enabled


def capture() -> dict[str, Any]:
    return {s.name: s.get() for s in _settings()}


def defaults() -> dict[str, Any]:
    """torch's defaults, the original verification functions, and the current values of
    what has no default (threads, the working directory)."""
    return {s.name: s.get() if s.default is _CAPTURED else s.default for s in _settings()}


def baseline() -> dict[str, Any]:
    """The state every case runs in: torch's defaults (taken at the first call, before any user
    module is imported, which also binds the verification functions)."""
    global _BASELINE
    if _BASELINE is None:
        _BASELINE = defaults()
        restore()
    return _BASELINE


def restore() -> list[str]:
    """Put every setting back to the baseline; what differed, as ``name: before -> now``.
    Does nothing before ``baseline()`` was called."""
    if _BASELINE is None:
        return []
    changed = []
    for setting in _settings():
        now, want = setting.get(), _BASELINE[setting.name]
        if now is not want and now != want:
            changed.append(f"{setting.name}: {_show(want)} -> {_show(now)}")
            setting.set(want)
    return changed


@contextlib.contextmanager
def isolated() -> Iterator[None]:
    """Run the block on torch's defaults, whatever state the caller is in, and give the caller
    its state back afterwards (grad mode, inference mode, hooks and all). Blocks run one at a
    time: what they set is process-wide (the default dtype, the working directory,
    ``sys.stdout``), so ``verify()`` called from several threads runs each call in turn."""
    with _LOCK, _isolated():
        yield


@contextlib.contextmanager
def _isolated() -> Iterator[None]:
    global _BASELINE
    torch = import_torch()

    previous_baseline = _BASELINE
    modes = torchcompat.take_function_modes()
    caller = capture()
    hooks = _take_saved_tensor_hooks()
    try:
        with torch.inference_mode(False), torch.enable_grad():
            _BASELINE = defaults()
            restore()
            yield
    finally:
        _BASELINE = caller
        restore()
        _BASELINE = previous_baseline
        for pack, unpack in hooks:
            torchcompat.push_saved_tensor_hooks(pack, unpack)
        torchcompat.put_function_modes(modes)


def _take_saved_tensor_hooks() -> list[tuple[Any, Any]]:
    """Pop the caller's saved-tensor hooks (bottom first), to be pushed back afterwards."""
    hooks = []
    while (top := torchcompat.top_saved_tensor_hooks()) is not None:
        hooks.append(top)
        torchcompat.pop_saved_tensor_hooks()
    return hooks[::-1]


def after_import(module: str) -> None:
    """Called when a user module was imported: remember and undo what the import changed."""
    changes = restore()
    if changes:
        IMPORT_CHANGES[module] = changes
    else:
        IMPORT_CHANGES.pop(module, None)


def _show(value: Any) -> str:
    if callable(value) and hasattr(value, "__qualname__"):
        return f"{getattr(value, '__module__', '?')}.{value.__qualname__}"
    return str(value).removeprefix("torch.")
