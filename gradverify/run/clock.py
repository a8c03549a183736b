"""A clock of the time this process ran: ``time.monotonic()`` less the time it was stopped
(SIGSTOP, Ctrl-Z). The pool charges a case's time limit by it, so that a run the user stopped
for a while does not time out its cases when it is continued (docs/runs.md)."""
from __future__ import annotations

import threading
import time

TICK = 0.2
"""Seconds between the ticks of the thread that watches for stops."""
LATE = 1.0
"""A tick this many seconds late or more was a stop of the process (a loaded machine delays a
thread by less; where it delays it more, a case only gets longer, never a false timeout)."""


class RunningClock:
    """``now()``: seconds this process has run, on ``time.monotonic()``'s scale. A daemon
    thread ticks every ``TICK`` seconds while the clock is open; a tick that comes late by
    ``LATE`` or more adds its lateness to the time stopped. ``now()`` counts a tick that is
    that late already, before the thread has run again: the first to run after a stop may be
    the one that reads the clock."""

    def __init__(self) -> None:
        self.stopped = 0.0
        self._last = time.monotonic()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="gradverify-clock",
                                        daemon=True)
        self._thread.start()

    def now(self) -> float:
        with self._lock:
            current = time.monotonic()
            return current - self.stopped - self._late(current)

    def close(self) -> None:
        self._closed.set()

    def _late(self, current: float) -> float:
        late = current - self._last - TICK
        return late if late >= LATE else 0.0

    def _watch(self) -> None:
        while not self._closed.wait(TICK):
            with self._lock:
                current = time.monotonic()
                self.stopped += self._late(current)
                self._last = current
