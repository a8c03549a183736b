"""``gradverify record``: capture each user-defined Function's calls during a real run
(``capture``, in the script's process, started by ``launch``), shrink them to small specs with
back-off (``shrink``, pure functions over frozen values), and write the specs (``write``).

``record(folder)`` is the Python API (also ``gradverify.record``)."""
from __future__ import annotations

from gradverify.recording.capture import record

__all__ = ["record"]
