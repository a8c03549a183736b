"""TARGET arguments to jobs: (target, spec) pairs, plus the errors of those that cannot run.

Spec files and directories are read without importing torch; only ``mod:Class``, module and
``.py`` targets import user code here.
"""
from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gradverify.config import SPEC_SUFFIXES, Config, spec_files, unreadable_folder
from gradverify.errors import InputError, SpecError, shown_path
from gradverify.files import stamp
from gradverify.importgraph import Readers, target_files
from gradverify.packages import defined_in
from gradverify.results import ErrorEntry
from gradverify.spec.file import load_file
from gradverify.specmodel import NAMED_SPEC_SUFFIXES, Spec
from gradverify.targets import grammar_name_of, import_module, resolve_object
from gradverify.targets.names import (
    Form,
    TargetName,
    in_module,
    named_by,
    names_read,
    same_target_name,
    unhandled,
)


@dataclass(frozen=True)
class Job:
    """One Function to verify with one spec (``spec=None``: infer it from forward)."""

    target: str
    spec: Spec | None
    cls: Any = None
    """The Function class itself, when the caller already has it (the Python API)."""
    init_args: Mapping[str, Any] | None = None
    """A module target's constructor arguments given to ``verify`` (else the spec's)."""


@dataclass
class Plan:
    jobs: list[Job] = field(default_factory=list)
    errors: list[ErrorEntry] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    deferred: list[TargetName] = field(default_factory=list)
    """Targets whose discovery imports user code (mod:Class, modules, .py files); with
    isolation a worker process discovers them, so that this process never imports torch."""
    config: Config | None = None
    spec_file: str | None = None

    def __add__(self, other: Plan) -> Plan:
        """This plan's findings, then ``other``'s (with this plan's config and spec file)."""
        return Plan(jobs=self.jobs + other.jobs, errors=self.errors + other.errors,
                    notes=self.notes + other.notes, deferred=self.deferred + other.deferred,
                    config=self.config, spec_file=self.spec_file)


def _error(exc: InputError, target: str | None = None, spec: str | None = None) -> ErrorEntry:
    file = exc.file if isinstance(exc, SpecError) else None
    return ErrorEntry(target=target, spec=spec or file, code=exc.code, message=str(exc),
                      location=exc.location)


