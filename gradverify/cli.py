"""The command line. Parses options, calls the library, renders, exits: no logic of its own.

``main`` is the one place where exceptions become exit codes.
"""
from __future__ import annotations

import contextlib
import os
import shlex
import signal
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from gradverify import sinks, terminal
from gradverify._version import __version__
from gradverify.cliparams import check_options, command_options, not_empty
from gradverify.errors import (
    GradverifyError,
    InputError,
    RunInterrupted,
    UsageError,
    interrupt_exit_code,
)
from gradverify.explain import explain_topic
from gradverify.options import FLAGS as RUN_FLAGS
from gradverify.options import RunOptions
from gradverify.optiontable import INIT_OPTIONS, RECORD_OPTIONS, command_line
from gradverify.recording.launch import run_recorded
from gradverify.report import Verbosity
from gradverify.report.text import escaped
from gradverify.results import ExitCode
from gradverify.run.leftovers import adopt_orphans
from gradverify.syspath import own_module_command
from gradverify.targets.names import parse_target
from gradverify.torchstate import import_torch


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "-V", "--version", prog_name="gradverify",
                      message="%(prog)s %(version)s")
def cli() -> None:
    """Verify custom PyTorch autograd code: gradcheck, gradgradcheck, and the bugs gradcheck
    cannot see. Targets: torch.autograd.Function classes (mod:Class), custom ops (mod:myop, or
    ns::op with the spec's imports:), plain functions (mod:fn) and nn.Module classes
    (mod:MyModule, with the spec's init_args:).

    \b
    Exit codes: 0 ok, 1 a check failed or the target raised, 2 usage error,
    3 invalid spec or target, 4 internal error, 5 nothing selected.
    """


@cli.command()
@click.argument("targets", nargs=-1, metavar="[TARGET]...", callback=not_empty)
@check_options
def check(targets: tuple[str, ...], **given: Any) -> int:
    """Verify Functions, custom ops, functions and modules.

    \b
    TARGET is one of:
      mod:Name, path/file.py:Name  a Function class, custom op, plain function
                                   or nn.Module class
      ns::op, ns::op.overload      an op by name, with the specs that name it
                                   (their imports: register it)
      mod, path/file.py            the Function classes, custom ops and nn.Module
                                   classes there that have specs (not functions)
      a spec file, a folder of specs
    Default: the spec folders (specs/)."""
    from gradverify import config as config_mod
    from gradverify.api import check_targets
    values = command_line(given)  # only the options given, each as its table row says
    config = config_mod.load()
    # each TARGET parsed once (what it names reads the file system); --changed: changed files
    names, files = ([], list(targets)) if values["changed"] else (
        [parse_target(t) for t in targets], [])
    spec_file = values.get("spec")
    outputs = sinks.outputs({flag: values.get(name) for flag, name in (
        ("--output", "output"), ("--json", "json"), ("--junit-xml", "junit_xml"))},
        names, files, config, spec_file)
    repro = sinks.repro_folder(given["repro"])  # the folder; the run is told whether
    options = RunOptions.from_config(config, **{name: value for name, value in values.items()
                                                if name in RUN_FLAGS})
    fmt = values.get("format") or config.value("format")
    color = terminal.color(values["no_color"])
    interrupted: RunInterrupted | None = None
    with terminal.terminations_interrupt():
        try:
            with terminal.progress(enabled=color and fmt in (None, "rich")) as progress, \
                    terminal.user_output_to_stderr(enabled=not options.isolate):
                report = check_targets(names, options, config=config, spec_file=spec_file,
                                       changed=files, progress=progress)
        except RunInterrupted as exc:
            report, interrupted = exc.report, exc
    failed = sinks.show_and_write(report, fmt, outputs, color=color,
                                  verbosity=Verbosity.of(quiet=values["quiet"],
                                                            verbose=values["verbose"]))
    failed = (repro is not None and sinks.write_repros(report, repro)) or failed
    if interrupted is not None:
        terminal.err(f"interrupted by {signal.Signals(interrupted.signum).name}: the report "
                     "holds the cases that finished; the others are errors (GV014)")
        return interrupt_exit_code(interrupted)
    code = int(report.exit_code)
    if failed and code not in (ExitCode.INPUT, ExitCode.INTERNAL):
        return int(ExitCode.USAGE)  # the report is shown, but a file asked for is missing
    return code


@cli.command()
@click.argument("target")
@command_options(INIT_OPTIONS)
def init(target: str, output: str | None, force: bool, imports: tuple[str, ...],
         timeout: float | None) -> int:
    """Write specs that run for TARGET: a Function, custom op, function or nn.Module class
    (mod:Name), an op by name (ns::op, with --import), or every Function, custom op and
    nn.Module class of a module (mod, path/file.py). Each argument is guessed from forward's
    signature and source (an op's schema), then tried on forward and backward until they
    run."""
    from gradverify import init as init_mod
    import_torch()
    written, skipped = init_mod.write(target, output, force=force, imports=imports,
                                      timeout=timeout)
    for skip in skipped:
        terminal.err(escaped(f"note: skipped {skip.target}: {skip.reason}"))
    if output is None:
        terminal.out("---\n".join(spec.text for _, spec in written))
        return 0
    for path, spec in written:
        state = "inputs run" if spec.ran else f"TODO: {spec.error}"
        terminal.out(escaped(f"wrote {path or output}: {spec.target} ({state})") + "\n")
    # the folder or file just written: `check` runs it as it is, from here
    terminal.out(escaped(f"next: gradverify check {shlex.quote(output)}") + "\n")
    return 0


