"""Where ``gradverify check`` puts what it found: the console, the report files asked for
(``--output``, ``--json``, ``--junit-xml``) and the bare-torch repro scripts (``--repro DIR``).
Each file is refused before the run when it cannot be written, and written after it."""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gradverify import terminal
from gradverify.errors import shown_path
from gradverify.files import (
    OutputError,
    absolute,
    check_folder,
    refuse_overwriting,
    refuse_shared,
    write_text,
)
from gradverify.report import RENDERERS
from gradverify.report.text import escaped
from gradverify.results import Report
from gradverify.run.repro import MARKER, file_names, placed

if TYPE_CHECKING:
    from collections.abc import Sequence

    from gradverify.report import Verbosity
    from gradverify.targets.names import TargetName


def outputs(asked: dict[str, str | None], targets: Sequence[TargetName],
            changed: Sequence[str], config: Any, spec_file: str | None) -> list[tuple[str, Path]]:
    """The report files asked for, as (option, absolute path): absolute now, so that a forward
    that changes the working directory cannot move them. Refused before anything runs: two
    reports into one file, or a report over a file the run reads (``targets``, parsed; with
    ``--changed``, the ``changed`` files)."""
    outputs = [(option, absolute(path)) for option, path in asked.items() if path]
    if outputs:
        from gradverify.discover import files_read

        refuse_shared(outputs)
        refuse_overwriting(outputs, files_read(targets, config, spec_file, changed))
    return outputs


def show_and_write(report: Report, fmt: str | None, outputs: list[tuple[str, Path]], *,
                    verbosity: Verbosity, color: bool) -> bool:
    """The report on the console, then in each file asked for; whether a file could not be
    written (each such error is said on stderr). The console comes first, so that an output
    that cannot be written never loses the report; not when an output is stdout itself
    (``--output /dev/stdout`` asks for that format there). A console that cannot be written
    (closed, full) costs nothing else: ``terminal.out`` never raises. The console gets the
    ``--format`` report, or the console report when that one goes to ``--output``."""
    to_file = dict(outputs)
    console = "rich" if color and fmt != "plain" else "plain"
    if fmt not in (None, "rich", "plain") and "--output" not in to_file:
        console = fmt
    files = {"--output": "plain" if fmt in (None, "rich") else fmt, "--json": "json",
             "--junit-xml": "junit"}
    if not any(terminal.is_stdout(path) for path in to_file.values()):
        terminal.out(RENDERERS[console].render(report, verbosity))
    failed = False
    for option, path in outputs:
        try:
            write_text(path, RENDERERS[files[option]].render(report, verbosity))
        except OutputError as exc:
            terminal.err(escaped(f"error: {option}: {exc}"))
            failed = True
    return failed


def repro_folder(folder: str | None) -> Path | None:
    """``--repro DIR`` as an absolute path, refused before the run (OutputError) when no file
    can be written there: DIR (or a folder above it) is a file, or is not writable."""
    if folder is None:
        return None
    path = absolute(folder)
    check_folder(path, option="--repro")
    return path


def write_repros(report: Report, folder: Path) -> bool:
    """Each failure's repro script (``Smallest.repro``) as ``folder/<target>_<case>_<check>.py``
    (a name of its own: ``repro.file_names``), said on stderr with its path escaped; whether
    one could not be written. A file there that is not a repro gradverify wrote (its first
    line) is never written over."""
    scripts = {(case.target, case.case, check.name): (finding.code, finding.smallest.repro)
               for case in report.results for check in case.checks
               for finding in reversed(check.findings)  # the first finding's script
               if finding.smallest is not None and finding.smallest.repro is not None}
    names = file_names(scripts)
    failed = False
    for key, (code, script) in scripts.items():
        path = folder / names[key]
        shown = escaped(shown_path(path))
        try:
            if _foreign(path, MARKER):
                raise OutputError(f"{shown} is not a repro gradverify wrote: left as it is")
            write_text(path, placed(script, str(folder), os.getcwd()), what="repro")
        except OutputError as exc:
            terminal.err(escaped(f"error: --repro: {exc}"))
            failed = True
            continue
        terminal.err(f"repro: {shown} ({code} {key[2]}; python {shown} fails under bare "
                     "torch)")
    return failed


def _foreign(path: Path, marker: str) -> bool:
    """Whether ``path`` holds something other than a repro gradverify wrote."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return not handle.readline().startswith(marker)
    except FileNotFoundError:
        return False
    except OSError:
        return True
