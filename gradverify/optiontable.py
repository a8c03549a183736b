"""Every option of a run, declared once: its flag of ``gradverify check``, its
``[tool.gradverify]`` key, its ``verify()`` keyword, its pytest option, its default, its help and
its validator.

Derived from ``OPTIONS``: the click options of ``check`` (``cliparams.check_options``), the keys
``[tool.gradverify]`` accepts and how each is read (``config.parse``), the defaults of
``RunOptions`` and the flags ``RunOptions.from_config`` takes (``verify()``'s keywords are
checked against it), the pytest plugin's options, and the table of docs/configuration.md
(``docs_table``, compared by tests/docs_test.py). No module imports torch here: a device is
checked for its spelling only; whether the machine has it is the worker's question
(``run.prepare.device_problem``).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

from gradverify.checks._modes import MODES
from gradverify.choices import (
    DEFAULT_DEVICE,
    DEFAULT_MODE,
    DEFAULT_SEED,
    DEFAULT_TIMEOUT,
    MAX_TIMEOUT,
    check_device,
    check_timeout,
    check_tolerance,
    choice,
    keyword_names,
    parse_jobs,
    parse_shard,
)
from gradverify.errors import UsageError
from gradverify.registry import unknown_check
from gradverify.report.formats import FORMATS

if TYPE_CHECKING:  # the pytest plugin reads the table at start-up: nothing more is imported
    from gradverify.spec.settings import SettingsReader

Read = Callable[["SettingsReader", Any, str], Any]
"""How a ``[tool.gradverify]`` value is read: the spec's validator, so that a value is refused
with the same message in either file."""


class FiniteRange(click.FloatRange):
    """A float range that refuses nan and inf: a tolerance of nan or inf would turn every
    comparison into a pass or a failure."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


@dataclass(frozen=True)
class Option:
    """One option, in every place it can be given."""

    name: str
    """Its name: the field of ``RunOptions`` it sets, its name in ``Config.given``, the keyword
    of ``RunOptions.from_config``."""
    help: str
    """What it does: ``check --help`` and the docs table say this."""
    flags: tuple[str, ...] = ()
    """``click.option``'s declarations for ``gradverify check`` (none: not a flag); click
    passes the value under the option's ``name``."""
    click: Mapping[str, Any] = field(default_factory=dict)
    """The other arguments of ``click.option`` (type, metavar, is_flag, ...)."""
    not_empty: bool = False
    """An empty string (an unset variable) is a usage error, never a silent default."""
    keys: tuple[str, ...] = ()
    """Its ``[tool.gradverify]`` keys: the documented one first, then other spellings."""
    read: Read | None = None
    keyword: str | None = None
    """Its ``verify()`` keyword."""
    pytest: str | None = None
    """Its pytest option (a flag), with ``pytest_help``."""
    pytest_help: str = ""
    default: Any = None
    """The value when nowhere given: ``RunOptions``' default, or for an option of the
    configuration alone (``run=False``), ``Config``'s."""
    shown_default: str = ""
    """The default as the docs table says it."""
    check: Callable[[Any], Any] | None = None
    """The validator of a given value (flag, keyword, pyproject): raises ``UsageError``."""
    convert: Callable[[Any], Any] | None = None
    """The flag's value (any but None) as a run takes it: ``--fast`` as ``"fast"``,
    ``--no-isolate`` as ``isolate=False``; None: as given."""
    from_keyword: Callable[[Any], Any] | None = None
    """The ``verify()`` keyword's value (any but None) as a run takes it: ``checks="gradcheck"``
    as one name; None: as given."""
    run: bool = True
    """A ``RunOptions`` field taken by ``from_config`` (else: the command line's or the
    configuration's alone)."""


def _strings(read: SettingsReader, value: Any, key: str) -> Any:
    return read.strings(value, None, key)


def _names(read: SettingsReader, value: Any, key: str) -> Any:
    return read.check_names(value, None, key)


