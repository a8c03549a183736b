"""What a worker process prints, kept bounded in the parent: its first and last bytes. A
Function that prints hundreds of MiB costs neither memory nor disk, and what it printed last
before a crash (a native assert, say) is still there to quote, since the parent reads the pipe
to its end after the worker dies."""
from __future__ import annotations

import os
import threading
import time

HEAD_BYTES = 64 * 1024
"""The first bytes kept: what the worker printed while starting (an import error)."""
TAIL_BYTES = 64 * 1024
"""The last bytes kept: what a case printed before it crashed."""


class Output:
    """A worker's stdout and stderr, read from a pipe by a thread of the parent."""

    def __init__(self) -> None:
        self.size = 0
        """Bytes printed so far (kept or not)."""
        self._head = bytearray()
        self._tail = bytearray()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._last = time.monotonic()

    def read_from(self, fd: int) -> None:
        """Drain ``fd`` (the pipe's read end, closed at its end of file) in a daemon thread."""
        self._thread = threading.Thread(target=self._drain, args=(fd,), daemon=True,
                                        name="gradverify-worker-output")
        self._thread.start()

    def _drain(self, fd: int) -> None:
        try:
            while chunk := os.read(fd, 65536):
                self.keep(chunk)
        except OSError:
            pass
        finally:
            os.close(fd)

    def keep(self, chunk: bytes) -> None:
        with self._lock:
            self._last = time.monotonic()
            room = max(0, HEAD_BYTES - len(self._head))
            self._head += chunk[:room]
            self._tail += chunk[room:]
            del self._tail[:-TAIL_BYTES]
            self.size += len(chunk)

    def settle(self, wait: float = 0.5) -> None:
        """Give the reader a moment to take what a worker that just died still had in the pipe:
        until its end of file, or until nothing new came for 0.1 s (a process the worker
        started may hold the pipe open)."""
        deadline = time.monotonic() + wait
        while self._thread is not None and self._thread.is_alive() \
                and time.monotonic() < deadline:
            with self._lock:
                if time.monotonic() - self._last >= 0.1:
                    return
            self._thread.join(0.02)

    def since(self, offset: int) -> str:
        """What was printed from byte ``offset`` on, as far as it was kept (a gap marked)."""
        with self._lock:
            head_end = len(self._head)
            tail_start = self.size - len(self._tail)
            parts = []
            if offset < head_end:
                parts.append(bytes(self._head[offset:]))
            if tail_start > max(offset, head_end):
                parts.append(b"\n...\n")
            parts.append(bytes(self._tail[max(0, offset - tail_start):]))
        return b"".join(parts).decode(errors="replace")


def last_lines(output: Output, offset: int = 0, lines: int = 5) -> str:
    """``; its last output: a | b | c``: the last lines a worker printed since ``offset`` (its
    current task's output), or "" when it printed nothing."""
    output.settle()
    text = output.since(offset).strip().splitlines()
    tail = [line for line in text if line.strip()][-lines:]
    return ("; its last output: " + " | ".join(tail)) if tail else ""
