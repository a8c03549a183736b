"""Writing recorded cases as version-1 specs, as text: the recorded sizes stand beside the
shrunk ones as comments, and each case carries the signature of its call, so that recording
again adds only new cases. An existing spec is never overwritten (new cases are appended under
new names) unless ``force``. Arguments a spec cannot express (sparse, one-hot, constant tensors)
get a factory written next to the spec; callables and other objects get a ``TODO`` factory that
the spec validator names.
"""
from __future__ import annotations

import datetime
import json
import re
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gradverify.errors import InputError, shown_path
from gradverify.files import write_text, written_by_gradverify
from gradverify.recording.draft import Draft, case_dict, indexed_dim, initial_draft, is_dim
from gradverify.recording.prober import Prober
from gradverify.recording.shrink import back_off
from gradverify.recording.spool import Observation, Spool
from gradverify.spec.file import load_file
from gradverify.spec.yamlio import flow_scalar
from gradverify.targets.names import parse_target


@dataclass
class Written:
    paths: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    """One line per spec, for the command line's summary."""
    said: set[str] = field(default_factory=set)
    """The ``notes`` that progress already said, beside their Function's line."""


def write_specs(spool: Spool, out: Path, *, limit: int, force: bool, shrink: bool,
                origin: str, progress: Callable[[str, bool], None] | None = None,
                prober: Prober | None = None) -> Written:
    """One spec per recorded target under ``out``. ``progress(text, done)`` hears of each
    target before its calls are shrunk and tried (``done`` False) and with its line once its
    spec is written (``done`` True). The calls are tried in ``prober``'s process (closed on
    return), else in one of its own."""
    written = Written()
    say = progress or (lambda text, done: None)
    by_target: dict[str, list[Observation]] = {}
    for obs in spool.observations:
        calls = by_target.setdefault(obs.target, [])
        if len(calls) < limit and obs.args not in [c.args for c in calls]:
            calls.append(obs)
    compiled = spool.compiled - {"*"}
    if "*" in spool.compiled:
        written.notes.append("torch.compile compiled code while recording: calls of custom "
                             "Functions inside compiled regions are not seen, only eager ones; "
                             "to record them, run in eager mode (TORCHDYNAMO_DISABLE=1 "
                             "gradverify record ...)")
    for target in sorted(compiled - set(by_target)):
        written.notes.append(f"{target} ran only inside torch.compile regions, where calls are "
                             "not seen; record with the model in eager mode "
                             "(TORCHDYNAMO_DISABLE=1 gradverify record ...)")
    for target in sorted(compiled & set(by_target)):
        written.notes.append(f"{target}: calls inside torch.compile regions were not seen; only "
                             "eager calls were recorded")
    if not by_target:
        if prober is not None:
            prober.close(kill=True)
        return written
    out.mkdir(parents=True, exist_ok=True)
    say(f"gradverify record: {len(by_target)} Function(s) recorded; writing their specs"
        + (" (each case shrunk and tried in a separate process)" if shrink else ""), True)
    with prober or Prober() as prober:  # one probe process for every target
        for number, (target, calls) in enumerate(by_target.items(), 1):
            say(f"  [{number}/{len(by_target)}] {target} ...", False)
            _write_target(written, target, calls, out, force=force, shrink=shrink,
                          origin=origin, say=say, progress=progress is not None, prober=prober)
    return written