def _boolean(read: SettingsReader, value: Any, key: str) -> Any:
    return read.boolean(value, None, key)


def _checked(option: str, read_value: Read) -> Read:
    """``read_value``, then the option's validator; its message keyed like the reader's."""
    def reading(read: SettingsReader, value: Any, key: str) -> Any:
        got, check = read_value(read, value, key), BY_NAME[option].check
        try:
            return check(got) if check is not None else got
        except UsageError as exc:
            raise read.fail(str(exc).partition(": ")[2] or str(exc), None, key) from None
    return reading


def _jobs(read: SettingsReader, value: Any, key: str) -> str:
    from gradverify.spec.yamlio import kind_of

    try:
        parse_jobs(value)
    except UsageError:
        raise read.fail(f"expected a positive integer or \"auto\", got {kind_of(value)}", None,
                        key) from None
    return str(value)


def _mode(value: Any) -> str:
    return choice("mode", value, MODES)


def _read_mode(read: SettingsReader, value: Any, key: str) -> Any:
    return read.choice(value, MODES, None, key)


def _flag_checks(values: tuple[str, ...], flag: str) -> tuple[str, ...]:
    """``--only a,b --only c``: the names (``--only ''``: none, which selects nothing)."""
    names = tuple(name for value in values for name in (n.strip() for n in value.split(","))
                  if name)
    try:
        return tuple(_unknown_checks(names))
    except UsageError as exc:
        raise click.BadParameter(str(exc), param_hint=flag) from None


def _unknown_checks(names: Any) -> Any:
    for name in names or ():
        problem = unknown_check(name)
        if problem is not None:
            raise UsageError(problem)
    return names


