"""``gradverify init``: specs that run, from forward's signature, its source and a probe.

The targets come from ``init.targets``. For each forward parameter a guess is read from its
name, annotation, default and how forward's source uses it (``init.guess``), or from its type
in an op's schema (``init.schema``); the guesses are then tried on the real forward and one
backward, and nearby specs searched while that raises (``init.probe``, ``init.nearby``). What
ran is written, with a comment on each argument saying where its value came from; where
nothing ran, the spec says so with a ``TODO`` and the error.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any

from gradverify.errors import UsageError
from gradverify.files import write_text, written_by_gradverify
from gradverify.init.bounded import drafted
from gradverify.init.branches import BranchCase, branch_cases
from gradverify.init.guess import Guess, arg_value, first_guesses
from gradverify.init.probe import Attempt, dim_sizes, search, spec_dict
from gradverify.init.schema import typed_guesses
from gradverify.init.strengthen import Strength
from gradverify.init.strong import strengthened, weakness, with_cases_scored
from gradverify.init.targets import Found, Skipped, find, guess_init_args
from gradverify.report.text import escaped
from gradverify.spec.yamlio import flow_scalar
from gradverify.targets import Built, Target
from gradverify.targets.names import file_stem


@dataclass(frozen=True)
class Written:
    """One spec: its text, and whether its inputs ran forward and backward."""

    target: str
    text: str
    ran: bool
    error: str | None = None


def spec_for(info: Target, *, spec_path: str | None = None, probe: bool = True,
             imports: tuple[str, ...] = ()) -> Written:
    """The spec of one Function, probed (unless ``probe`` is false); ``imports``: the spec's
    ``imports:`` (an op named ``ns::op``)."""
    guesses = first_guesses(info, typed_guesses(info))
    attempt: Attempt | None = None
    strength: Strength | None = None
    sizes: dict[str, int] = {}
    more: list[BranchCase] = []
    if probe:
        guesses, attempt = search(info, guesses)
        if attempt.ok:
            guesses, strength, sizes = strengthened(info, guesses)
            more = branch_cases(info, guesses)
            if more and strength is not None:
                strength = with_cases_scored(info, [
                    _case_of(name, case, sizes) for name, case in
                    [("basic", guesses), *((c.name, c.guesses) for c in more)]], strength)
    error = attempt.error if attempt and not attempt.ok else weakness(strength)
    text = render(info, guesses, attempt, spec_path, imports, strength, sizes, more)
    return Written(info.target, text, attempt is not None and error is None, error)


def _case_of(name: str, guesses: list[Guess], sizes: dict[str, int]) -> dict[str, Any]:
    """One case as the spec holds it, with its dims (strengthening's sizes outrank them)."""
    drafted = spec_dict(guesses)
    return {"name": name, "dims": {**drafted["dims"], **sizes},
            "args": drafted["cases"][0]["args"]}


def _unprobed(found: Found, path: str | None, why: str) -> Written:
    """The spec of a target whose probe ended the probing process: not probed, with a TODO
    that says how it ended."""
    spec = spec_for(found.info, spec_path=path, probe=False, imports=found.imports)
    todo = (f"# TODO: trying forward on guessed inputs {why}; nothing was run.\n"
            "# Set the shapes and values forward expects (a guessed shape may crash a kernel).\n")
    header, _, rest = spec.text.partition("\n")
    return Written(spec.target, f"{header}\n{todo}{rest}", False, f"the probe {why}")


def render(info: Target, guesses: list[Guess], attempt: Attempt | None,
           spec_path: str | None, imports: tuple[str, ...] = (),
           strength: Strength | None = None, sizes: dict[str, int] | None = None,
           more: list[BranchCase] | None = None) -> str:
    """The spec's text: a header on how its inputs were found, the target's settings, what to
    expect, and one case with a comment on each argument (and one for each branch on a
    tensor's rank that it does not take: ``more``)."""
    more = more or []
    lines = [*_header(info, attempt, spec_path, strength),
             *_settings(info, [*guesses, *(g for c in more for g in c.guesses)], imports,
                        sizes),
             *_expect(info, attempt),
             "cases:", "  - name: basic", *_case_args(guesses)]
    for case in more:
        lines += [f"  - name: {case.name}   # {case.why}", *_case_args(case.guesses)]
    # each item one line, whatever a path, a name or forward's error in its comment holds (a
    # newline there would end the comment and leave YAML no reader takes; values are quoted)
    return "\n".join(escaped(line) for line in lines) + "\n"


def _header(info: Target, attempt: Attempt | None, spec_path: str | None,
            strength: Strength | None) -> list[str]:
    """Where forward and backward are, what the probe found, and the strength of the inputs."""
    run = f"gradverify check {shlex.quote(spec_path or info.target)}"
    lines = [f"# gradverify spec for {info.target}",
             f"# forward: {info.forward_location or '?'}   backward: "
             f"{info.backward_location or '?'}"]
    if attempt is None:
        lines.append("# Not probed: set the shapes forward expects, then run: " + run)
    elif attempt.ok and weakness(strength) is not None:
        lines += [f"# TODO: these inputs ran forward and backward, but {weakness(strength)}:",
                  "#   a check would prove nothing here; set values at which it does"]
    elif attempt.ok:
        lines.append("# Written by `gradverify init`: these inputs ran forward and backward. "
                     "Run: " + run)
    else:
        lines += ["# TODO: no inputs tried made forward and backward run; the closest raised",
                  f"#   {attempt.error}",
                  "# Set the shapes and dtypes forward expects (comments say what was guessed)."]
    if strength is not None:
        lines.append(f"# {strength.header()}")
        if strength.score_line():
            lines.append(f"# {strength.score_line()}")
        lines += [f"# {line}" for line in (strength.unran_line(), strength.gaps_line())
                  if line]
    if info.once_differentiable:
        lines.append("# backward is @once_differentiable: gradgradcheck will be skipped")
    return lines


def _settings(info: Target, guesses: list[Guess], imports: tuple[str, ...],
              sizes: dict[str, int] | None) -> list[str]:
    """The target and what it needs: imports, a module's init_args, the named dims."""
    dims = {**spec_dict(guesses)["dims"], **(sizes or {})}
    lines = [f"target: {info.target}"]
    if imports:
        lines.append(f"imports: {_yaml(list(imports))}   # whose import registers the op")
    if (built := info.detail(Built)) is not None:
        lines.append(f"init_args: {_yaml(guess_init_args(type(built.instance)))}   # the module's "
                     "constructor arguments (guessed)")
    if dims:
        lines.append("dims: {" + ", ".join(f"{k}: {v}" for k, v in dims.items()) + "}"
                     "   # named sizes; a list such as [1, 3] sweeps them")
    lines.append("# checks: {gradgradcheck: false}   # turn checks off (or opt-in checks on)")
    return lines


def _expect(info: Target, attempt: Attempt | None) -> list[str]:
    """The ``expect:`` line: set for a surrogate gradient the target's words declare, offered
    (commented) for one the probe saw, else an example."""
    if attempt is not None and attempt.flat and _says_surrogate(info):
        return ["# forward is piecewise constant here, yet backward gives a gradient, and the",
                "# class's docstring or name says it is a surrogate (straight-through) one:",
                "expect: {gradcheck: \"surrogate gradient by design (its docstring says so)\"}"]
    if attempt is not None and attempt.flat:
        return ["# forward is piecewise constant here, yet backward gives a gradient: if it is",
                "# a surrogate (straight-through) gradient by design, say so (uncomment):",
                "# expect: {gradcheck: \"surrogate gradient by design\"}"]
    return ["# expect: {gradcheck: \"why\"}       # a failure by design"]


def _case_args(guesses: list[Guess]) -> list[str]:
    """The case's ``args:``, each with where its value came from; forward's defaults used as
    they are, commented."""
    shown = [g for g in guesses if g.kind != "default"]
    defaults = [g for g in guesses if g.kind == "default"]
    lines = []
    if not shown:
        lines.append("    args: {}")
    else:
        lines.append("    args:")
        rows = [(f"      {g.name}: {_yaml(arg_value(g))}", g.why) for g in shown]
        width = max(len(r) for r, _ in rows) + 2
        lines += [f"{r:<{width}}# {why}" if why else r for r, why in rows]
    for g in defaults:
        why = g.why if g.longer else "forward's default, used as it is"
        lines.append(f"      # {g.name}: {_yaml(g.value)}   ({why})")
    return lines


_SURROGATE = re.compile(r"straight[- ]?through|surrogate|\bSTE\b", re.IGNORECASE)


def _says_surrogate(info: Target) -> bool:
    """Whether the target's own words (its class or function name and docstring) say that its
    gradient is a surrogate: a straight-through estimator, ``SignSTE``."""
    function = info.function
    words = f"{getattr(function, '__name__', '')} {getattr(function, '__doc__', '') or ''}"
    name = getattr(function, "__name__", "")
    return bool(_SURROGATE.search(words)) or name.endswith("STE")


def _yaml(value: Any) -> str:
    """A value in the spec's flow style: {shape: [N, D], dtype: int64}, {tuple: [N, D]}."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_yaml(v) for v in value) + "]"
    return flow_scalar(value)


def file_name(info: Target) -> str:
    """A spec's file name in a folder: ``Linear.yaml``, ``fusedkit.bias_gelu.yaml`` for the op
    ``fusedkit::bias_gelu`` (a colon breaks pytest's node ids, and Windows)."""
    return file_stem(info.name) + ".yaml"


def write(target: str, output: str | None, *, force: bool, imports: tuple[str, ...] = (),
          timeout: float | None = None) -> tuple[list[tuple[str | None, Written]], list[Skipped]]:
    """Specs for ``target`` (a Function or a module), after importing ``imports``: to stdout
    (None), to one file (``output`` ending in ``.yaml`` or ``.yml``; a YAML stream for a
    module), or one file per target in a folder (any other ``output``: see ``is_folder``).
    Returns (path or None, spec) pairs, and the targets of a module that could not be
    introspected or whose spec file exists (kept); never overwrites without ``force``, and
    never a file gradverify did not write. ``timeout``: the seconds each target's import and
    probe may take (None: ``bounded.PROBE_DEADLINE``)."""
    import os
    from pathlib import Path


    folder = output is not None and is_folder(output, force=force)
    if folder and output is not None:
        _clear_for_folder(output, force=force)
    found, skipped = find(target, imports)
    paths: list[str | None] = [str(Path(output) / file_name(f.info)) if folder else output
                               for f in found] if output else [None] * len(found)
    if not force and folder and len(found) > 1:
        # a module's folder of specs, run again after adding a target: the specs already
        # there (perhaps edited) are kept, the new ones written
        kept = [(f, p) for f, p in zip(found, paths) if p is not None and os.path.exists(p)]
        skipped = skipped + [Skipped(f.info.target, f"{p} exists (kept; --force overwrites "
                                                    "it)") for f, p in kept]
        pairs = [(f, p) for f, p in zip(found, paths) if (f, p) not in kept]
        found, paths = [f for f, _ in pairs], [p for _, p in pairs]
    for path in paths:
        if path is not None and os.path.exists(path):
            _replaceable(path, force=force)
    written = list(zip(paths, drafted(
        found, paths, lambda f, path: spec_for(f.info, spec_path=path, imports=f.imports),
        _unprobed, lambda fields: Written(**fields), timeout)))
    if output is None:
        return written, skipped
    if folder:
        if os.path.lexists(output) and not os.path.isdir(output):
            os.unlink(output)  # a stream of specs gradverify wrote, with --force
        for path, spec in written:
            write_text(path or "", spec.text, what="spec")
    else:
        write_text(output, "---\n".join(spec.text for _, spec in written), what="spec")
    return written, skipped


FILE_SUFFIXES = (".yaml", ".yml")
"""``-o`` names one spec file with these suffixes; any other name is a folder."""


def is_folder(output: str, *, force: bool = False) -> bool:
    """Whether ``-o output`` is a folder of specs, one per target: an existing folder, a path
    ending in ``/``, or a name without ``.yaml``/``.yml`` (``-o initspecs``), whatever the
    number of targets, so that ``gradverify check output`` runs them. A ``.json`` or ``.py``
    name is a UsageError: ``check`` would read it as JSON or as a module, not as YAML."""
    import os
    from pathlib import Path


    if output.endswith(("/", os.sep)) or Path(output).is_dir():
        return True
    suffix = Path(output).suffix.lower()
    if suffix in (".json", ".py"):
        if os.path.lexists(output):
            _replaceable(output, force=force)  # a file of the user's: say so first
        raise UsageError(
            f"-o {output}: init writes YAML, and `gradverify check` reads a {suffix} file as "
            f"{'JSON' if suffix == '.json' else 'a module'}; name a .yaml file, or a folder")
    return suffix not in FILE_SUFFIXES


def _clear_for_folder(output: str, *, force: bool) -> None:
    """UsageError where a file has the name of the folder ``output``, unless ``force`` and
    gradverify wrote that file (a stream of specs an older ``init -o name`` wrote): ``write``
    then replaces it with the folder."""
    import os

    if not os.path.lexists(output) or os.path.isdir(output):
        return
    _replaceable(output, force=force,
                 why="; init writes a folder there, one spec per target (a name without "
                     ".yaml is a folder; -o FILE.yaml writes one file)")


def _replaceable(path: str, *, force: bool, why: str = "") -> None:
    """UsageError unless ``force`` and the existing ``path`` is a spec gradverify wrote."""
    if not force:
        raise UsageError(f"{path} exists{why}; pass --force to overwrite it")
    if not written_by_gradverify(path):
        raise UsageError(
            f"{path} exists and is not a spec gradverify wrote (a module, a config, a "
            "spec of your own): --force only replaces specs that `gradverify init` or "
            "`record` wrote; choose another output, such as a spec file or folder")


__all__ = ["Skipped", "Written", "dim_sizes", "file_name", "is_folder", "render", "spec_for",
           "write"]
