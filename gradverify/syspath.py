"""Where Python finds modules, for the user's imports and for gradverify's own processes.

The user's working directory is on sys.path for the user's imports only (docs/commands.md): it
goes after the standard library, so that a ``json.py`` there never replaces the standard
library's module that gradverify or torch import later; and gradverify starts its own modules
(workers, ``record``'s launcher) in interpreters that do not put it first, so that a
``gradverify.py`` there is never run in gradverify's place. Never imports torch.
"""
from __future__ import annotations

import os
import sys


def ensure_cwd_on_path() -> None:
    """Put the current directory on sys.path for the user's imports, as ``python -m`` does
    (unless it is there already, as ``''``)."""
    if "" not in sys.path:
        add_user_path(os.getcwd())


def add_user_path(folder: str) -> None:
    """Put a folder of the user's on sys.path: after the standard library, so that a
    ``json.py`` or ``hashlib.py`` there is the user's module and never replaces the standard
    library's (which gradverify and torch import later, lazily); before installed packages, so
    that a package being worked on there wins over an installed copy of it."""
    if folder not in sys.path:
        sys.path.insert(_after_stdlib(), folder)


def _after_stdlib() -> int:
    """The position on sys.path just after the standard library's folders (its zip, its
    folder, lib-dynload)."""
    import sysconfig

    stdlib = {os.path.realpath(sysconfig.get_path(key)) for key in ("stdlib", "platstdlib")}
    zips = {os.path.join(os.path.dirname(folder),
                         f"python{sys.version_info[0]}{sys.version_info[1]}.zip")
            for folder in stdlib}
    last = -1
    for index, entry in enumerate(sys.path):
        real = os.path.realpath(entry) if entry else ""
        inside = os.path.dirname(real) in stdlib and not real.endswith("-packages")
        if real in stdlib or real in zips or inside:
            last = index
    return last + 1


BOOT = ("import sys, runpy\n"
        "if not getattr(sys.flags, 'safe_path', False):\n"
        "    del sys.path[0]\n"
        "runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)\n")
"""How gradverify starts one of its own modules in a fresh interpreter: as ``python -m``
would, but without the working directory first on sys.path, so that a ``gradverify.py`` or
``json.py`` of the user's there is never run in its place."""


def own_module_command(module: str, *args: str) -> list[str]:
    """The command line that runs gradverify's ``module`` as ``__main__`` with ``args``."""
    return [sys.executable, "-c", BOOT, module, *args]