def _write_target(written: Written, target: str, calls: list[Observation], out: Path, *,
                  force: bool, shrink: bool, origin: str, say: Callable[[str, bool], None],
                  progress: bool, prober: Prober) -> None:
    """One target's spec, written or appended to; its line and notes said."""
    by_signature: dict[str, Draft] = {}
    for call in calls:  # one case per signature (a call under no_grad checked as with grad)
        drafted = initial_draft(call)
        by_signature.setdefault(drafted.signature, drafted)
    drafts = one_per_case(list(by_signature.values()))  # before shrinking, which costs most
    # and after it: the probe's joins (an input checked with grad) can make two cases one
    drafts = one_per_case(back_off(target, drafts, prober) if shrink else
                          [d.at_recorded_sizes() for d in drafts])
    first = out / f"{target.rsplit(':', 1)[1].replace('.', '_')}.yaml"
    broken = _invalid(first) if first.exists() and not force else None
    path, text, count = _spec_file(out, target, drafts, len(calls), origin, force)
    if broken and path != first:
        written.notes.append(f"{shown_path(first)} is not a valid spec ({broken}), so the "
                             f"new cases went to {shown_path(path)} instead of being added "
                             "to it; fix it, then move them over")
    if text is None:
        written.lines.append(f"{shown_path(path)}: nothing new (every recorded call is already "
                             "a case)")
        say(f"  {written.lines[-1]}", True)
        return
    write_text(path, text, what="spec")
    written.paths.append(path)
    todo = sum(1 for d in drafts if d.todo)
    made = sum(1 for d in drafts if d.factory and not d.todo)
    total = text.count("# signature ")
    cases = f"{count} case{'s' * (count != 1)}" if total == count else \
        f"{count} new case{'s' * (count != 1)} ({total} in all)"
    written.lines.append(f"{shown_path(path)}: {cases} for {target}"
                         + (f"; {made} with a written factory" if made else "")
                         + (f"; {todo} need{'s' * (todo == 1)} a factory of yours (TODO)"
                            if todo else ""))
    say(f"  {written.lines[-1]}", True)
    for note in dict.fromkeys(n for d in drafts for n in d.notes):
        written.notes.append(f"{target}: {note}")
        if progress:
            written.said.add(written.notes[-1])
        say(textwrap.fill(note, 100, initial_indent="    note: ",
                          subsequent_indent="          ", break_long_words=False), True)


def one_per_case(drafts: Sequence[Draft]) -> list[Draft]:
    """The drafts with each case once: calls of the same recorded sizes that differ only in
    what their case checks the same way (grad mode, an input recorded without grad but
    checked with it) are one case, the first, which names the others' signatures
    (``same_as``) and keeps their notes."""
    kept: dict[str, Draft] = {}
    for d in drafts:
        key = json.dumps([case_dict(d.args, d.dtype, d.sizes, ""), d.recorded, d.factory,
                          d.todo], sort_keys=True, default=str)
        first = kept.get(key)
        kept[key] = d if first is None else replace(
            first, same_as=(*first.same_as, d.signature, *d.same_as),
            notes=tuple(dict.fromkeys((*first.notes, *d.notes))))
    return list(kept.values())


def _spec_file(out: Path, target: str, drafts: list[Draft], calls: int, origin: str,
               force: bool) -> tuple[Path, str | None, int]:
    stem = target.rsplit(":", 1)[1].replace(".", "_")
    path = out / f"{stem}.yaml"
    n = 2
    # --force replaces only what gradverify wrote: a file of the user's keeps its name
    while path.exists() and ((not force and (_target_of(path) not in (target, None)
                                             or _invalid(path)))
                             or (force and not _replaceable(path))):
        path, n = out / f"{stem}_{n}.yaml", n + 1
    factories = path.with_name(f"{path.stem}_factories.py")
    if path.exists() and not force:
        existing = path.read_text(encoding="utf-8")
        fresh = [d for d in drafts if all(f"signature {sig}" not in existing
                                          for sig in (d.signature, *d.same_as))]
        if not fresh:
            return path, None, 0
        body = _cases(fresh, set(_case_names(existing)), factories)
        return path, _recount(existing.rstrip("\n") + "\n" + body), len(fresh)
    if factories.exists():
        factories.unlink()  # --force: rewritten with the spec (_replaceable: it is ours)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    header = (f"# Recorded by `gradverify record` on {stamp}\n"
              f"# from {origin} ({calls} distinct call signature{'s' * (calls != 1)}).\n"
              "# Sizes are shrunk for gradient checking; each dim shows its recorded size.\n")
    if parse_target(target).is_path:
        header += ("# The target is a script: checking imports it (without running its\n"
                   "# `if __name__ == \"__main__\":` block); move the Function to a module if\n"
                   "# the script does work at import.\n")
    text = header + f"version: 1\ntarget: {target}\ncases:\n"
    text += _cases(drafts, set(), factories)
    return path, text, len(drafts)