FILE = {"type": click.Path(dir_okay=False), "default": None}
OPTIONS: tuple[Option, ...] = (
    Option("spec", "Spec file for a target named on the command line (mod:Name).",
           ("--spec",), FILE, not_empty=True, run=False),
    Option("cases", "Only cases whose name matches (glob; repeatable).", ("--case",),
           {"multiple": True, "metavar": "NAME"}, keyword="cases", default=(),
           from_keyword=lambda given: keyword_names(given, "cases"),
           shown_default="every case"),
    Option("only", "Run only these checks.", ("--only",),
           {"multiple": True, "metavar": "CHECK,..."}, keys=("only",), read=_names,
           keyword="checks", convert=lambda given: _flag_checks(given, "--only"),
           from_keyword=lambda given: keyword_names(given, "checks"),
           check=_unknown_checks, shown_default="the default checks"),
    Option("skip", "Do not run these checks.", ("--skip",),
           {"multiple": True, "metavar": "CHECK,..."}, keys=("skip",), read=_names,
           keyword="skip", convert=lambda given: _flag_checks(given, "--skip"),
           from_keyword=lambda given: keyword_names(given, "skip"),
           check=_unknown_checks, default=(), shown_default="none"),
    Option("checks", "Checks on or off, or a check's options, as in a spec: under every spec.",
           keys=("checks",), read=lambda r, v, k: r.checks(v, None, k), run=False,
           shown_default="each check's own"),
    Option("seed", "Seed for inputs (default 0).", ("--seed",), {"type": int, "default": None},
           keys=("seed",), read=lambda r, v, k: r.number(v, None, k, integer=True),
           keyword="seed", default=DEFAULT_SEED, shown_default=str(DEFAULT_SEED)),
    Option("device", "Device to run on (default cpu).", ("--device",),
           {"default": None, "metavar": "cpu|cuda[:N]"}, keys=("device",),
           read=_checked("device", lambda r, v, k: r.string(v, None, k)), keyword="device",
           default=DEFAULT_DEVICE, shown_default=DEFAULT_DEVICE, check=check_device),
    Option("mode", "gradcheck fast or slow mode (default: automatic by size); over each "
           "check's own mode option, in specs too.", ("--fast/--slow",),
           {"default": None}, keys=("mode",), read=_read_mode, keyword="mode",
           convert=lambda fast: "fast" if fast else "slow",
           default=DEFAULT_MODE, shown_default=DEFAULT_MODE, check=_mode),
    Option("atol", "Absolute tolerance, over every spec's and case's.", ("--atol",),
           {"type": FiniteRange(min=0), "default": None}, keyword="atol", run=False,
           shown_default="1e-05", check=lambda value: check_tolerance("atol", value)),
    Option("rtol", "Relative tolerance, over every spec's and case's.", ("--rtol",),
           {"type": FiniteRange(min=0), "default": None}, keyword="rtol", run=False,
           shown_default="0.001", check=lambda value: check_tolerance("rtol", value)),
    Option("eps", "Finite-difference step, over every spec's and case's.", ("--eps",),
           {"type": FiniteRange(min=0, min_open=True), "default": None}, keyword="eps",
           run=False, shown_default="1e-06",
           check=lambda value: check_tolerance("eps", value, positive=True)),
    Option("tolerance", "Tolerances under every spec: atol, rtol, eps, nondet_tol.",
           keys=("tolerance",), read=lambda r, v, k: r.tolerance(v, None, k), run=False,
           shown_default="gradcheck's"),
    Option("specs", "Spec folders for a bare `gradverify check`.", keys=("specs",),
           read=_strings, run=False, default=("specs",), shown_default='["specs"]'),
    Option("exclude", "Skipped when walking folders; name them explicitly to run them.",
           keys=("exclude",), read=_strings, run=False, default=(), shown_default="none"),
    Option("format", "Report format (default: rich on a terminal, plain otherwise).",
           ("--format",), {"type": click.Choice(FORMATS), "default": None},
           keys=("format",), read=lambda r, v, k: r.choice(v, FORMATS, None, k), run=False,
           shown_default="rich on a terminal, plain otherwise"),
    Option("output", "Write the --format report to this file (the console still gets the "
           "report).", ("--output",), FILE, not_empty=True, run=False),
    Option("json", "Also write a JSON report to this file.", ("--json",), FILE,
           not_empty=True, run=False),
    Option("junit_xml", "Also write a JUnit XML report to this file.",
           ("--junit-xml",), FILE, not_empty=True, run=False),
    Option("repro", "Write a bare-torch script reproducing each failure (its smallest case) "
           "into DIR.", ("--repro",),
           {"type": click.Path(), "default": None, "metavar": "DIR"}, not_empty=True,
           default=False, convert=bool),
    Option("jobs", "Worker processes running cases in parallel (default 1; auto = cores).",
           ("-j", "--jobs"), {"default": None, "metavar": "N|auto"}, keys=("jobs",),
           read=_jobs, default=1, shown_default="1", check=parse_jobs),
    Option("timeout", f"Per-case time limit; the case's worker is killed (default "
           f"{DEFAULT_TIMEOUT:g}).", ("--timeout",),
           {"type": click.FloatRange(min=0, min_open=True, max=MAX_TIMEOUT), "default": None,
            "metavar": "SECONDS"}, keys=("timeout",),
           read=_checked("timeout", lambda r, v, k: float(r.number(v, None, k, positive=True))),
           default=DEFAULT_TIMEOUT, shown_default=f"{DEFAULT_TIMEOUT:g} (not enforced "
           "in-process)", check=check_timeout),
    Option("shard", "Run the K-th of N stable slices of the cases (CI sharding).", ("--shard",),
           {"default": None, "metavar": "K/N"}, check=parse_shard, shown_default="every case"),
    Option("isolate", "Run cases in this process (for debuggers; crashes and hangs are not "
           "caught).", ("--no-isolate",), {"is_flag": True}, pytest="--gradverify-no-isolate",
           pytest_help="run the cases in the pytest process (for debuggers; a crash or hang of "
           "a Function then ends the session), not in worker processes", default=False,
           convert=lambda no_isolate: not no_isolate,
           shown_default="isolated (`verify()`: in-process)"),
    Option("changed", "TARGETs are changed files (pre-commit): check changed specs and the specs "
           "whose target, reference, factory or imports: is a changed .py file or imports one "
           "(directly or not, read from source); ignore other files; nothing to check is "
           "success.", ("--changed",), {"is_flag": True}, default=False),
    Option("strict", "Warnings and xpasses fail.", ("--strict",),
           {"is_flag": True, "default": None}, keys=("fail-on-warnings", "strict"),
           read=_boolean, keyword="strict", default=False, shown_default="false"),
    Option("mutate", "Also run mutants of each backward against its cases: each spec's "
           "mutation score, and why each survivor lived.", ("--mutate",),
           {"is_flag": True, "default": None}, keys=("mutate",), read=_boolean,
           keyword="mutate", pytest="--gradverify-mutate", pytest_help="also run mutants of "
           "each target's backward against its spec's cases and show each spec's mutation "
           "score (as `gradverify check --mutate`)", default=False, shown_default="false"),
    Option("compose", "Also run the costly composition checks (torch.compile and "
           "torch.autocast: several seconds per Function).", ("--compose",),
           {"is_flag": True, "default": None}, keys=("compose",), read=_boolean,
           keyword="compose", pytest="--gradverify-compose", pytest_help="also run the costly "
           "composition checks, torch.compile and torch.autocast (as `gradverify check "
           "--compose`)", default=False, shown_default="false"),
    Option("verbose", "Every case's check table, notes and details such as full Jacobian "
           "blocks.", ("-v", "--verbose"), {"is_flag": True}, run=False),
    Option("quiet", "Only the findings of cases that did not pass, and the summary.",
           ("-q", "--quiet"), {"is_flag": True}, run=False),
    Option("no_color", "Plain console output.", ("--no-color",), {"is_flag": True}, run=False),
    Option("init_args", "The arguments an nn.Module target is built with (else the spec's).",
           keyword="init_args", run=False, shown_default="the spec's"),
    Option("gradverify", "Collect gradverify spec files as pytest tests.",
           pytest="--gradverify", pytest_help="collect gradverify spec files (*.yaml, *.yml) "
           "as tests; without PATH, the spec folders of [tool.gradverify] (default specs/)",
           run=False, shown_default="off"),
)
"""Every option of ``check``, in the order of its ``--help``."""
INIT_OPTIONS: tuple[Option, ...] = (
    Option("output", "Write the specs to this .yaml file, or one spec per target into this "
           "folder (any name without .yaml or .yml); default: stdout.", ("-o", "--output"),
           {"type": click.Path(), "default": None}, run=False, shown_default="stdout"),
    Option("force", "Overwrite existing spec files that gradverify wrote.", ("--force",),
           {"is_flag": True}, run=False),
    Option("imports", "Import MODULE first (repeatable): what registers an op named ns::op. "
           "The spec of an op name lists them under imports:.", ("--import",),
           {"multiple": True, "metavar": "MODULE"}, run=False, shown_default="none"),
    Option("timeout", "Seconds each target's import and probe may take (default 120).",
           ("--timeout",), {"type": FiniteRange(min=0, min_open=True, max=MAX_TIMEOUT),
                            "default": None, "metavar": "SECONDS"}, run=False,
           shown_default="120"),
)
"""The options of ``gradverify init``, in the order of its ``--help``."""
RECORD_OPTIONS: tuple[Option, ...] = (
    Option("output", "Folder for the specs.", ("-o", "--output"),
           {"type": click.Path(file_okay=False), "default": "specs/recorded",
            "show_default": True}, run=False, shown_default="specs/recorded"),
    Option("include", "Record only Functions whose mod:Class matches (repeatable).",
           ("--include",), {"multiple": True, "metavar": "GLOB"}, run=False,
           shown_default="every Function"),
    Option("exclude", "Do not record Functions whose mod:Class matches (repeatable).",
           ("--exclude",), {"multiple": True, "metavar": "GLOB"}, run=False,
           shown_default="none"),
    Option("limit", "Distinct argument signatures recorded per Function.", ("--limit",),
           {"type": click.IntRange(min=1), "default": 3, "show_default": True}, run=False,
           shown_default="3"),
    Option("force", "Overwrite existing specs instead of adding cases.", ("--force",),
           {"is_flag": True}, run=False),
    Option("no_shrink", "Keep the recorded sizes.", ("--no-shrink",), {"is_flag": True},
           run=False, shown_default="shrunk"),
    Option("then_check", "Then run gradverify check on the specs written.", ("--check",),
           {"is_flag": True}, run=False),
)
"""The options of ``gradverify record``, in the order of its ``--help``."""
BY_NAME = {option.name: option for option in OPTIONS}
KEYS = tuple(key for option in OPTIONS for key in option.keys)
"""What ``[tool.gradverify]`` accepts."""
KEYWORDS = tuple(option.keyword for option in OPTIONS if option.keyword)
"""``verify()``'s keywords besides ``function`` and ``spec``."""


