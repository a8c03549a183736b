"""One probe process for every recorded Function (``python -m gradverify.recording.shrink``):
it imports torch, gradverify and the user's modules once, then answers one request a line, a
Function at a time. Starting a fresh interpreter per Function cost more than probing it (about
2 s each, with torch's import); a Function whose probe kills the process or runs past
``PROBE_TIMEOUT`` costs its own probe, and the next Function gets a fresh process."""
from __future__ import annotations

import json
import selectors
import signal
import subprocess
import time
from typing import Any

from gradverify.run import processes
from gradverify.run.processes import Process

PROBE_TIMEOUT = 120.0
"""Seconds the probe of one Function may take before its process is stopped."""


class ProbeFailed(Exception):
    """The probe of one Function ended without an answer; the message says how."""


class Prober:
    """A probe process, started on the first request and kept for the next ones; ``close``
    ends it."""

    def __init__(self, timeout: float = PROBE_TIMEOUT) -> None:
        self.timeout = timeout
        self.process: Process | None = None
        self.started = 0
        """Processes started so far (one, unless a probe ended one)."""

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        """The answer to one request, or ``ProbeFailed``."""
        process = self._running()
        assert process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(json.dumps(request).encode() + b"\n")
            process.stdin.flush()
        except OSError:
            self.close()
            raise ProbeFailed(f"the probe process ended ({_ended(process.wait())})") from None
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            deadline = time.monotonic() + self.timeout
            while True:
                if not selector.select(max(0.0, deadline - time.monotonic())):
                    self.close(kill=True)
                    raise ProbeFailed(f"it did not finish within {self.timeout:g} s")
                line = process.stdout.readline()
                if not line:
                    self.close()
                    raise ProbeFailed(f"the probe process ended ({_ended(process.wait())})")
                try:
                    return dict(json.loads(line))
                except ValueError:
                    continue  # not an answer: never expected, since the user's output is elsewhere

    def start(self) -> Prober:
        """Start the process now (it imports torch and gradverify while the script runs)."""
        self._running()
        return self

    def _running(self) -> Process:
        if self.process is None or self.process.poll() is not None:
            self.process = processes.start("gradverify.recording.shrink", stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            self.started += 1
        return self.process

    def close(self, *, kill: bool = False) -> None:
        """End the process: at the end of its requests, or at once (``kill``)."""
        process, self.process = self.process, None
        if process is None:
            return
        if process.stdin is not None:
            try:
                process.stdin.close()  # the end of the requests: it exits
            except OSError:
                pass
        try:
            process.wait(timeout=0 if kill else 5)
        except subprocess.TimeoutExpired:
            processes.kill_group(process)
            process.wait()
        if process.stdout is not None:
            process.stdout.close()

    def __enter__(self) -> Prober:
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        self.close(kill=kind is not None)  # on Ctrl-C, at once


def _ended(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"
