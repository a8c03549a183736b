"""torch's compiler cache (TorchInductor's: ``torch.compile``, and ``torch.utils.checkpoint``
through torch._dynamo, which makes it as it is imported) in a folder of the run, removed at
its end, instead of ``$TMPDIR/torchinductor_<user>``, which outlives the run. Where the user
named one (``TORCHINDUCTOR_CACHE_DIR``), it is theirs and used as it is (docs/runs.md).
Never imports torch."""
from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator

VARIABLE = "TORCHINDUCTOR_CACHE_DIR"
"""Where torch's compiler keeps its cache (read each time torch asks, set by torch once it has
asked)."""


@contextlib.contextmanager
def compiler_cache() -> Iterator[str | None]:
    """A folder for the compiler cache of the run's processes, removed when the block ends;
    None where the user named one."""
    if os.environ.get(VARIABLE):
        yield None
        return
    try:
        folder = tempfile.mkdtemp(prefix="gradverify-compiler-")
    except OSError:  # no temporary folder to write: torch's own default, as without us
        yield None
        return
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


_PROCESS_FOLDER: list[str] = []
"""This process's folder for in-process runs (made by the first, removed at exit): torch keeps
the cache path it was first given for the life of the process (``functools.cache``), so a
folder removed after one run would be written again by the next."""


@contextlib.contextmanager
def in_this_process() -> Iterator[None]:
    """The compiler cache of what runs in this process, while the block runs: in a folder of
    this process's, removed when it exits, unless the user (or torch, earlier in this process)
    named one; the environment given back afterwards."""
    if os.environ.get(VARIABLE):
        yield
        return
    if not _PROCESS_FOLDER:
        try:
            _PROCESS_FOLDER.append(tempfile.mkdtemp(prefix="gradverify-compiler-"))
        except OSError:  # no temporary folder to write: torch's own default
            yield
            return
        atexit.register(shutil.rmtree, _PROCESS_FOLDER[0], ignore_errors=True)
    folder = _PROCESS_FOLDER[0]
    os.environ[VARIABLE] = folder
    try:
        yield
    finally:
        if os.environ.get(VARIABLE) == folder:
            del os.environ[VARIABLE]


def use(folder: str) -> None:
    """In a worker, before torch is imported: its compiler cache goes to the run's ``folder``
    (none: the user named one, which the worker inherited)."""
    if folder:
        os.environ[VARIABLE] = folder