def command_line(given: Mapping[str, Any]) -> dict[str, Any]:
    """What click parsed for ``check`` (by option name) as a run takes it: each flag's
    ``convert`` applied to a value given; a flag not given (None, or no repeated value) is left
    out."""
    values: dict[str, Any] = {}
    for option in OPTIONS:
        if not option.flags:
            continue
        value = given[option.name]
        if value is None or value == ():
            continue
        values[option.name] = option.convert(value) if option.convert is not None else value
    return values


def keyword_given(given: Mapping[str, Any]) -> dict[str, Any]:
    """The options ``verify()``'s keywords give (``given``: by keyword), by option name, each
    row's ``from_keyword`` applied; a keyword not given (None) is left out, to
    ``[tool.gradverify]``."""
    values: dict[str, Any] = {}
    for option in OPTIONS:
        value = given.get(option.keyword) if option.keyword else None
        if value is not None:
            values[option.name] = option.from_keyword(value) if option.from_keyword else value
    return values


def pytest_given(getoption: Callable[[str], Any]) -> dict[str, Any]:
    """The run options a pytest session's flags give (``getoption``: pytest's, by dest), as
    ``check``'s flags give them (each row's ``convert``); a flag not given is left out, to
    ``[tool.gradverify]``."""
    values: dict[str, Any] = {}
    for option in OPTIONS:
        if option.pytest and option.run:
            value = getoption(option.pytest.lstrip("-").replace("-", "_"))
            if value is not None:
                values[option.name] = option.convert(value) if option.convert else value
    return values


