"""What a worker process prints, kept bounded in the parent: its first and last bytes. A
Function that prints hundreds of MiB costs neither memory nor disk, and what it printed last
before a crash (a native assert, say) is still there to quote, since the parent reads the pipe
to its end after the worker dies.

The worker writes ``TASK_MARK`` into the stream before and after each task (its own buffers
flushed first): the parent reads the marks in the order they were written, so what it quotes for
a task that crashed is that task's output, never the end of the one before, however far the
reader thread lags behind."""
from __future__ import annotations

import fcntl
import os
import select
import struct
import termios
import threading
import time

HEAD_BYTES = 64 * 1024
"""The first bytes kept: what the worker printed while starting (an import error)."""
TAIL_BYTES = 64 * 1024
"""The last bytes kept: what a case printed before it crashed."""
TASK_MARK = b"\x00gradverify-task\x00\n"
"""Written by the worker where a task's output starts and ends; never kept."""


class Output:
    """A worker's stdout and stderr, read from a pipe by a thread of the parent."""

    def __init__(self) -> None:
        self.size = 0
        """Bytes printed so far (kept or not), marks left out."""
        self.mark = 0
        """``size`` at the last mark: where the current task's output starts."""
        self._partial = b""  # the stream's last bytes, when they may begin a mark
        self._head = bytearray()
        self._tail = bytearray()
        self._lock = threading.Lock()
        self._reading = threading.Lock()  # held from a read until what it read is kept
        self._fd: int | None = None
        self._thread: threading.Thread | None = None

    def read_from(self, fd: int) -> None:
        """Drain ``fd`` (the pipe's read end, closed at its end of file) in a daemon thread."""
        self._fd = fd
        self._thread = threading.Thread(target=self._drain, args=(fd,), daemon=True,
                                        name="gradverify-worker-output")
        self._thread.start()

    def _drain(self, fd: int) -> None:
        try:
            ready = select.poll()  # not select.select: a descriptor may be over FD_SETSIZE
            ready.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
            while True:
                ready.poll()  # waits without the lock: data, or the end
                with self._reading:
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        break
                    self.keep(chunk)
        except OSError:
            pass
        finally:
            with self._reading:
                self._fd = None
                os.close(fd)

    def keep(self, chunk: bytes) -> None:
        with self._lock:
            data = self._partial + chunk
            while (at := data.find(TASK_MARK)) >= 0:
                self._append(data[:at])
                self.mark = self.size
                data = data[at + len(TASK_MARK):]
            held = next((n for n in range(min(len(TASK_MARK) - 1, len(data)), 0, -1)
                         if TASK_MARK.startswith(data[-n:])), 0)
            self._partial = data[len(data) - held:]
            self._append(data[:len(data) - held])

    def _append(self, data: bytes) -> None:
        room = max(0, HEAD_BYTES - len(self._head))
        self._head += data[:room]
        self._tail += data[room:]
        del self._tail[:-TAIL_BYTES]
        self.size += len(data)

    def settle(self, wait: float = 0.5) -> None:
        """Wait (at most ``wait`` seconds) until the reader has kept everything a worker that
        just died wrote: until nothing is left unread in the pipe. A process the worker started
        may hold the pipe open and write on; what it writes later is not waited for."""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            with self._reading:
                if self._fd is None or _unread(self._fd) == 0:
                    return
            time.sleep(0.01)

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
            parts.append(self._partial)  # a worker that died while writing what looks like a mark
        return b"".join(parts).decode(errors="replace")


def _unread(fd: int) -> int:
    """How many bytes wait in the pipe ``fd``."""
    return int(struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4))[0])


def last_lines(output: Output, lines: int = 5) -> str:
    """``; its last output: a | b | c``: the last lines a worker printed since its last mark
    (the current task's output, or all of it before its first task), or "" when it printed
    nothing."""
    output.settle()
    text = output.since(output.mark).strip().splitlines()
    tail = [line for line in text if line.strip()][-lines:]
    return ("; its last output: " + " | ".join(tail)) if tail else ""
