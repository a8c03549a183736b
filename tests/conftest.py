from __future__ import annotations

import functools
import os
import re
import sys
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest
from click.testing import CliRunner

from gradverify.cli import main

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
WARM = TESTS / "warm"
"""The suite's warm interpreter, test-only (``pytest_configure``)."""
sys.path.insert(0, str(TESTS))
sys.path.insert(0, str(WARM))


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    @property
    def flat(self) -> str:
        """stdout + stderr with wrapped lines joined again (the report wraps at 100 columns)."""
        return unwrap(self.output)


def unwrap(text: str) -> str:
    return re.sub(r"\n {4,}", " ", text)


def run_cli(*args: str, isolate: bool = False) -> Result:
    """Run `gradverify ARGS` through click's CliRunner isolation and our one exit boundary.
    `check` runs in-process unless ``isolate`` (worker processes cost a torch import each);
    pool_test.py covers the isolated default."""
    if args and args[0] == "check" and not isolate:
        args = (*args, "--no-isolate")
    runner = CliRunner()
    with runner.isolation(env={"NO_COLOR": "1"}) as streams:
        code = main(list(args))
        sys.stdout.flush()
        sys.stderr.flush()
    return Result(code, streams[0].getvalue().decode(), streams[1].getvalue().decode())


class Project:
    """A temporary project directory (the current directory during the test)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def write(self, name: str, text: str) -> Path:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        return path


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Project:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield Project(tmp_path)
    # Modules written by one test must not leak into the next under the same names.
    for name in set(sys.modules) - before:
        module = sys.modules.get(name)
        if getattr(module, "__file__", None) and str(tmp_path) in str(module.__file__):
            del sys.modules[name]


@pytest.fixture
def in_repo(monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(ROOT)
    return ROOT


T = TypeVar("T")


def slow_first(items: Sequence[T], slow: Callable[[T], bool]) -> list[T]:
    """The slow items, then the others, each in the order given. pytest-xdist hands tests out in
    collection order: a long end-to-end run started first overlaps the many short tests, where
    started last it keeps one worker busy after the others have run out of tests."""
    return [item for item in items if slow(item)] + [item for item in items if not slow(item)]


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: unknown with -p no:xdist
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker more than there are cores. For about a fifth of the suite's time
    a worker only waits (a hang that must time out, a process starting, a sleep that a signal
    test needs), and the extra worker keeps the cores busy meanwhile."""
    return (os.cpu_count() or 1) + 1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items[:] = slow_first(items, lambda item: item.get_closest_marker("slow") is not None)


CALLERS_ENVIRONMENT = ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "CLICOLOR",
                       "CLICOLOR_FORCE", "TERM", "TTY_COMPATIBLE", "TTY_INTERACTIVE",
                       "LC_ALL", "LC_CTYPE", "LANG", "LANGUAGE", "PYTHONIOENCODING", "PYTHONUTF8")
"""What the caller's terminal and locale set and the report reads (width, colour, encoding):
removed for every test, so that a wide terminal or ``LC_ALL=C`` changes no verdict. A test of
one of them sets it itself (``monkeypatch.setenv``, or ``env=`` for a subprocess)."""
QUIET_ENVIRONMENT = {"NO_COLOR": "1"}
"""Set for every test: no colour unless a test asks for it."""
ONE_THREAD = {"OMP_NUM_THREADS": "1"}
"""Set for every test, and so for every torch process the suite starts (xdist workers, commands,
their workers): one intra-op thread. ``pytest -n auto`` already runs a test per core; a torch
process with a thread per core on top oversubscribes the cores, and OpenMP's threads spin while
they wait (two `check` commands side by side on 2 cores took 13.0 s each way, 6.0 s
with one thread each). No verdict depends on it; a test of thread counts sets its own."""


def _make_hermetic(setenv: Callable[[str, str], None], delenv: Callable[[str], None]) -> None:
    for key in CALLERS_ENVIRONMENT:
        delenv(key)
    for key, value in {**QUIET_ENVIRONMENT, **ONE_THREAD}.items():
        setenv(key, value)


