"""Writing files the user asked for (reports, specs) without ever destroying what they have.

- A path is made absolute when the command starts, so that code that changes the working
  directory (a forward calling ``os.chdir``) cannot move it.
- A report is never written over a file the run reads (a spec, a target's module, a factory's).
- A regular file is replaced atomically (a temporary file in the same folder, then a rename),
  with the mode a normally written file gets: the existing file's mode, or 0666 less the umask.
  When the folder is not writable but the file is, the file is written in place.
- A symbolic link is written through: its target is replaced and the link stays.
- A device, pipe or FIFO (``/dev/stdout``, ``/dev/null``, a named pipe) is written directly.

Failures are ``OutputError`` (exit 2) with one line that says what and why. Never imports torch.
"""
from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path

from gradverify.errors import UsageError, shown_path


class OutputError(UsageError):
    """A file the user asked for could not be written (exit 2)."""


def absolute(path: str | os.PathLike[str]) -> Path:
    """``path`` against the current directory now, without resolving links (written through
    later, at write time)."""
    return Path(os.path.abspath(os.fspath(path)))


def check_folder(folder: Path, *, option: str) -> None:
    """OutputError unless files can be written in ``folder`` (it need not exist yet): checked
    before a long run, not after it."""
    for candidate in [folder, *folder.parents]:
        if not candidate.exists():
            continue
        if not candidate.is_dir():
            raise OutputError(f"{option} {shown_path(folder)}: {shown_path(candidate)} is a "
                              "file, not a folder")
        if not os.access(candidate, os.W_OK | os.X_OK):
            raise OutputError(f"{option} {shown_path(folder)}: {shown_path(candidate)} is not "
                              "writable")
        return


def refuse_overwriting(outputs: Iterable[tuple[str, Path]], read: Iterable[Path]) -> None:
    """OutputError when an output (``(option, path)``) is a file the run reads."""
    sources = {_identity(p): p for p in read}
    for option, path in outputs:
        same = sources.get(_identity(path))
        if same is not None:
            raise OutputError(
                f"{option} {shown_path(path)}: refusing to write the report over "
                f"{shown_path(same)}, which this run reads (its pyproject.toml, a spec, or the "
                "module of a target, factory or reference); choose another file")


def refuse_shared(outputs: Iterable[tuple[str, Path]]) -> None:
    """OutputError when two reports (``(option, path)``) would go into one file: the second
    would replace the first without a word. Devices and pipes (the null device, a terminal,
    /dev/stdout) are written directly, one report after the other: they may take any number."""
    seen: dict[tuple[int, int] | str, tuple[str, Path]] = {}
    for option, path in outputs:
        identity = _identity(path)
        if identity in seen and _regular_or_new(path):
            first, where = seen[identity]
            raise OutputError(f"{first} {shown_path(where)} and {option} {shown_path(path)} "
                              "name the same file: each report needs a file of its own")
        seen[identity] = (option, path)


def stamp(path: Path) -> tuple[int, int]:
    """(modification time in ns, size) of ``path``, or (0, 0) where it cannot be read: what a
    cache of a file's parse is keyed by, beside the path."""
    try:
        st = path.stat()
        return st.st_mtime_ns, st.st_size
    except OSError:
        return 0, 0


def _regular_or_new(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return True  # not there yet: it will be a regular file


def _identity(path: Path) -> tuple[int, int] | str:
    """The file a path names: device and inode when it exists (links and hard links alike),
    else the resolved path."""
    try:
        st = os.stat(path)
        return (st.st_dev, st.st_ino)
    except (OSError, ValueError):  # ValueError: a name the file system's encoding cannot say
        try:
            return str(Path(os.path.realpath(path)))
        except ValueError:
            return str(path)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text(path: str | os.PathLike[str], text: str, *, what: str = "report") -> None:
    """Write ``text`` to ``path`` as the module docstring says; OutputError on failure."""
    path = Path(path)
    try:
        _write(path, text)
    except OSError as exc:
        blocker = _blocking_file(path.parent)
        reason = (f"{shown_path(blocker)} is a file, not a folder" if blocker else
                  (exc.strerror or str(exc)).lower())
        raise OutputError(f"cannot write the {what} to {shown_path(path)}: {reason}") from None


def _blocking_file(folder: Path) -> Path | None:
    """The first ancestor of ``folder`` that exists and is not a directory."""
    for candidate in [folder, *folder.parents]:
        if candidate.exists():
            return None if candidate.is_dir() else candidate
    return None


def encoded(text: str) -> bytes:
    """``text`` as the UTF-8 bytes of a file: a name that Python read from the file system in
    an ASCII locale (``LC_ALL=POSIX``) carries its bytes as surrogates, and gets them back
    (``surrogateescape``); any other lone surrogate is written as an escape (``\\ud800``)."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace")


def _write(path: Path, text: str) -> None:
    data = encoded(text)
    try:
        st: os.stat_result | None = os.stat(path)  # follows links
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(21, "it is a folder")
        with open(path, "wb") as handle:  # a device or pipe: directly
            handle.write(data)
        return
    target = Path(os.path.realpath(path))  # a link is written through, and stays a link
    target.parent.mkdir(parents=True, exist_ok=True)
    mode = stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask()
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except PermissionError:
        if st is None or not os.access(target, os.W_OK):
            raise
        with open(target, "wb") as handle:  # folder read-only, file writable
            handle.write(data)
        return
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


WRITTEN_MARKS = ("# gradverify spec for ", "# Recorded by `gradverify record`")
"""How the specs gradverify writes begin (``init``'s header, ``record``'s)."""


def written_by_gradverify(path: str | Path) -> bool:
    """Whether ``path`` is a regular file that ``gradverify init`` or ``record`` wrote (its
    first line is their header): the only kind of file ``--force`` may replace."""
    try:
        if not Path(path).is_file():
            return False
        with open(path, "rb") as handle:
            first = handle.readline(512).decode("utf-8", "replace")
    except OSError:
        return False
    return first.startswith(WRITTEN_MARKS)