def _cases(drafts: list[Draft], names: set[str], factories: Path) -> str:
    """The cases' text; factories that gradverify can write go to ``factories``."""
    body, code = "", []
    for d in drafts:
        name = _free_name(names)
        ref = None
        if d.factory and not d.todo:
            fname = "make_" + name.replace("-", "_")
            code.append(_factory_source(d, fname))
            ref = f"{shown_path(factories)}:{fname}"
        body += _case_text(d, name, ref)
    if code:
        head = "" if factories.exists() else (
            '"""Factories written by `gradverify record` for arguments a spec cannot express."""\n'
            "import torch\n")
        with open(factories, "a", encoding="utf-8") as f:
            f.write(head + "".join(code))
    return body


def _factory_source(d: Draft, fname: str) -> str:
    """A factory making arguments like the recorded ones, at the case's dims."""
    lines = ["", "", f"def {fname}(generator, dtype, device, dims):",
             "    g = generator"]
    values = []
    for i, arg in enumerate(d.raw):
        lines.append(f"    # {arg['name']}: {_recorded(arg)}")
        lines.append(f"    a{i} = {_expr(arg, d, d.raw, arg.get('name', str(i)))}")
        values.append(f"a{i}")
    lines.append(f"    return ({', '.join(values)},)")
    return "\n".join(lines) + "\n"


def _recorded(arg: Mapping[str, Any]) -> str:
    if arg["kind"] == "tensor":
        facts = [k for k in ("sorted", "positive", "onehot", "spd") if arg.get(k)]
        return (f"{arg['layout']} {arg['shape']} {arg['dtype']}"
                + (f", {', '.join(facts)}" if facts else ""))
    return arg["kind"]


def _expr(arg: Mapping[str, Any], d: Draft, siblings: Sequence[Mapping[str, Any]],
          path: str) -> str:
    kind = arg["kind"]
    if kind == "value":
        name = (d.int_dims or {}).get(path)
        return f'dims["{name}"]' if name else repr(arg["value"])
    if kind in ("tuple", "list"):
        items = ", ".join(_expr(item, d, siblings, f"{path}[{i}]")
                          for i, item in enumerate(arg["items"]))
        return f"({items},)" if kind == "tuple" else f"[{items}]"
    shape = "(" + "".join((f'dims["{d.dims_of[s]}"], ' if s in d.dims_of else f"{s}, ")
                          for s in arg["shape"]) + ")"
    t = arg["dtype"]
    floating = t.startswith(("float", "bfloat", "complex"))
    dtype = "dtype" if floating else f"torch.{t}"
    if t == "bool":
        expr = f"torch.rand({shape}, generator=g) < {arg.get('density', 0.5)}"
    elif arg.get("onehot"):
        expr = (f"torch.nn.functional.one_hot(torch.randint(0, {shape}[-1], {shape}[:-1], "
                f"generator=g), {shape}[-1]).to({dtype})")
    elif arg.get("constant") is not None:
        expr = f"torch.full({shape}, {arg['constant']!r}, dtype={dtype})"
    elif not floating:
        low, high = arg.get("min", 0), arg.get("max", 9)
        dim = indexed_dim(low, high, arg, siblings, d.dims_of)
        bound = f'dims["{dim}"]' if dim else str(high + 1)
        expr = f"torch.randint({low if not dim else 0}, {bound}, {shape}, generator=g)"
    elif arg.get("positive"):
        expr = f"torch.rand({shape}, generator=g, dtype={dtype}) + 0.5"
    else:
        expr = f"torch.randn({shape}, generator=g, dtype={dtype})"
    if arg.get("sorted") and not arg.get("onehot") and arg.get("constant") is None:
        expr = f"({expr}).sort(-1).values"
    if arg["layout"].startswith("sparse"):
        density = arg.get("density", 0.2)
        expr = f"(({expr}) * (torch.rand({shape}, generator=g) < {density})).to_sparse()"
        if arg["layout"] == "sparse_csr":
            expr = f"({expr}).to_sparse_csr()"
    expr = f"({expr}).to(device)"
    if floating and arg.get("requires_grad"):
        expr += ".requires_grad_()"
    return expr


