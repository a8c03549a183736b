"""The test suite's warm interpreter (``python -c BOOT warm_server SOCKET``, test-only): it forks
gradverify's own processes for ``warm_client.py`` instead of a fresh Python importing torch
each time.

``conftest.py`` runs one per pytest process and names it in ``GRADVERIFY_TESTS_WARM`` to
everything it starts (docs/contributing.md): the suite starts some 200 workers and probes, and
torch's import, about 2 s of CPU each, was half its time. A child becomes what ``python -c BOOT
MODULE ARGS`` started by the asker would have been (``warm_child.py``), and is killed when the
asker closes its connection (it died), as ``PR_SET_PDEATHSIG`` kills a child of its own.

It declines (the asker then starts a fresh Python) what a fork could not make the same: another
interpreter or gradverify, limits or CPUs it cannot take, a ``PYTHONPATH`` that would import
other modules, and an environment that differs in a variable read as Python and torch start:
those its own imports read (recorded as they ran) and those of ``STARTUP``, which C code reads.
What a fork still cannot make the same is said in docs/contributing.md (the hash seed, the
compiler imported already, the parent process).

One request per connection, answered ``forked PID`` once the child is set up (or ``declined
WHY``), then ``exit N``. A failure while serving one request declines it and serving goes on.
Linux only (``pidfd_open``).
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import json
import os
import resource
import selectors
import signal
import socket
import sys
from collections.abc import Iterator
from typing import Any

from warm_child import become

from gradverify import syspath
from gradverify.run import leftovers
from gradverify.torchstate import import_torch

STARTUP = ("PYTHON", "TORCH", "PYTORCH", "TRITON", "CUDA", "NVIDIA", "CUBLAS", "CUDNN", "NCCL",
           "HIP", "ROCM", "OMP_", "KMP_", "GOMP_", "MKL", "OPENBLAS", "BLIS", "NUMEXPR", "NPY_",
           "NUMPY", "LD_", "DYLD_", "LC_", "LANG", "MALLOC", "GLIBC", "TZ", "HOME")
"""Prefixes of the environment variables read as Python (``HOME``: its user folder on
``sys.path``), torch's libraries (C++, OpenMP, BLAS, CUDA), the C library (``TZ``, the locale)
and the dynamic linker start, where no Python code that could be recorded reads them: a
request that differs in one is declined, as in any variable that this interpreter's imports
read."""
SET_UP_WITHIN = 10.0
"""Seconds a child may take to set itself up before it is killed and the request declined."""


def serve(address: str) -> None:
    """Import what every child needs, listen on ``address``, say ``ready`` on stdout, and
    answer requests until the process that started this one ends it."""
    os.close(os.pidfd_open(os.getpid()))  # where there is none, no socket: askers start fresh
    started = dict(os.environ)
    with _keys_read() as read:
        torch = import_torch()
        disable = getattr(getattr(torch, "compiler", None), "disable", None)
        if disable is not None:
            disable(lambda: None)  # imports the compiler, as checkpoint and torch.func do
        importlib.import_module("gradverify.run.execute")  # what a worker runs
    imported = _Imported(started, read, os.getcwd())
    leftovers.adopt_orphans()  # what a dead child's descendants leave is killed here
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    print("ready", flush=True)
    while True:
        for key, _ in selector.select():
            try:
                if key.fileobj is listener:
                    _answer(listener.accept()[0], selector, imported)
                else:
                    _ended(key.data, selector)
            except Exception as exc:  # noqa: BLE001  (one request's trouble is its own)
                print(f"error: {exc!r}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _keys_read() -> Iterator[set[str]]:
    """The environment variables that Python code reads while the block runs (``os.environ``
    and ``os.getenv`` look each key up with ``__getitem__``)."""
    environ: Any = type(os.environ)
    original, read = environ.__getitem__, set()

    def looked_up(self: Any, key: str) -> Any:
        read.add(key)
        return original(self, key)

    environ.__getitem__ = looked_up
    try:
        yield read
    finally:
        environ.__getitem__ = original


class _Imported:
    """What the imports left that a child must find as a fresh Python would: the environment
    as it was before them, the variables they read, what they set (torch sets variables for
    its own subprocesses), ``sys.path`` and the folder this process started in."""

    def __init__(self, started: dict[str, str], read: set[str], cwd: str) -> None:
        self.started, self.read, self.cwd, self.path = started, read, cwd, list(sys.path)
        self.set = {key: value for key, value in os.environ.items()
                    if started.get(key) != value}


class _Child:
    """A child being waited for: its pid, its asker's connection, and a descriptor that is
    readable once it has exited. Its status is sent when it exits (``exited``); it is reaped
    only when the asker closes the connection, as a ``Popen`` child stays a zombie until
    waited for: its pid and process group are never another process's while the asker may
    still signal them."""

    def __init__(self, pid: int, conn: socket.socket, pidfd: int) -> None:
        self.pid, self.conn, self.pidfd = pid, conn, pidfd
        self.exited = self.gone = False


def _answer(conn: socket.socket, selector: selectors.BaseSelector, imported: _Imported) -> None:
    """Read one request; fork its child and answer once it is set up, or decline it. (A child
    leaves through here with its ``SystemExit``, having emptied ``fds``.)"""
    fds: list[int] = []
    child = None
    try:
        conn.settimeout(SET_UP_WITHIN)
        request, fds = _request(conn)
        path = _sys_path(request, imported)
        why = _declined(request, imported, path)
        if why is None and path is not None:  # (a None path is a reason to decline)
            forked = _fork(request, fds, conn, selector, imported, path)
            child, why = (forked, None) if isinstance(forked, _Child) else (None, forked)
        print(f"forked {request['module']}" if child else f"declined {request['module']}: {why}",
              file=sys.stderr, flush=True)
        conn.sendall(f"forked {child.pid}\n".encode() if child else f"declined {why}\n".encode())
    except (OSError, ValueError):
        if child is not None:  # the asker is gone
            os.close(child.pidfd)
            _kill(child.pid)
            child = None
    finally:
        for fd in fds:
            os.close(fd)
    if child is None:
        conn.close()
        return
    selector.register(conn, selectors.EVENT_READ, child)
    selector.register(child.pidfd, selectors.EVENT_READ, child)


def _fork(request: dict[str, Any], fds: list[int], conn: socket.socket,
          selector: selectors.BaseSelector, imported: _Imported, path: list[str]
          ) -> _Child | str:
    """Fork the child with ``sys.path`` ``path`` and wait until it is set up: the child, or
    why it could not be."""
    env = {**as_python_starts(request["env"]), **imported.set}
    ready, done = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.close(ready)
        become(request, fds, lambda: _drop(selector, conn), done, env, path)
    os.close(done)
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        os.close(ready)
        _kill(pid)
        raise
    try:
        with selectors.DefaultSelector() as set_up:
            set_up.register(ready, selectors.EVENT_READ)
            if set_up.select(SET_UP_WITHIN) and os.read(ready, 3) == b"set":
                return _Child(pid, conn, pidfd)
    finally:
        os.close(ready)
    os.close(pidfd)
    _kill(pid)
    return "the child could not set itself up"


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def _drop(selector: selectors.BaseSelector, conn: socket.socket) -> None:
    """In a child: close this interpreter's descriptors, each detached from its object first,
    so that no finalizer closes the number later (when it may be the module's)."""
    keys = list(selector.get_map().values())
    selector.close()  # its own descriptor, with its object
    numbers = [key.fileobj.detach() if isinstance(key.fileobj, socket.socket) else key.fd
               for key in keys]
    numbers.append(conn.detach())
    for number in numbers:
        with contextlib.suppress(OSError):
            os.close(number)


def _ended(child: _Child, selector: selectors.BaseSelector) -> None:
    """The child exited (its status goes to the asker), or the asker closed its connection:
    having read the status, or because it died, and then the child is killed, as
    ``PR_SET_PDEATHSIG`` would kill a child of its own."""
    if child.conn.fileno() < 0:  # both were ready at once, and it is done
        return
    found = os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    if found is not None and not child.exited:
        code = found.si_status if found.si_code == os.CLD_EXITED else -found.si_status
        with contextlib.suppress(OSError):
            child.conn.sendall(f"exit {code}\n".encode())
        child.exited = True
        selector.unregister(child.pidfd)
        os.close(child.pidfd)
        if not child.gone:
            return
    elif not child.gone:
        try:
            if child.conn.recv(1, socket.MSG_DONTWAIT):
                return
        except BlockingIOError:  # the other descriptor's event, seen after this one's
            return
        except OSError:
            pass
        if not child.exited:  # the asker died: the child goes with it
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGKILL)
            child.gone = True
            selector.unregister(child.conn)  # its descriptor says when it is gone
            return
        selector.unregister(child.conn)
    child.conn.close()
    os.waitpid(child.pid, 0)
    _orphans(selector)


