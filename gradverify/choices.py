"""The choices of each run option and their parsing, once: the validators of the option table
(``optiontable``), which ``config`` (pyproject), ``options`` (flags over pyproject) and the
command line read. Nothing here imports torch: a device is checked for its spelling only."""
from __future__ import annotations

import math
import os
import re
from typing import Any

from gradverify.errors import UsageError, did_you_mean, one_of

DEVICES = ("cpu", "cuda")
"""The device types a run takes; ``--device``, ``device =`` and ``verify(device=)`` also take an
index (``cuda:1``), as torch writes devices."""
DEVICE_RE = re.compile(rf"^({'|'.join(DEVICES)})(:(0|[1-9][0-9]?|1[01][0-9]|12[0-7]))?\Z")
"""As torch reads a device: an index in ASCII digits without a leading zero, at most 127 (torch
keeps it in 8 bits: ``cuda:128`` would be ``cuda:-128``)."""
DEFAULT_DEVICE = "cpu"
DEFAULT_MODE = "auto"
DEFAULT_SEED = 0
DEFAULT_TIMEOUT = 300.0
"""Seconds a case may run before its worker is killed (isolated runs)."""
MAX_TIMEOUT = 1_000_000.0
"""The largest ``--timeout`` (11 days): waits take no more (``inf`` is a usage error)."""


def choice(option: str, value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:  # as a spec or pyproject says it
        raise UsageError(f"{option}: invalid value {value!r}{did_you_mean(value, choices)}; "
                         f"{one_of(choices)}")
    return value


def check_device(device: str) -> str:
    """A device's spelling (``cpu``, ``cuda``, ``cuda:1``), checked without importing torch:
    whether this machine has it is the worker's question (``run.prepare.device_problem``)."""
    if not isinstance(device, str) or not DEVICE_RE.match(device):
        raise UsageError(f"device: expected cpu, cuda or cuda:N (N from 0 to 127), got {device!r}")
    return device


def check_tolerance(name: str, value: float, *, positive: bool = False) -> float:
    """A tolerance (``atol``, ``rtol``) or step (``eps``, ``positive``) given to the run: a
    finite number, at least 0 (more than 0 for a step). nan or inf would turn every comparison
    into a pass or a failure."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise UsageError(f"{name}: must be a finite number {'> 0' if positive else '>= 0'}, "
                         f"got {value!r}")
    return float(value)


def check_timeout(timeout: float) -> float:
    """Seconds per case: more than 0, at most ``MAX_TIMEOUT``."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
            or not 0 < timeout <= MAX_TIMEOUT:
        raise UsageError(f"timeout: must be > 0 and at most {MAX_TIMEOUT:g} seconds, got "
                         f"{timeout}")
    return float(timeout)


def parse_jobs(value: int | str | None) -> int:
    """``-j N`` or ``auto`` (the number of cores)."""
    if value is None:
        return 1
    if value == "auto":
        return cores()
    text = str(value)
    if isinstance(value, bool) or not text.isdigit() or int(text) < 1:
        raise UsageError(f"-j/--jobs: expected a positive integer or 'auto', got {value!r}")
    return int(text)


WORKERS_PER_CORE = 2
"""``-j`` never starts more workers than this many per core (nor more than there are cases)."""


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def worker_count(requested: int, cases: int, available: int) -> tuple[int, str | None]:
    """How many workers a run of ``cases`` cases starts for ``-j requested`` on ``available``
    cores, and the note that says so when that is fewer than asked for."""
    by_cores = WORKERS_PER_CORE * available
    count = max(1, min(requested, cases, by_cores))
    if count >= requested:
        return count, None
    why = (f"there {'is 1 case' if cases == 1 else f'are {cases} cases'}" if cases <= by_cores
           else f"at most {WORKERS_PER_CORE} per core ({available} core"
                f"{'s' * (available != 1)})")
    return count, f"-j {requested} lowered to {count} worker{'s' * (count != 1)}: {why}"


def parse_shard(value: str | None) -> tuple[int, int] | None:
    """``K/N``: the K-th of N slices."""
    if value is None:
        return None
    k, sep, n = value.partition("/")
    if not (sep and k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise UsageError(f"--shard: expected K/N with 1 <= K <= N, like 2/4; got {value!r}")
    return int(k), int(n)


def keyword_names(value: Any, argument: str) -> tuple[str, ...]:
    """``verify(checks=...)``, ``skip=``, ``cases=``: one name (a string is one name, never its
    letters) or an iterable of names; TypeError in verify's words otherwise."""
    if isinstance(value, str):
        return (value,)
    try:
        names = tuple(value)
    except TypeError:
        raise TypeError(f"verify({argument}=...) takes a name or an iterable of names, got "
                        f"{type(value).__name__}") from None
    wrong = next((n for n in names if not isinstance(n, str)), None)
    if wrong is not None:
        raise TypeError(f"verify({argument}=...) takes names (strings), got "
                        f"{type(wrong).__name__} {wrong!r} among them")
    return names
