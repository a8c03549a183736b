"""``gradverify record``: capture each user-defined Function's calls during a real run
(``capture``, in the script's process, started by ``launch``; the calls go through a ``spool``),
shrink them to small specs with back-off (``shrink``, pure functions over frozen values, run in
one probe process for every Function: ``prober``), and write the specs (``write``).

``record(folder)`` is the Python API (also ``gradverify.record``).
"""
from __future__ import annotations

from typing import Any

__all__ = ["record"]


def __getattr__(name: str) -> Any:
    if name == "record":  # imported when asked for: ``spool`` and ``shrink`` need none of it
        from gradverify.recording.capture import record

        return record
    raise AttributeError(f"module 'gradverify.recording' has no attribute {name!r}")
