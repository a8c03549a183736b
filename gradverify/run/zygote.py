"""A warm interpreter (``python -c BOOT gradverify.run.zygote SOCKET``) that forks gradverify's
own processes for ``run/processes.py`` instead of a fresh Python importing torch each time.

The test suite runs one per pytest process and names it in ``GRADVERIFY_ZYGOTE`` to everything
it starts (docs/contributing.md): it starts some 250 workers and probes, and torch's import,
about 2 s of CPU each, was half the suite's time. A child becomes what ``python -c BOOT MODULE
ARGS`` would have been: its own session, no core dumps, killed with the process that asked
for it, the asker's descriptors as its streams and ``pass_fds``, what else a child inherits
(limits, umask, nice value, CPUs, ignored and blocked signals), its working directory,
environment, ``sys.path`` and ``sys.argv``, the module run as ``__main__``, and an exit as
Python's (threads joined, ``atexit``, a status, or death by SIGINT after an uncaught Ctrl-C).
It declines (the asker then starts a fresh Python) what a fork could not make the same: another
interpreter or gradverify, limits it cannot take, or an environment
that differs in what Python and torch read as they start (``STARTUP``). One request per
connection: ``forked PID`` or ``declined WHY``, then ``exit N``. Linux only (``pidfd_open``).
"""
from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import runpy
import selectors
import signal
import site
import socket
import sys
import tempfile
import threading
import traceback
from typing import Any

from gradverify import syspath
from gradverify.run.processes import child_setup
from gradverify.torchstate import import_torch

STARTUP = ("PYTHON", "TORCH", "PYTORCH", "TRITON", "CUDA", "NVIDIA", "CUBLAS", "CUDNN", "NCCL",
           "HIP", "ROCM", "OMP_", "KMP_", "GOMP_", "MKL", "OPENBLAS", "BLIS", "NUMEXPR", "NPY_",
           "NUMPY", "SYMPY", "LD_", "DYLD_", "LC_", "XDG_")
"""Prefixes of the environment variables that Python, torch and what torch imports (its
compilers, BLAS and OpenMP, NumPy, SymPy) read when they start or are imported: a request
that differs in one is declined. What a user's module reads is read in the child, which
imports it afresh."""
STARTUP_NAMES = ("LANG", "LANGUAGE", "TMPDIR", "TEMP", "TMP", "HOME", "USER", "USERNAME",
                 "LOGNAME", "LNAME")
"""The same, by whole name: the locale, the temporary folder and the user (caches)."""