def _recount(text: str) -> str:
    """The header's count of distinct call signatures, after cases were appended."""
    count = len(re.findall(r"^  - name: .*# signature [0-9a-f]+\s*$", text, flags=re.MULTILINE))
    return re.sub(r"\(\d+ distinct call signatures?\)\.",
                  f"({count} distinct call signature{'s' * (count != 1)}).", text, count=1)


def _invalid(path: Path) -> str | None:
    """Why an existing spec file is not valid (it is never appended to: the new cases go to
    a file of their own), or None."""
    try:
        load_file(path)
    except InputError as exc:
        return str(exc)
    return None


def _target_of(path: Path) -> str | None:
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("target:"):
            return line.split(":", 1)[1].strip().strip("'\"")
    return None


def _case_names(text: str) -> list[str]:
    return [line.split(":", 1)[1].split("#", 1)[0].strip().strip("'\"")
            for line in text.splitlines() if line.strip().startswith("- name:")]


def _free_name(taken: set[str]) -> str:
    name, n = "recorded", 2
    while name in taken:
        name, n = f"recorded-{n}", n + 1
    taken.add(name)
    return name


def _case_text(d: Draft, name: str, factory: str | None = None) -> str:
    lines = [f"  - name: {name}   # signature {d.signature}"]
    if d.same_as:
        others = ", ".join(f"signature {sig}" for sig in d.same_as)
        lines.append(f"    # also {others}: recorded otherwise (grad mode, requires_grad), "
                     "checked as this case")
    if d.strength:
        lines.append(f"    # {d.strength}")
    if d.sizes:
        lines.append("    dims:")
        for dim, size in d.sizes.items():
            lines.append(f"      {dim}: {size}".ljust(16)
                         + f"# {'made' if d.made else 'recorded'} {d.recorded[dim]}")
    if d.dtype:
        lines.append(f"    dtype: {d.dtype}")
    if d.factory and not d.todo and factory:
        lines.append(f"    factory: {factory}   # {'; '.join(d.factory)}")
        return "\n".join(lines) + "\n"
    if d.todo or d.factory:
        reasons = "; ".join(d.todo + d.factory)
        lines.append(f"    factory: {json.dumps('TODO: ' + reasons)}")
        lines.append("    # The recorded arguments, for writing the factory:")
        for arg_name, value, comment in d.args:
            lines.append(f"    #   {arg_name}: {_yaml(value, d.sizes)}" +
                         (f"   ({comment})" if comment else ""))
        return "\n".join(lines) + "\n"
    lines.append("    args:")
    for arg_name, value, comment in d.args:
        line = f"      {arg_name}: {_yaml(value, d.sizes)}"
        lines.append(line + (f"   # {comment}" if comment else ""))
    return "\n".join(lines) + "\n"


def _yaml(value: Any, sizes: Mapping[str, int]) -> str:
    if is_dim(value):
        return str(sizes[value["$dim"]])
    if isinstance(value, dict) and "$seq" in value:
        return "{" + value["$seq"] + ": [" + ", ".join(_yaml(v, sizes) for v in value["items"]) \
            + "]}"
    if isinstance(value, dict):
        parts = []
        for k, v in value.items():
            if k == "shape":
                parts.append("shape: [" + ", ".join(d["$dim"] if is_dim(d) else str(d)
                                                    for d in v) + "]")
            elif is_dim(v):
                parts.append(f"{k}: {v['$dim']}")
            else:
                parts.append(f"{k}: {_yaml(v, sizes)}")
        return "{" + ", ".join(parts) + "}"
    if isinstance(value, list):  # literal values (an edge list)
        return "[" + ", ".join(_yaml(v, sizes) for v in value) + "]"
    return flow_scalar(value)


def _replaceable(path: Path) -> bool:
    """Whether --force may replace the spec at ``path`` and its factories file: both are
    gradverify's (or absent)."""
    factories = path.with_name(f"{path.stem}_factories.py")
    try:
        with open(factories, "rb") as handle:
            ours = handle.readline(256).startswith(b'"""Factories written by `gradverify')
    except FileNotFoundError:
        ours = True
    except OSError:
        ours = False
    return written_by_gradverify(path) and ours