class Discoverer:
    """What TARGET arguments name, as a ``Plan``: every step returns the plan of what it found
    (jobs, errors, notes, targets deferred to a worker), and ``run`` adds them up."""

    def __init__(self, config: Config, spec_file: str | None = None, *,
                 defer_imports: bool = False) -> None:
        self.config = config
        self.spec_file = spec_file
        self.defer_imports = defer_imports
        self._folder_specs: list[Spec] | None = None
        self._resolved: dict[str, Any] = {}
        """What each spec target resolved to (specs are matched against many targets)."""

    def empty(self) -> Plan:
        return Plan(config=self.config, spec_file=self.spec_file)

    def run(self, targets: Sequence[TargetName]) -> Plan:
        """The plan of TARGET arguments, each parsed once by the caller (``parse_target``):
        what a name is does not change between discovery, ``files_read`` and a worker."""
        plan = self.empty()
        if not targets:
            dirs = self.config.spec_dirs()
            existing = [d for d in dirs if d.is_dir()]
            if not existing:
                shown = ", ".join(str(d) for d in dirs)
                plan.notes.append(
                    f"no spec folder found ({shown}); pass a target such as mymod:MyFunction, or "
                    "write a spec with `gradverify init mymod:MyFunction -o specs/myfunc.yaml`")
            for directory in existing:
                plan += self._directory(directory)
            return plan
        for target in targets:
            plan += self._one(target)
        return plan

    def changed(self, files: list[str]) -> Plan:
        """Pre-commit mode: the specs concerned by changed files. A changed spec file under
        the spec folders runs; a changed .py file runs the specs whose target, reference,
        factory or ``imports:`` is defined in it or imports it, directly or not (read from
        source by ``importgraph``, without importing anything); every other file is ignored
        quietly."""
        seen: set[tuple[str | None, int | None]] = set()
        plan = self.empty()
        readers: Readers | None = None

        def add(spec: Spec) -> None:
            if spec.target and (spec.path, spec.line) not in seen:
                seen.add((spec.path, spec.line))
                plan.jobs.append(Job(spec.target, spec))

        folders = [d.resolve() for d in self.config.spec_dirs()]
        for name in files:
            path = Path(name).resolve()
            if path.suffix in SPEC_SUFFIXES:
                inside = any(d == path.parent or d in path.parents for d in folders)
                if inside and path.is_file() and not self.config.excluded(path):
                    specs, errors = self._load(path)
                    plan.errors += errors
                    for spec in specs or []:
                        add(spec)
            elif path.suffix == ".py":
                if readers is None:
                    readers = Readers(self.folder_specs(), self.config.root)
                    plan.notes += [f"{shown_path(f)}: not parsed ({why}), so --changed does not "
                                   "know what it imports" for f, why in readers.unparsed.items()]
                for spec in readers.of(path):
                    add(spec)
        return plan

    def _one(self, name: TargetName) -> Plan:
        """The plan of one TARGET, by its form (``files_read`` reads what each form reads)."""
        path = Path(name.text)
        match name.form:
            case Form.SPECS:  # a folder named like a spec file is a folder
                return self._directory(path) if path.is_dir() \
                    else self._spec_file(path, explicit=True)
            case Form.NAMED | Form.ATTRIBUTE:
                return self._class(name)
            case Form.MODULE:
                return self._module(name)
            case Form.UNKNOWN:
                plan = self.empty()
                plan.errors.append(ErrorEntry(
                    target=name.text, spec=None, code="GV003",
                    message=f"{name.text}: not a spec file (.yaml, .yml or .json), a directory "
                            "of specs, a module (pkg.mod, file.py) or a 'module:Name' target"))
                return plan
        unhandled(name.form)

    def _directory(self, directory: Path) -> Plan:
        plan = self.empty()
        unreadable: list[tuple[Path, str]] = []
        files = spec_files(directory, self.config, unreadable)
        for folder, why in unreadable:
            plan.errors.append(ErrorEntry(None, str(folder), "GV001",
                                          unreadable_folder(folder, why)))
        if not files and not unreadable:
            plan.notes.append(f"{directory}: no spec files (*.yaml, *.yml) found")
        for file in files:
            plan += self._spec_file(file, explicit=False)
        return plan

    @staticmethod
    def _load(path: Path) -> tuple[list[Spec] | None, list[ErrorEntry]]:
        """A spec file's specs, or None and every error in the file."""
        try:
            return load_file(path), []
        except SpecError as exc:
            return None, [_error(each, spec=str(path)) for each in [exc, *exc.others]]

    def _spec_file(self, path: Path, explicit: bool) -> Plan:
        plan = self.empty()
        if explicit and not path.exists():
            plan.errors.append(ErrorEntry(None, str(path), "GV001",
                                          f"{path}: no such spec file"))
            return plan
        specs, plan.errors = self._load(path)
        for spec in specs or []:
            if spec.target is None:
                plan.errors.append(ErrorEntry(
                    None, spec.path, "GV002",
                    f"{spec.where}: target: missing; name the Function (target: mymod:MyFunc), or "
                    f"pass it on the command line: gradverify check mymod:MyFunc --spec {path}",
                    location=spec.location))
                continue
            plan.jobs.append(Job(spec.target, spec))
        return plan

    def folder_specs(self) -> list[Spec]:
        """Every valid spec in the configured spec folders (invalid ones are skipped here;
        they are reported when run directly)."""
        if self._folder_specs is None:
            files = [f for d in self.config.spec_dirs() if d.is_dir()
                     for f in spec_files(d, self.config)]
            self._folder_specs = list(_read_specs(tuple((f, *stamp(f)) for f in files)))
        return self._folder_specs

    def _class(self, name: TargetName) -> Plan:
        plan, target = self.empty(), name.text
        if self.defer_imports:
            plan.deferred.append(name)
            return plan
        if self.spec_file:
            specs, plan.errors = self._load(Path(self.spec_file))
            if specs is None:
                return plan
            chosen = self._match(name, specs)
            if chosen is None:
                names = ", ".join(str(s.target) for s in specs)
                plan.errors.append(ErrorEntry(
                    target, self.spec_file, "GV002",
                    f"{self.spec_file}: no spec in this file is for {target} (it has: {names})"))
            else:
                plan.jobs.append(Job(target, chosen))
            return plan
        if name.named:  # imported by the run, after its spec's `imports:`
            ops: list[Spec | None] = [s for s in self.folder_specs()
                                      if s.target and same_target_name(s.target, target)]
            plan.jobs.extend(Job(target, spec) for spec in ops or [None])
            return plan
        try:
            resolve_object(target)
        except InputError as exc:
            plan.errors.append(_error(exc, target=target))
            return plan
        # Every spec under the spec folders that names this class runs, each as its own job
        # (their results name their spec files): none is dropped silently.
        matching: list[Spec | None] = [*self._matching(target, self.folder_specs())]
        plan.jobs.extend(Job(target, spec) for spec in matching or [None])
        return plan

    def _matching(self, target: str, specs: list[Spec]) -> list[Spec]:
        """The specs naming ``target``, by its spelling or by the class it resolves to."""
        wanted = resolve_object(target)
        return [s for s in specs
                if s.target == target or resolves_to(s, wanted, self._resolved)]

    def _match(self, name: TargetName, specs: list[Spec]) -> Spec | None:
        """The spec of a ``--spec`` file for ``name``: one naming it, else the file's one
        untargeted (or only) spec."""
        matching = [s for s in specs if s.target and same_target_name(s.target, name.text)] \
            if name.named else self._matching(name.text, specs)
        if matching:
            return matching[0]
        untargeted = [s for s in specs if s.target is None]
        if untargeted:
            return untargeted[0]
        return specs[0] if len(specs) == 1 else None

    def _module(self, target: TargetName) -> Plan:
        plan, name = self.empty(), target.text
        if self.defer_imports:
            plan.deferred.append(target)
            return plan
        try:
            module = import_module(name)
        except InputError as exc:
            plan.errors.append(_error(exc, target=name))
            return plan
        found_here, failed = defined_in(module)
        plan.notes += [f"{f.module}: not imported, so its targets are not checked: "
                       f"{f.reason}" for f in failed]
        if not found_here:
            plan.notes.append(f"{name}: defines no torch.autograd.Function subclass, "
                              "custom op or nn.Module class (a plain function is "
                              "checked as module:function)")
            return plan
        plan.jobs += [Job(spec.target or "", spec) for each in found_here
                      for spec in self.folder_specs()
                      if resolves_to(spec, each.obj, self._resolved)]
        if not plan.jobs:
            names = ", ".join(d.target.removeprefix(f"{name}:") for d in found_here)
            plan.notes.append(
                f"{name}: none of its targets ({names}) has a spec in "
                f"{', '.join(self.config.specs)}; run `gradverify init {name}` to write them, "
                f"or check one directly: gradverify check {found_here[0].target}")
        return plan