def serve(address: str) -> None:
    """Import what every child needs, listen on ``address``, say ``ready`` on stdout, and
    answer requests until the process that started this one ends it."""
    started = dict(os.environ)
    torch = import_torch()
    disable = getattr(getattr(torch, "compiler", None), "disable", None)
    if disable is not None:
        disable(lambda: None)  # imports the compiler, as checkpoint and torch.func do when used
    import gradverify.run.execute  # noqa: F401  (what a worker runs: imported once here)

    path = list(sys.path)
    imported = _Imported(started, path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    print("ready", flush=True)
    while True:
        for key, _ in selector.select():
            if key.fileobj is listener:
                _answer(listener.accept()[0], selector, imported)
            else:
                _ended(key.data, selector)


class _Imported:
    """What the imports left that a child must find as a fresh Python would: the environment
    as it was before them (requests are compared with it), what they set in it (torch sets
    variables for its own subprocesses), and ``sys.path``."""

    def __init__(self, started: dict[str, str], path: list[str]) -> None:
        self.started, self.path = started, path
        self.set = {key: value for key, value in os.environ.items()
                    if started.get(key) != value}


def _answer(conn: socket.socket, selector: selectors.BaseSelector, imported: _Imported) -> None:
    """Read one request; fork its child, or decline it."""
    try:
        conn.settimeout(10)
        request, fds = _request(conn)
    except (OSError, ValueError):
        conn.close()
        return
    why = _declined(request, imported)
    print(f"declined {request.get('module')}: {why}" if why else
          f"forking {request.get('module')}", file=sys.stderr, flush=True)
    if why is None:
        own = [key.fd for key in selector.get_map().values()]
        own.append(selector.fileno())  # type: ignore[attr-defined]  # its epoll descriptor
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError as exc:
            why = f"fork failed: {exc}"
        if not why and pid == 0:
            _become(request, fds, [*own, conn.fileno()], imported)
    for fd in fds:
        os.close(fd)
    try:
        conn.sendall(f"declined {why}\n".encode() if why else f"forked {pid}\n".encode())
    except OSError:
        pass
    if why:
        conn.close()
        return
    child = _Child(pid, conn, os.pidfd_open(pid))
    selector.register(conn, selectors.EVENT_READ, child)
    selector.register(child.pidfd, selectors.EVENT_READ, child)


class _Child:
    """A child being waited for: its pid, its asker's connection, and a descriptor that is
    readable once it has exited."""

    def __init__(self, pid: int, conn: socket.socket, pidfd: int) -> None:
        self.pid, self.conn, self.pidfd = pid, conn, pidfd
        self.reaped = False


def _ended(child: _Child, selector: selectors.BaseSelector) -> None:
    """The child exited (its status goes to the asker), or the asker closed its connection
    (it died: the child is killed, as ``PR_SET_PDEATHSIG`` would kill a child of its own)."""
    if child.reaped:  # both of its descriptors were ready at once
        return
    if os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        try:
            if child.conn.recv(1):
                return
        except OSError:
            pass
        try:
            os.kill(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _, status = os.waitpid(child.pid, 0)
    child.reaped = True
    try:
        child.conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
    except OSError:
        pass
    selector.unregister(child.conn)
    selector.unregister(child.pidfd)
    child.conn.close()
    os.close(child.pidfd)


def _request(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 64)
    while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
        more = conn.recv(1 << 20)
        if not more:
            raise ValueError("the request ended early")
        data += more
    return json.loads(data[4:]), list(fds)


def _declined(request: dict[str, Any], imported: _Imported) -> str | None:
    """Why this interpreter cannot become what the request asks for, or None."""
    executable = os.path.realpath(str(request.get("executable")))
    if (executable, request.get("prefix")) != (os.path.realpath(sys.executable), sys.prefix):
        return "another interpreter"
    if request.get("origin") != os.path.dirname(syspath.__file__):
        return "another gradverify"
    why = _cannot_inherit(request.get("inherited", {}))
    if why:
        return why
    env, started = as_python_starts(request.get("env", {})), imported.started
    differ = sorted(key for key in {*env, *started} if env.get(key) != started.get(key)
                    and env.get(key) != imported.set.get(key, started.get(key))
                    and (key.startswith(STARTUP) or key in STARTUP_NAMES)
                    and not (key == "PYTHONPATH" and _sys_path(request, imported))
                    and not (key == "HOME" and not _user_site(env) and not _user_site(started)))
    return f"the environment differs in {', '.join(differ)}" if differ else None


def _sys_path(request: dict[str, Any], imported: _Imported) -> list[str] | None:
    """``sys.path`` as a fresh Python started as the request says would have it (its
    ``PYTHONPATH`` first, absolute, without repeats), or None where that Python would have
    imported something else than this one did (``_shadowing``)."""
    given = request["env"].get("PYTHONPATH", "")
    if given == imported.started.get("PYTHONPATH", ""):
        return imported.path
    if imported.started.get("PYTHONPATH") or "" in given.split(os.pathsep):
        return None
    folders = [os.path.abspath(os.path.join(request["cwd"], entry))
               for entry in given.split(os.pathsep)]
    if any(_shadowing(folder) for folder in folders):
        return None
    return list(dict.fromkeys([*folders, *imported.path]))


def _user_site(env: dict[str, str]) -> str | None:
    """The folder of the user's own packages that Python puts on ``sys.path`` (``site``)
    under ``env``, where it exists: what a change of ``HOME`` changes as Python starts."""
    base = env.get("PYTHONUSERBASE") or os.path.join(env.get("HOME", "~"), ".local")
    folder = os.path.join(base, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}",
                          "site-packages")
    return folder if os.path.isdir(os.path.expanduser(folder)) else None


def _shadowing(folder: str) -> set[str]:
    """The modules in ``folder`` that a fresh Python with it on ``PYTHONPATH`` would import
    from there, where this one imported them from elsewhere (or would run as it starts:
    ``sitecustomize``)."""
    try:
        names = {entry.partition(".")[0] for entry in os.listdir(folder)}
    except OSError:
        return set()
    found = names & {"sitecustomize", "usercustomize"}
    for name in names & {name.partition(".")[0] for name in sys.modules}:
        file = os.path.realpath(getattr(sys.modules[name], "__file__", None) or folder)
        here = os.path.realpath(os.path.join(folder, name))
        if not (file.startswith(here + os.sep) or file.startswith(here + ".")):
            found.add(name)
    return found


def _cannot_inherit(inherited: dict[str, Any]) -> str | None:
    """Why a child could not take what the asker's children inherit (``processes.inherited``),
    or None: a limit above this process's hard limit, a lower nice value, an unknown mask."""
    import resource

    for name, (_, hard) in inherited.get("limits", {}).items():
        mine = resource.getrlimit(getattr(resource, name))[1]
        if hard != mine and (mine != resource.RLIM_INFINITY
                             and (hard == resource.RLIM_INFINITY or hard > mine)):
            return f"a higher hard limit {name}"
    if inherited.get("umask") is None or "cpus" not in inherited:
        return "what it inherits is not known"
    if not set(inherited["cpus"]) <= os.sched_getaffinity(0):
        return "CPUs this process may not run on"
    if inherited.get("nice", 0) < os.getpriority(os.PRIO_PROCESS, 0):
        return "a lower nice value"
    return None


def _inherit(inherited: dict[str, Any]) -> None:
    """Take what the asker's children inherit (``processes.inherited``)."""
    import resource

    for name, limit in inherited["limits"].items():
        resource.setrlimit(getattr(resource, name), tuple(limit))
    os.umask(inherited["umask"])
    os.setpriority(os.PRIO_PROCESS, 0, inherited["nice"])
    os.sched_setaffinity(0, inherited["cpus"])
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGPIPE, signal.SIGXFSZ):
            continue
        default = signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
        with contextlib.suppress(OSError, ValueError):
            signal.signal(sig, signal.SIG_IGN if int(sig) in inherited["ignored"] else default)
    signal.pthread_sigmask(signal.SIG_SETMASK, inherited["blocked"])


