"""TARGET arguments to jobs: (target, spec) pairs, plus the errors of those that cannot run.

Spec files and directories are read without importing torch; only ``mod:Class``, module and
``.py`` targets import user code here.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gradverify.config import SPEC_SUFFIXES, Config, spec_files, unreadable_folder
from gradverify.errors import InputError, SpecError
from gradverify.results import ErrorEntry
from gradverify.spec.file import load_file
from gradverify.spec.model import Spec, canonical_target, is_op_name, is_target_string
from gradverify.targets.names import is_package_folder


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
    deferred: list[str] = field(default_factory=list)
    """Targets whose discovery imports user code (mod:Class, modules, .py files); with
    isolation a worker process discovers them, so that this process never imports torch."""
    config: Config | None = None
    spec_file: str | None = None


def _error(exc: InputError, target: str | None = None, spec: str | None = None) -> ErrorEntry:
    file = exc.file if isinstance(exc, SpecError) else None
    return ErrorEntry(target=target, spec=spec or file, code=exc.code, message=str(exc),
                      location=exc.location)


class Discoverer:
    def __init__(self, config: Config, spec_file: str | None = None, *,
                 defer_imports: bool = False) -> None:
        self.config = config
        self.spec_file = spec_file
        self.defer_imports = defer_imports
        self.plan = Plan(config=config, spec_file=spec_file)
        self._folder_specs: list[Spec] | None = None
        self._resolved: dict[str, Any] = {}
        """What each spec target resolved to (specs are matched against many targets)."""

    def run(self, targets: list[str]) -> Plan:
        if not targets:
            dirs = self.config.spec_dirs()
            existing = [d for d in dirs if d.is_dir()]
            if not existing:
                shown = ", ".join(str(d) for d in dirs)
                self.plan.notes.append(
                    f"no spec folder found ({shown}); pass a target such as mymod:MyFunction, or "
                    "write a spec with `gradverify init mymod:MyFunction -o specs/myfunc.yaml`")
            for directory in existing:
                self._directory(directory)
            return self.plan
        for target in targets:
            self._one(target)
        return self.plan

    def changed(self, files: list[str]) -> Plan:
        """Pre-commit mode: the specs concerned by changed files. A changed spec file under
        the spec folders runs; a changed .py file runs the specs whose target, reference or
        factory is defined in it (matched by path, without importing it); every other file is
        ignored quietly."""
        seen: set[tuple[str | None, int | None]] = set()

        def add(spec: Spec) -> None:
            if spec.target and (spec.path, spec.line) not in seen:
                seen.add((spec.path, spec.line))
                self.plan.jobs.append(Job(spec.target, spec))

        folders = [d.resolve() for d in self.config.spec_dirs()]
        for name in files:
            path = Path(name).resolve()
            if path.suffix in SPEC_SUFFIXES:
                inside = any(d == path.parent or d in path.parents for d in folders)
                if inside and path.is_file() and not self.config.excluded(path):
                    for spec in self._load(path) or []:
                        add(spec)
            elif path.suffix == ".py":
                for spec in self.folder_specs():
                    # its target's module, or the module of its reference or a factory
                    named = [spec.target, spec.reference, *(c.factory for c in spec.cases),
                             *(f"{module}:_" for module in spec.imports)]
                    if any(n and path in _target_files(n, self.config.root) for n in named):
                        add(spec)
        return self.plan

    def _one(self, target: str) -> None:
        target = canonical_target(target)
        path = Path(target)
        if path.is_dir() and not is_package_folder(target):
            # a folder named like a spec file (more.yaml) is a folder; a package (its
            # __init__.py, no spec file) is a module
            self._directory(path)
        elif target.endswith(SPEC_SUFFIXES):
            self._spec_file(path, explicit=True)
        elif ":" in target and not path.exists():
            self._class(target)
        elif target.endswith(".py") or path.is_file() or \
                (is_target_string(f"{target}:X") and "/" not in target):
            self._module(target)
        else:
            self.plan.errors.append(ErrorEntry(
                target=target, spec=None, code="GV003",
                message=f"{target}: not a spec file, directory, module or 'module:Class' target"))

    def _directory(self, directory: Path) -> None:
        unreadable: list[tuple[Path, str]] = []
        files = spec_files(directory, self.config, unreadable)
        for folder, why in unreadable:
            self.plan.errors.append(ErrorEntry(None, str(folder), "GV001",
                                               unreadable_folder(folder, why)))
        if not files and not unreadable:
            self.plan.notes.append(f"{directory}: no spec files (*.yaml, *.yml) found")
        for file in files:
            self._spec_file(file, explicit=False)

    def _load(self, path: Path) -> list[Spec] | None:
        try:
            return load_file(path)
        except SpecError as exc:
            for each in [exc, *exc.others]:  # every error in the file
                self.plan.errors.append(_error(each, spec=str(path)))
            return None

    def _spec_file(self, path: Path, explicit: bool) -> None:
        if explicit and not path.is_file():
            self.plan.errors.append(ErrorEntry(None, str(path), "GV001",
                                               f"{path}: no such spec file"))
            return
        specs = self._load(path)
        for spec in specs or []:
            if spec.target is None:
                self.plan.errors.append(ErrorEntry(
                    None, spec.path, "GV002",
                    f"{spec.where}: target: missing; name the Function (target: mymod:MyFunc), or "
                    f"pass it on the command line: gradverify check mymod:MyFunc --spec {path}",
                    location=spec.location))
                continue
            self.plan.jobs.append(Job(spec.target, spec))

    def folder_specs(self) -> list[Spec]:
        """Every valid spec in the configured spec folders (invalid ones are skipped here;
        they are reported when run directly). Read once per process while the files are
        unchanged: a worker discovers targets one at a time."""
        if self._folder_specs is None:
            files = [f for d in self.config.spec_dirs() if d.is_dir()
                     for f in spec_files(d, self.config)]
            key = tuple((str(f), *_stamp(f)) for f in files)
            if key not in _FOLDER_SPECS:
                specs: list[Spec] = []
                for file in files:
                    try:
                        specs.extend(load_file(file))
                    except InputError:
                        continue
                _FOLDER_SPECS.clear()
                _FOLDER_SPECS[key] = specs
            self._folder_specs = _FOLDER_SPECS[key]
        return self._folder_specs

    def _class(self, target: str) -> None:
        from gradverify.targets import resolve_object

        if self.defer_imports:
            self.plan.deferred.append(target)
            return

        if self.spec_file:
            specs = self._load(Path(self.spec_file))
            if specs is None:
                return
            chosen = self._match(target, specs)
            if chosen is None:
                names = ", ".join(str(s.target) for s in specs)
                self.plan.errors.append(ErrorEntry(
                    target, self.spec_file, "GV002",
                    f"{self.spec_file}: no spec in this file is for {target} (it has: {names})"))
                return
            self.plan.jobs.append(Job(target, chosen))
            return
        if is_op_name(target):  # imported by the run, after its spec's `imports:`
            ops: list[Spec | None] = [s for s in self.folder_specs()
                                      if s.target and _same_op(s.target, target)]
            self.plan.jobs.extend(Job(target, spec) for spec in ops or [None])
            return
        try:
            resolve_object(target)
        except InputError as exc:
            self.plan.errors.append(_error(exc, target=target))
            return
        # Every spec under the spec folders that names this class runs, each as its own job
        # (their results name their spec files): none is dropped silently.
        matching: list[Spec | None] = [*self._matching(target, self.folder_specs())]
        for spec in matching or [None]:
            self.plan.jobs.append(Job(target, spec))

    def _matching(self, target: str, specs: list[Spec]) -> list[Spec]:
        """The specs naming ``target``, by its spelling or by the class it resolves to."""
        from gradverify.targets import resolve_object

        wanted = resolve_object(target)
        return [s for s in specs
                if s.target == target or resolves_to(s, wanted, self._resolved)]

    def _match(self, target: str, specs: list[Spec]) -> Spec | None:
        """The spec of a ``--spec`` file for ``target``: one naming it, else the file's one
        untargeted (or only) spec."""
        matching = [s for s in specs if s.target and _same_op(s.target, target)] \
            if is_op_name(target) \
            else self._matching(target, specs)
        if matching:
            return matching[0]
        untargeted = [s for s in specs if s.target is None]
        if untargeted:
            return untargeted[0]
        return specs[0] if len(specs) == 1 else None

    def _module(self, name: str) -> None:
        from gradverify.packages import defined_in
        from gradverify.targets import import_module

        if self.defer_imports:
            self.plan.deferred.append(name)
            return

        try:
            module = import_module(name)
        except InputError as exc:
            self.plan.errors.append(_error(exc, target=name))
            return
        found_here, failed = defined_in(module)
        self.plan.notes += [f"{f.module}: not imported, so its targets are not checked: "
                            f"{f.reason}" for f in failed]
        if not found_here:
            self.plan.notes.append(f"{name}: defines no torch.autograd.Function subclass, "
                                   "custom op or nn.Module class (a plain function is "
                                   "checked as module:function)")
            return
        found = 0
        for each in found_here:
            for spec in self.folder_specs():
                if resolves_to(spec, each.obj, self._resolved):
                    self.plan.jobs.append(Job(spec.target or "", spec))
                    found += 1
        if not found:
            names = ", ".join(d.target.removeprefix(f"{name}:") for d in found_here)
            self.plan.notes.append(
                f"{name}: none of its targets ({names}) has a spec in "
                f"{', '.join(self.config.specs)}; run `gradverify init {name}` to write them, "
                f"or check one directly: gradverify check {found_here[0].target}")


_FOLDER_SPECS: dict[tuple[Any, ...], list[Spec]] = {}
"""The spec folders' specs, keyed by their files' paths, sizes and modification times."""


def _stamp(path: Path) -> tuple[int, int]:
    try:
        st = path.stat()
        return st.st_mtime_ns, st.st_size
    except OSError:
        return 0, 0


def _same_op(a: str, b: str) -> bool:
    """Two op names of one op: equal, or one without an overload (``ns::op`` for
    ``ns::op.default``)."""
    return a == b or ((a.count(".") == 0 or b.count(".") == 0)
                      and a.split(".")[0] == b.split(".")[0])


def resolves_to(spec: Spec, obj: Any, cache: dict[str, Any] | None = None) -> bool:
    """Whether a spec's target resolves to ``obj`` (a spec that cannot be resolved does not).
    ``cache`` keeps what each spec target resolved to, for one discovery matching many targets
    against many specs."""
    from gradverify.targets import resolve_object

    if spec.target is None:
        return False
    if is_op_name(spec.target):  # an op named ns::op: the object is that op
        from gradverify.targets import op_name_of

        name = op_name_of(obj)
        return name is not None and _same_op(name, spec.target)
    cache = {} if cache is None else cache
    if spec.target not in cache:
        try:
            cache[spec.target] = resolve_object(spec.target)
        except InputError:
            cache[spec.target] = None
    return cache[spec.target] is obj


def _target_files(target: str, root: Path, *, search_path: bool = False) -> set[Path]:
    """Files that may define a target's module, found from its name alone (no import): under
    the project root, its ``src/`` and the current directory (and ``sys.path``, if asked)."""
    import sys

    module = target.rpartition(":")[0]
    if module.endswith(".py") or "/" in module:
        return {(root / module).resolve(), Path(module).resolve()}
    parts = module.split(".")
    bases = [root, root / "src", Path.cwd()]
    if search_path:
        bases += [Path(p) for p in sys.path if p and Path(p).is_dir()]
    return {(base.joinpath(*parts[:-1], parts[-1] + ".py")).resolve() for base in bases} | \
        {(base.joinpath(*parts, "__init__.py")).resolve() for base in bases}


def files_read(targets: list[str], config: Config, spec_file: str | None = None) -> list[Path]:
    """The files a run of ``targets`` may read, found without importing anything: the spec
    files, and the modules of the targets, factories and references they name. Reports must
    never be written over them."""
    specs: list[Path] = [Path(spec_file)] if spec_file else []
    names: list[str] = []
    folders: list[Path] = [] if targets else config.spec_dirs()
    for target in targets:
        path = Path(target)
        if path.is_dir():  # a folder named like a spec file is a folder
            folders.append(path)
        elif target.endswith(SPEC_SUFFIXES):
            specs.append(path)
        elif ":" in target and not path.exists():
            names.append(target)
            folders += config.spec_dirs()  # a mod:Class target runs the specs naming it
        elif target.endswith(".py"):
            specs.append(path)  # not a spec, but read all the same
        else:
            names.append(f"{target}:_")
            folders += config.spec_dirs()
    for folder in dict.fromkeys(folders):
        if folder.is_dir():
            specs += spec_files(folder, config)
    for file in specs:
        try:
            loaded = load_file(file) if file.suffix in SPEC_SUFFIXES and file.is_file() else []
        except InputError:
            continue
        for spec in loaded:
            names += [n for n in (spec.target, spec.reference) if n]
            names += [c.factory for c in spec.cases if c.factory]
    found = [f for name in dict.fromkeys(names)
             for f in _target_files(name, config.root, search_path=True) if f.is_file()]
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
    for target in plan.deferred:
        if on_target is not None:
            on_target(target, discoverer.plan)
        discoverer.run([target])
    found = discoverer.plan
    return Plan(jobs=plan.jobs + found.jobs, errors=plan.errors + found.errors,
                notes=plan.notes + found.notes)