@functools.lru_cache(maxsize=2)
def _read_specs(files: tuple[tuple[Path, int, int], ...]) -> tuple[Spec, ...]:
    """The valid specs of spec files, each given with its modification time and size: read
    once per process while the files are unchanged (a worker discovers targets one at a time,
    ``verify`` is called in loops)."""
    specs: list[Spec] = []
    for file, _, _ in files:
        try:
            specs.extend(load_file(file))
        except InputError:
            continue
    return tuple(specs)


def resolves_to(spec: Spec, obj: Any, cache: dict[str, Any] | None = None) -> bool:
    """Whether a spec's target resolves to ``obj`` (a spec that cannot be resolved does not).
    ``cache`` keeps what each spec target resolved to, for one discovery matching many targets
    against many specs."""
    if spec.target is None:
        return False
    if named_by(spec.target):  # named in a kind's grammar (an op's ns::op): obj's own name
        name = grammar_name_of(obj)
        return name is not None and same_target_name(name, spec.target)
    cache = {} if cache is None else cache
    if spec.target not in cache:
        try:
            cache[spec.target] = resolve_object(spec.target)
        except InputError:
            cache[spec.target] = None
    return cache[spec.target] is obj


def files_read(targets: Sequence[TargetName], config: Config, spec_file: str | None = None,
               changed: Sequence[str] = ()) -> list[Path]:
    """The files a run of ``targets`` (or, with ``--changed``, of the specs concerned by the
    ``changed`` files) may read, found without importing anything: the configuration (the
    nearest pyproject.toml), the spec files, the changed files, and the modules of the
    targets, factories and references they name. Reports must never be written over them."""
    specs = [Path(f) for f in (spec_file, config.file, *changed) if f]
    read: list[TargetName] = []
    folders: list[Path] = [] if targets else config.spec_dirs()
    for name in targets:
        path = Path(name.text)
        match name.form:
            case Form.SPECS:  # a folder named like a spec file is a folder
                (folders if path.is_dir() else specs).append(path)
            case Form.NAMED | Form.ATTRIBUTE:
                read.append(name)
                folders += config.spec_dirs()  # a mod:Class target runs the specs naming it
            case Form.MODULE if name.text.endswith(".py"):
                specs.append(path)  # not a spec, but read all the same
            case Form.MODULE:
                read.append(in_module(name.text))
                folders += config.spec_dirs()
            case Form.UNKNOWN:
                specs.append(path)  # discovery refuses it (GV003); it is the user's file
            case _:
                unhandled(name.form)
    for folder in dict.fromkeys(folders):
        if folder.is_dir():
            specs += spec_files(folder, config)
    for file in specs:
        try:
            loaded = load_file(file) if file.suffix in NAMED_SPEC_SUFFIXES and file.is_file() \
                else []
        except InputError:
            continue
        for spec in loaded:
            read += names_read(spec)
    found = [f for name in dict.fromkeys(read)
             for f in target_files(name, config.root, search_path=True) if f.is_file()]
    return [*specs, *found]


def resolve_deferred(plan: Plan, on_target: Any = None) -> Plan:
    """Discover targets that need importing (mod:Class, modules, .py files), in-process, one
    at a time: ``on_target(target, found_so_far)`` is called before each (a worker tells the
    parent, so that a target whose import ends the process is known and nothing found before it
    is lost)."""
    if not plan.deferred:
        return plan
    assert plan.config is not None, "deferred targets come from a Discoverer, with its config"
    discoverer = Discoverer(plan.config, plan.spec_file)
    found = discoverer.empty()
    for name in plan.deferred:
        if on_target is not None:
            on_target(name.text, found)
        found += discoverer.run([name])
    return Plan(jobs=plan.jobs + found.jobs, errors=plan.errors + found.errors,
                notes=plan.notes + found.notes)