def as_python_starts(env: dict[str, str]) -> dict[str, str]:
    """The environment a fresh Python started with ``env`` has once started: where the
    locale of characters is C or POSIX, it sets ``LC_CTYPE`` to ``C.UTF-8`` (PEP 538, unless
    ``LC_ALL`` is set or ``PYTHONCOERCECLOCALE=0``); where C.UTF-8 does not exist, it differs
    from this process's, and the request is declined."""
    ctype = env.get("LC_CTYPE") or env.get("LANG") or "C"
    if env.get("LC_ALL") or env.get("PYTHONCOERCECLOCALE") == "0" or ctype not in ("C", "POSIX"):
        return env
    return {**env, "LC_CTYPE": "C.UTF-8"}


def _become(request: dict[str, Any], fds: list[int], own: list[int], imported: _Imported
            ) -> None:
    """In the forked child: become ``python -c BOOT MODULE ARGS`` as the request describes it,
    run the module, and exit as Python would. Never returns."""
    try:
        os.setsid()
        _inherit(request["inherited"])
        setup = child_setup()
        if setup is not None:
            setup()
        for fd in own:
            os.close(fd)
        _place(fds, request["fds"])
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update({**as_python_starts(request["env"]), **imported.set})
        tempfile.tempdir = None  # read from TMPDIR again, when first asked for
        site.USER_BASE = site.USER_SITE = None  # from HOME again
        sys.path[:] = _sys_path(request, imported) or imported.path
        sys.argv = ["-c", *request["args"]]
        sys.modules.pop(request["module"], None)
        code = _run_as_main(request["module"])
    except BaseException:  # noqa: BLE001  (nothing of a child may return to the loop)
        traceback.print_exc()
        code = 70
    os._exit(code)


def _place(fds: list[int], numbers: list[int]) -> None:
    """Put each received descriptor under its number in the asker (0, 1, 2, then
    ``pass_fds``), inheritable, and close the received copies."""
    above = max([*fds, *numbers]) + 1
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, above) for fd in fds]
    for fd in fds:
        os.close(fd)
    for fd, number in zip(moved, numbers):
        os.dup2(fd, number, inheritable=True)
    for fd in moved:
        os.close(fd)


def _run_as_main(module: str) -> int:
    """Run ``module`` as ``__main__``, and end as the interpreter would: join the threads
    that are not daemons, run ``atexit``'s functions, flush the streams; the exit status."""
    code = 0
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        code = _status(stop.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        _finish()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:  # noqa: BLE001  (as the interpreter: a traceback, status 1)
        traceback.print_exc()
        code = 1
    _finish()
    return code


def _finish() -> None:
    threading._shutdown()  # type: ignore[attr-defined]  # what Py_FinalizeEx runs first
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass


def _status(code: object) -> int:
    """The exit status of ``SystemExit(code)``, as Python sets it."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    serve(sys.argv[1])