def default(name: str) -> Any:
    """An option's default (``RunOptions`` declares its fields with it)."""
    return BY_NAME[name].default


def command_table(options: tuple[Option, ...]) -> str:
    """The table of a command's options in docs/commands.md (``init``, ``record``)."""
    lines = ["| flag | default | what it does |", "|---|---|---|"]
    for option in options:
        flags = ", ".join(f"`{f}`" for f in option.flags)
        lines.append(f"| {flags} | {option.shown_default or '-'} | "
                     f"{option.help.replace('|', chr(92) + '|')} |")
    return "\n".join(lines) + "\n"


def docs_table() -> str:
    """The table of docs/configuration.md."""
    lines = ["| option | `check` flag | `[tool.gradverify]` | `verify()` | pytest | default | "
             "what it does |", "|---|---|---|---|---|---|---|"]
    for option in OPTIONS:
        flags = ", ".join(f"`{f}`" for f in option.flags if f.startswith("-")) or "-"
        keys = ", ".join(f"`{k}`" for k in option.keys) or "-"
        cells = (f"`{option.name}`", flags, keys, f"`{option.keyword}`" if option.keyword
                 else "-", f"`{option.pytest}`" if option.pytest else "-",
                 option.shown_default or "-", option.help.replace("|", "\\|"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