def _orphans(selector: selectors.BaseSelector) -> None:
    """Kill and reap what dead children's descendants left to this process (it adopts
    orphans), once no child of its own runs (a running one's daemons may be its own): a fresh
    child's would go to the command that started it, which kills them."""
    if any(isinstance(key.data, _Child) for key in selector.get_map().values()):
        return
    leftovers.kill(sorted(leftovers.descendants(os.getpid())))
    with contextlib.suppress(ChildProcessError):  # and those that died on their own
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def _request(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    data, fds, flags, _ = socket.recv_fds(conn, 1 << 20, 64)
    if flags & socket.MSG_CTRUNC:
        for fd in fds:
            os.close(fd)
        raise ValueError("more descriptors than a request may pass")
    while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
        more = conn.recv(1 << 20)
        if not more:
            for fd in fds:
                os.close(fd)
            raise ValueError("the request ended early")
        data += more
    return json.loads(data[4:]), list(fds)


def _declined(request: dict[str, Any], imported: _Imported, path: list[str] | None
              ) -> str | None:
    """Why this interpreter cannot become what the request asks for (``path``: the
    ``sys.path`` it would have, None where none would do), or None."""
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
                    and key != "PYTHONPATH"
                    and (key.startswith(STARTUP) or key in imported.read))
    if path is None:
        differ.append("PYTHONPATH")
    return f"the environment differs in {', '.join(differ)}" if differ else None


