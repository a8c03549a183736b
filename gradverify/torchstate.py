"""Torch's process-wide state that a check depends on: captured once, restored around each case.

A module that runs ``torch.set_grad_enabled(False)`` at import, or a forward that sets the
default dtype, would otherwise change the verdict of every target checked after it in the same
process. ``execute.run_case`` restores the state captured before any user code ran, before and after each
case, and reports what a target's import or a case changed (GV012), naming the setting.

Nothing here imports torch until ``baseline()`` is called, which happens only where user code is
about to be imported (a worker, or ``--no-isolate``); the parent process never calls it.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_BASELINE: dict[str, Any] | None = None
_GUARDS: list[Any] = []
"""Context guards entered to undo a guard the user entered and never left (inference mode)."""

IMPORT_CHANGES: dict[str, list[str]] = {}
"""What importing a module changed, by module name (reported on that module's targets)."""


@dataclass(frozen=True)
class Setting:
    name: str
    get: Callable[[], Any]
    set: Callable[[Any], None]


@functools.cache
def _settings() -> tuple[Setting, ...]:
    """The table of settings, built once (at the first capture, when torch is imported)."""
    import torch

    def set_inference(value: bool) -> None:
        guard = torch.inference_mode(value)
        guard.__enter__()  # left entered on purpose: it undoes a guard the user left entered
        _GUARDS.append(guard)

    def saved_hooks() -> bool:
        return torch._C._autograd._top_saved_tensors_default_hooks(False) is not None

    def pop_hooks(wanted: bool) -> None:
        while not wanted and saved_hooks():
            torch._C._autograd._pop_saved_tensors_default_hooks()

    def set_deterministic(value: tuple[bool, bool]) -> None:
        torch.use_deterministic_algorithms(value[0], warn_only=value[1])

    def set_anomaly(value: tuple[bool, bool]) -> None:
        torch.autograd.set_detect_anomaly(value[0], check_nan=value[1])

    settings = [
        Setting("grad mode", torch.is_grad_enabled, torch.set_grad_enabled),
        Setting("inference mode", torch.is_inference_mode_enabled, set_inference),
        Setting("default dtype", torch.get_default_dtype, torch.set_default_dtype),
        Setting("deterministic algorithms (enabled, warn_only)",
                lambda: (torch.are_deterministic_algorithms_enabled(),
                         torch.is_deterministic_algorithms_warn_only_enabled()),
                set_deterministic),
        Setting("anomaly mode (enabled, check_nan)",
                lambda: (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()),
                set_anomaly),
        Setting("number of threads", torch.get_num_threads, torch.set_num_threads),
        Setting("CPU autocast", *_autocast(torch)),
        Setting("saved-tensor hooks installed", saved_hooks, pop_hooks),
    ]
    if hasattr(torch, "get_default_device"):  # torch >= 2.3
        # None, not "cpu": setting a device installs a torch-function mode on every op
        settings.append(Setting("default device", lambda: str(torch.get_default_device()),
                                lambda value: torch.set_default_device(
                                    None if value == "cpu" else value)))
    return tuple(settings)


def _autocast(torch: Any) -> tuple[Callable[[], bool], Callable[[bool], None]]:
    try:  # torch >= 2.4 takes the device type; the cpu-only calls are deprecated there
        torch.is_autocast_enabled("cpu")
        return (lambda: torch.is_autocast_enabled("cpu"),
                lambda value: torch.set_autocast_enabled("cpu", value))
    except TypeError:
        return torch.is_autocast_cpu_enabled, torch.set_autocast_cpu_enabled


def capture() -> dict[str, Any]:
    return {s.name: s.get() for s in _settings()}


def baseline() -> dict[str, Any]:
    """The state before any user code ran (captured at the first call)."""
    global _BASELINE
    if _BASELINE is None:
        _BASELINE = capture()
    return _BASELINE


def restore() -> list[str]:
    """Put every setting back to the baseline; what differed, as ``name: before -> now``.
    Does nothing before ``baseline()`` was called."""
    if _BASELINE is None:
        return []
    changed = []
    for setting in _settings():
        now, want = setting.get(), _BASELINE[setting.name]
        if now != want:
            changed.append(f"{setting.name}: {_show(want)} -> {_show(now)}")
            setting.set(want)
    return changed


def after_import(module: str) -> None:
    """Called when a user module was imported: remember and undo what the import changed."""
    changes = restore()
    if changes:
        IMPORT_CHANGES[module] = changes
    else:
        IMPORT_CHANGES.pop(module, None)


def _show(value: Any) -> str:
    return str(value).removeprefix("torch.")
