"""gradcheck's slow and fast modes, shared by the gradient checks: the choices and the automatic
threshold. Never imports torch (the registry reads ``MODES`` to validate spec options)."""
from __future__ import annotations

MODES = ("auto", "slow", "fast")

SLOW_MODE_MAX_ENTRIES = 65_536
"""Automatic mode: slow (full Jacobians) while numel(inputs) x numel(outputs) is at most this."""

SMALLEST_SLOW_MAX_ENTRIES = 1_048_576
"""When every case of a spec is above SLOW_MODE_MAX_ENTRIES, the smallest one is also checked
in slow mode if its Jacobian has at most this many entries (fast mode can miss errors confined
to a few elements)."""


def resolve_mode(requested: str, entries: int) -> str:
    """``slow`` or ``fast``: as requested, or by the number of Jacobian entries for ``auto``."""
    if requested in ("slow", "fast"):
        return requested
    return "slow" if entries <= SLOW_MODE_MAX_ENTRIES else "fast"
