"""What the end-to-end tests of hostile inputs and environments share (``files_test.py``,
``worker_test.py``, ``terminal_test.py`` and others): the installed ``gradverify`` run as a user
runs it, the sample project they run it in, and what they look at afterwards (the user's files,
the processes left)."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import functions

GRADVERIFY = shutil.which("gradverify") or ""
needs_command = pytest.mark.skipif(not GRADVERIFY,
                                   reason="the gradverify command is not installed")
"""``pytestmark`` of the tests that run the installed ``gradverify`` command."""


def require_command() -> None:
    """Skip the calling test where the ``gradverify`` command is not installed."""
    if not GRADVERIFY:
        pytest.skip("the gradverify command is not installed")


GOOD = functions.module(functions.square("Good"))
SIGN_BUG = functions.module(functions.square("SignBug", gradient="-2 * x * grad"))
GOOD_SPEC = "target: good:Good\ncases:\n  - name: vec\n    args: {x: {shape: [3]}}\n"
NO_ROOT = ("capsh", "--drop=cap_dac_override,cap_dac_read_search,cap_fowner", "--", "-c")
"""A wrap for ``gv`` that drops root's override capabilities: permissions apply."""


def gv(cwd: Path, *args: str, timeout: float = 120, wrap: tuple[str, ...] = (),
       env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The installed command, as a user runs it (``wrap``: capsh, prlimit, ...)."""
    command = [*wrap, GRADVERIFY, *args] if not wrap or wrap[0] != "capsh" else \
        [*wrap, " ".join([GRADVERIFY, *args])]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL,
                          env={**os.environ, "NO_COLOR": "1", **(env or {})})


def make_project(root: Path) -> Path:
    """``good.py`` (a correct Function) and ``specs/good.yaml`` naming it."""
    (root / "good.py").write_text(GOOD)
    (root / "specs").mkdir()
    (root / "specs" / "good.yaml").write_text(GOOD_SPEC)
    return root


def digest(root: Path) -> dict[str, str]:
    """Every file's content hash below ``root``: what the user has."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def unwrap(text: str) -> str:
    return " ".join(text.split())


def marked_processes(marker: str) -> list[int]:
    """Processes whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "cmdline").read_text().replace("\0", " "):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def processes_in(folder: Path) -> list[int]:
    """Processes working in ``folder`` (what a run there started, and nothing of the tests
    running beside it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if Path(os.readlink(entry / "cwd")) == folder:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found
