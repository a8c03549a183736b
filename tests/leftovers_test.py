"""What a case leaves running (``run/leftovers.py``): what torch itself starts is never the
user's, however slowly it gets going. On a loaded machine a compile worker torch forks has not
yet run ``exec`` when the case ends, so its command line is still the worker's own: it is given
time to become what it will be, and only then judged."""
from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
import torch

from gradverify.run import leftovers

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="processes read from /proc")

TORCH_FILE = os.path.realpath(torch.__file__)


def _fork_then_exec(delay: float, argv: list[str]) -> int:
    """A child that keeps this process's program for ``delay`` seconds, then runs ``argv``."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover -- the child
        time.sleep(delay)
        os.execv(argv[0], argv)
    return pid


def _stop(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except OSError:
        pass


def test_a_torch_worker_forked_but_not_yet_execd_is_torchs():
    before = leftovers.snapshot()
    # what torch's compile worker looks like once it has exec'd: a file in torch's folder
    pid = _fork_then_exec(0.2, [sys.executable, "-c", "import time; time.sleep(30)", TORCH_FILE])
    try:
        threads, processes = leftovers.since(before)
        assert processes == [] and threads == []
    finally:
        _stop(pid)


def test_a_users_process_is_still_the_users():
    before = leftovers.snapshot()
    pid = _fork_then_exec(0.1, [sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        _, processes = leftovers.since(before)
        assert processes == [pid]
    finally:
        _stop(pid)


def test_a_fork_that_never_execs_is_the_users_after_the_grace():
    before = leftovers.snapshot()
    pid = os.fork()
    if pid == 0:  # pragma: no cover -- the child
        time.sleep(30)
        os._exit(0)
    try:
        started = time.monotonic()
        _, processes = leftovers.since(before)
        assert processes == [pid]
        assert time.monotonic() - started < leftovers.GRACE_S + 1.5
    finally:
        _stop(pid)