def _sys_path(request: dict[str, Any], imported: _Imported) -> list[str] | None:
    """``sys.path`` as a fresh Python started as the request says would have it (its
    ``PYTHONPATH`` first, each folder made absolute from its working directory, without
    repeats), or None where that Python would import something else than this one did: unless
    it is this one's, the request's may only add folders in front of it, and none of them may
    hold a module of a name this one imported."""
    theirs = _folders(request["env"].get("PYTHONPATH", ""), request["cwd"])
    mine = _folders(imported.started.get("PYTHONPATH", ""), imported.cwd)
    if imported.path[:len(mine)] != mine:
        return None
    if theirs == mine:
        return imported.path
    new = theirs[:len(theirs) - len(mine)]
    if theirs[len(new):] != mine or any(folder in mine for folder in new) \
            or any(map(_shadowing, new)):
        return None
    return list(dict.fromkeys([*new, *imported.path]))


def _folders(python_path: str, cwd: str) -> list[str]:
    """The folders of a ``PYTHONPATH`` as Python puts them on ``sys.path``, made absolute from
    ``cwd`` (an empty entry is ``cwd`` itself), without repeats."""
    if not python_path:
        return []
    return list(dict.fromkeys(os.path.normpath(os.path.join(cwd, entry))
                              for entry in python_path.split(os.pathsep)))


def _shadowing(folder: str) -> set[str]:
    """The modules in ``folder`` that a fresh Python with it on ``PYTHONPATH`` would import
    from there, where this one imported them from elsewhere (or would run as it starts:
    ``sitecustomize``); a file there (a zip) cannot be read here: it is assumed to. Only a
    module's file or a package counts: a project's ``torch.txt`` imports nothing."""
    if os.path.isfile(folder):
        return {folder}
    try:
        entries = os.listdir(folder)
    except OSError:
        return set()
    suffixes = tuple(importlib.machinery.all_suffixes())  # a module's files: .py, .pyc, .so...
    names = {entry.partition(".")[0] for entry in entries if entry.endswith(suffixes)
             or ("." not in entry and os.path.isdir(os.path.join(folder, entry)))}  # a package
    found = names & {"sitecustomize", "usercustomize"}
    for name in names & {name.partition(".")[0] for name in sys.modules}:
        file = os.path.realpath(getattr(sys.modules[name], "__file__", None) or folder)
        here = os.path.realpath(os.path.join(folder, name))
        if not (file.startswith(here + os.sep) or file.startswith(here + ".")):
            found.add(name)
    return found


def _cannot_inherit(inherited: dict[str, Any]) -> str | None:
    """Why a child could not take what the asker's children inherit (``warm_client.inherited``),
    or None: a limit above this process's hard limit, a lower nice value, other CPUs."""
    if inherited.get("umask") is None or "cpus" not in inherited:
        return "what it inherits is not known"
    for name, (_, hard) in inherited.get("limits", {}).items():
        mine = resource.getrlimit(getattr(resource, name))[1]
        if hard != mine and (mine != resource.RLIM_INFINITY
                             and (hard == resource.RLIM_INFINITY or hard > mine)):
            return f"a higher hard limit {name}"
    if inherited.get("nice", 0) < os.getpriority(os.PRIO_PROCESS, 0):
        return "a lower nice value"
    if not set(inherited["cpus"]) <= os.sched_getaffinity(0):
        return "CPUs this process may not run on"
    return None


def as_python_starts(env: dict[str, str]) -> dict[str, str]:
    """The environment a fresh Python started with ``env`` has once started: where the
    locale of characters is C or POSIX, it sets ``LC_CTYPE`` to ``C.UTF-8`` (PEP 538, unless
    ``LC_ALL`` is set or ``PYTHONCOERCECLOCALE=0``); where C.UTF-8 does not exist, it differs
    from this process's, and the request is declined."""
    ctype = env.get("LC_CTYPE") or env.get("LANG") or "C"
    if env.get("LC_ALL") or env.get("PYTHONCOERCECLOCALE") == "0" or ctype not in ("C", "POSIX"):
        return env
    return {**env, "LC_CTYPE": "C.UTF-8"}


if __name__ == "__main__":
    serve(sys.argv[1])
