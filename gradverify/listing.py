"""``gradverify list``: spec files and their targets (no import), or what modules define that
gradverify verifies (Function classes, custom ops, nn.Module classes)."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from gradverify.config import Config, spec_files, unreadable_folder
from gradverify.discover import Discoverer, resolves_to
from gradverify.errors import InputError, SpecError, UsageError
from gradverify.packages import defined_in
from gradverify.spec.file import load_file
from gradverify.syspath import ensure_cwd_on_path
from gradverify.targets import described, import_module, kind_of
from gradverify.targets.names import Form, parse_target
from gradverify.torchstate import import_torch


def _spec_lines(files: list[Path], errors: list[str]) -> Iterator[str]:
    """A line per spec of ``files``; what cannot be read as one (an unreadable file, a FIFO,
    invalid YAML or keys) goes to ``errors``, as ``check`` refuses it (exit 3)."""
    for file in files:
        try:
            specs = load_file(file)
        except SpecError as exc:
            errors += [f"{each.where}: invalid spec: {each.message}  [{each.code}]"
                       for each in [exc, *exc.others]]
            continue
        for spec in specs:
            cases = len(spec.cases)
            yield f"{spec.where}  {spec.target or '(no target)'}  {cases} case{'s' * (cases != 1)}"


def list_items(where: list[str], config: Config, errors: list[str]) -> Iterator[str]:
    """The lines ``gradverify list WHERE...`` prints; UsageError, before any line, for an
    argument that names a target rather than a module or a spec path. What cannot be listed (a
    module that does not import, a folder that cannot be read) is added to ``errors`` and the
    other arguments are still listed."""
    for item in where:
        _refuse_target(item)
    if not where:
        dirs = [d for d in config.spec_dirs() if d.is_dir()]
        files = [f for d in dirs for f in _spec_files(d, config, errors)]
        if not files:
            yield f"no spec files under {', '.join(config.specs)}"
        yield from _spec_lines(files, errors)
        return
    for item in where:
        path = Path(item)
        if parse_target(item).form == Form.SPECS:  # a folder named like a spec file is a folder
            yield from _spec_lines(_spec_files(path, config, errors) if path.is_dir() else [path],
                                   errors)
            continue
        try:
            yield from _module_lines(item, config)
        except InputError as exc:
            errors.append(f"{exc}  [{exc.code}]")


def _spec_files(folder: Path, config: Config, errors: list[str]) -> list[Path]:
    unreadable: list[tuple[Path, str]] = []
    files = spec_files(folder, config, unreadable)
    errors += [f"{unreadable_folder(path, why)}  [GV001]" for path, why in unreadable]
    return files


def _refuse_target(item: str) -> None:
    """``list`` takes modules and spec paths. A target (``mod:name``, ``ns::op``) is what
    ``check`` and ``init`` take; imported as a module, it would only say "no module named"."""
    name = parse_target(item)
    taken = f"{item}: list takes a module or a spec file or folder"
    if name.named:
        raise UsageError(f"{taken}, not an op name; list the module that registers it "
                         f"(gradverify list MODULE), or check the op: gradverify check "
                         f"{name.text}")
    if name.form == Form.ATTRIBUTE:
        raise UsageError(f"{taken}, not a target; to list what {name.module} defines, run: "
                         f"gradverify list {name.module}")


def _module_lines(name: str, config: Config) -> Iterator[str]:
    import_torch()
    ensure_cwd_on_path()
    found, failed = defined_in(import_module(name))
    for failure in failed:
        yield f"{failure.module}: not imported, so its targets are not listed: {failure.reason}"
    if not found:
        yield f"{name}: no {described(listed=True, last='or')}"
        return
    specs = Discoverer(config).folder_specs()
    for each in found:
        attr, obj = each.attr, each.obj
        named = each.named  # an op registered by name (ns::op)
        if not named and not attr.isidentifier():
            yield (f"{each.module}: {attr!r} cannot be named as a target (a target names "
                   "a module attribute by its Python name); bind it to a name in the module")
            continue
        # an op registered by name (ns::op) is named so; its spec imports its module. Any
        # other target is named by the attribute that holds it, which is what `check` resolves
        # (not its __qualname__: make_square.<locals>.Square, or a type() name)
        target, traits = _describe(each.target, obj)
        owner = next((spec.where for spec in specs if resolves_to(spec, obj)
                      or spec.target == target), None)
        init = f"gradverify init {target}" + (f" --import {each.module}"
                                              if named else "")
        yield (f"{target}  ({', '.join(traits)})  "
               f"{'spec: ' + owner if owner else f'no spec ({init})'}")


def _describe(name: str, obj: object) -> tuple[str, list[str]]:
    """The target's name and what the listing says of it (no module is built)."""
    kind = kind_of(obj)
    assert kind is not None  # found as a module's target
    return kind.listing(obj, name)