@cli.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@command_options(RECORD_OPTIONS)
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
def record(output: str, include: tuple[str, ...], exclude: tuple[str, ...], limit: int,
           force: bool, no_shrink: bool, then_check: bool, command: tuple[str, ...]) -> int:
    """Run a training script and write a spec for every custom Function it calls.

    \b
    gradverify record -- python train.py --epochs 1
    gradverify record -o specs/ --check -- python -m mypkg.train

    The script's output and exit code pass through; the specs are written even when it
    fails. Shapes are shrunk to small sizes for gradient checking.
    """
    echo = terminal.err  # stdout is the script's
    code, written = run_recorded(command, Path(output), include=include, exclude=exclude,
                                 limit=limit, force=force, shrink=not no_shrink,
                                 progress=terminal.progress_lines())
    if not written.lines:
        echo("")
        echo("gradverify record: no custom Function was called"
             + (f" (matching {', '.join(include)})" if include else ""))
    for note in written.notes:
        if note not in written.said:
            echo(f"  note: {note}")
    if written.paths and not then_check:
        echo(f"next: gradverify check {output}")
    if code != 0:
        echo(f"the command exited with {code}")
    if then_check and written.paths:
        import subprocess

        echo("")
        checked = subprocess.call(own_module_command("gradverify", "check",
                                                     *map(str, written.paths)))
        return code or checked
    return code


@cli.command(name="list")
@click.argument("where", nargs=-1, metavar="[MODULE|PATH]...")
def list_(where: tuple[str, ...]) -> int:
    """List spec files and their targets (no import), or what modules define: Function
    classes, custom ops and nn.Module classes, each with its spec (plain functions are
    targets only as mod:fn). Takes modules and spec paths, not mod:Name targets."""
    from gradverify import config as config_mod
    from gradverify.listing import list_items

    errors: list[str] = []
    for line in list_items(list(where), config_mod.load(), errors):
        terminal.out(escaped(line) + "\n")
    for error in errors:
        terminal.err(escaped(f"error: {error}"))
    return int(ExitCode.INPUT) if errors else 0


@cli.command()
@click.argument("topic", required=False)
def explain(topic: str | None) -> int:
    """What a finding code (GV121) or a check (gradcheck) means, why it matters, how to fix it."""
    terminal.out(explain_topic(topic) + "\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: run the CLI and turn every outcome into an exit code. A console that
    could not be written is one line on stderr; the exit code stays the command's."""
    terminal.standard_streams()
    try:
        os.getcwd()
    except OSError:  # a directory deleted under the shell (FileNotFoundError), or unreadable
        terminal.err("error: the current directory no longer exists (or cannot be read): "
                     "gradverify finds specs, pyproject.toml and your modules from it; cd into "
                     "your project and run again")
        return int(ExitCode.USAGE)
    code = _main(argv)
    lost = terminal.lost_console()
    if lost:
        terminal.err(lost)
    return code


def _main(argv: Sequence[str] | None) -> int:
    try:
        result: Any = cli.main(args=list(argv) if argv is not None else None,
                               prog_name="gradverify", standalone_mode=False)
        return int(result or 0)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.ClickException as exc:
        with contextlib.suppress(OSError, ValueError):
            exc.show()
        return int(exc.exit_code)
    except (click.Abort, KeyboardInterrupt) as exc:
        terminal.err("interrupted")
        # click turns an interrupt into Abort; the signal rides on the original exception
        cause = exc.__context__ if isinstance(exc, click.Abort) else exc
        return interrupt_exit_code(cause)  # 130 SIGINT, 143 SIGTERM
    except UsageError as exc:  # (user-given names and paths escaped: one line each)
        terminal.err(escaped(f"error: {exc}"))
        return int(ExitCode.USAGE)
    except InputError as exc:
        terminal.err(escaped(f"error: {exc}  [{exc.code}]"))
        return int(ExitCode.INPUT)
    except GradverifyError as exc:  # pragma: no cover -- every subclass is handled above
        terminal.err(escaped(f"error: {exc}"))
        return int(ExitCode.INPUT)
    except BrokenPipeError:
        # Output piped into `head` and closed: not an error of ours.
        with contextlib.suppress(AttributeError, OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return int(ExitCode.OK)
    except Exception:  # noqa: BLE001 -- the one place that turns bugs into exit 4
        terminal.err(traceback.format_exc())
        terminal.err(f"\ngradverify {__version__} hit an internal error (exit 4). This is a bug "
                     "in gradverify, not in your Function: please report it with the traceback "
                     "above and the spec you ran.")
        return int(ExitCode.INTERNAL)


def run() -> int:
    """The console script: ``main``, then an exit that no thread a Function left running can
    delay (``--no-isolate`` runs Functions in this process; GV015 reported them)."""
    import threading


    # This process inherits what its descendants orphan (a daemon a Function starts with a
    # double fork), so that the end of the case or of the run finds and stops it.
    adopt_orphans()
    code = main()
    stray = [t for t in threading.enumerate()
             if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if stray:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(AttributeError, OSError, ValueError):
                stream.flush()
        os._exit(code)
    return code


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(run())