# At import, for what runs before any fixture (collection, session fixtures, xdist workers)...
_make_hermetic(os.environ.__setitem__, lambda key: os.environ.pop(key, None))


@pytest.fixture(autouse=True)
def _hermetic_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """... and again for every test, whatever the test before it left: subprocesses inherit it."""
    _make_hermetic(monkeypatch.setenv, lambda key: monkeypatch.delenv(key, raising=False))


pytest_plugins = ["pytester"]


def pytest_configure(config: pytest.Config) -> None:
    """Compile gradverify's modules once (where ``PYTHONDONTWRITEBYTECODE`` is set, each of
    the some 200 commands the tests run would compile them again, 0.2 s of CPU each), and
    start a warm interpreter for this pytest process (not for xdist's controller, which runs
    no test), and name it to everything the tests start: gradverify's workers and probes are
    then forked from it instead of importing torch anew (``tests/warm/``, about 2 s of CPU
    each, some 250 times a run). The package itself knows nothing of it: ``warm/`` goes on
    ``PYTHONPATH``, whose ``sitecustomize`` puts ``warm_client.start`` in place of
    ``processes.start`` in each Python the tests start, as this does here. A test of how a
    fresh process starts or ends unsets ``GRADVERIFY_TESTS_WARM`` (``fresh_processes``)."""
    import compileall

    import gradverify
    from gradverify.syspath import own_module_command

    if not hasattr(config, "workerinput"):  # once, before xdist's workers start
        compileall.compile_dir(os.path.dirname(gradverify.__file__), quiet=2)
    if config.pluginmanager.hasplugin("xdist") and config.getoption("numprocesses", None) \
            and not hasattr(config, "workerinput"):
        return
    import subprocess
    import tempfile

    import warm_client

    from gradverify.run import processes

    rest = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(WARM), *([rest] if rest else [])])
    folder = tempfile.mkdtemp(prefix="gradverify-warm-")
    address = os.path.join(folder, "socket")
    with open(os.path.join(folder, "log"), "wb") as log:
        config._gradverify_warm = (subprocess.Popen(  # type: ignore[attr-defined]
            own_module_command("warm_server", address), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=log, preexec_fn=processes.child_setup(),
            start_new_session=True), folder)
    os.environ[warm_client.VARIABLE] = address
    warm_client.install()


def pytest_unconfigure(config: pytest.Config) -> None:
    started = getattr(config, "_gradverify_warm", None)
    if started is None:
        return
    import shutil

    from gradverify.run import leftovers

    process, folder = started
    left = sorted(leftovers.descendants(process.pid))
    process.kill()
    process.wait()
    leftovers.kill(left)
    if os.environ.get("GRADVERIFY_TESTS_WARM_KEEP_LOG"):
        print(f"\nwarm interpreter's log: {folder}/log")
    else:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def fresh_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """gradverify's processes start as fresh Pythons, as outside the suite: for a test of how
    one starts or ends (its start deadline, its death, what it inherits)."""
    import warm_client

    monkeypatch.delenv(warm_client.VARIABLE, raising=False)


@functools.cache
def _warm_gradverify() -> str:
    """Where the warm interpreter imported gradverify from: as it started (BOOT drops
    sys.path[0]), asked once."""
    import subprocess

    return subprocess.run([sys.executable, "-c", "import os, sys; del sys.path[0]; import "
                           "gradverify; print(os.path.dirname(gradverify.__file__))"],
                          capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def warm_interpreter() -> str:
    """The address of this pytest process's warm interpreter, once it answers (it imports
    torch as the tests start). Skips where it runs another gradverify than this process (the
    torch matrix installs one, and the tests import this tree's): it forks nothing for us."""
    import socket
    import time

    import warm_client

    import gradverify

    where = _warm_gradverify()
    if where != os.path.dirname(gradverify.__file__):
        pytest.skip(f"the warm interpreter imports another gradverify ({where})")
    address = os.environ[warm_client.VARIABLE]
    deadline = time.monotonic() + 120
    while True:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(address)
                return address
            except OSError:
                if time.monotonic() > deadline:
                    raise
        time.sleep(0.1)
