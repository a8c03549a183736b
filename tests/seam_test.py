"""The target seam (``gradverify.targets``): each kind's capabilities, the reasons a check gives
for a target that lacks one, what a TARGET string names, and discovery as values."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import torchversions
import zoo
from gradverify.config import load as load_config
from gradverify.discover import Discoverer, files_read
from gradverify.registry import REGISTRY
from gradverify.targets import (
    KINDS,
    Capability,
    Target,
    introspect,
    kind_of,
    parse_target,
    who_has,
)
from gradverify.targets import names as target_names
from gradverify.targets.names import Form, TargetName

sys.path.insert(0, str(Path(__file__).parent))
opzoo = None
if torchversions.at_least(2, 4):  # opzoo defines custom ops at import
    import opzoo  # type: ignore[no-redef]


def _targets() -> dict[str, Target]:
    found = {"class": introspect(zoo.Exp)}
    found["function"] = introspect(lambda x: x.sin(), "mod:f")
    found["module"] = introspect(torch.nn.Linear, "torch.nn:Linear", {"in_features": 2,
                                                                       "out_features": 2})
    if opzoo is not None:
        found["op"] = introspect(opzoo.sin, "opzoo:sin")
        found["op without autograd"] = introspect(opzoo.sin_no_autograd, "opzoo:sin_no_autograd")
    return found


def test_every_kind_is_in_the_registry_and_detects_its_objects():
    assert [k.name for k in KINDS] == ["autograd.Function", "triton op", "custom op", "function",
                                       "module"]
    assert kind_of(zoo.Exp).name == "autograd.Function"
    assert kind_of(lambda x: x).name == "function"
    assert kind_of(torch.nn.Linear).name == "module"
    assert kind_of(torch.nn.Module) is None and kind_of(int) is None and kind_of(3) is None
    for kind in KINDS:  # a kind explains every capability its targets may lack
        assert set(Capability) - kind.capabilities <= set(kind.lacking) | {
            Capability.SCHEMA, Capability.PARAMETERS, Capability.KEYWORDS, Capability.TRITON
        }, kind.name


def test_capabilities_are_distinct_members():
    """Enum members with equal values are one member under several names: a kind's reason for
    lacking one would be given for all of them (forward_ad's reason on saved_tensors)."""
    assert len(Capability.__members__) == len(list(Capability))
    assert all(who_has(c) for c in Capability)
    # in the kinds' own words, qualified where only some of a kind's targets have it
    assert who_has(Capability.OWN_BACKWARD) == \
        "autograd.Function classes and custom ops with register_autograd"
    assert who_has(Capability.KEYWORDS) == "plain functions and nn.Module classes"


@pytest.mark.skipif(opzoo is None, reason="custom ops need torch>=2.4")
def test_saved_tensors_measures_a_custom_ops_saved_tensors():
    from gradverify import verify
    from gradverify.results import Status

    spec = {"cases": [{"name": "c", "args": {"x": {"shape": [4]}}}]}
    rows = {c.name: c for case in verify("opzoo:sin", spec=spec).results for c in case.checks}
    assert rows["saved_tensors"].status == Status.PASS
    assert "saves 1 tensor" in rows["saved_tensors"].summary
    rows = {c.name: c for case in verify("opzoo:cube_on_ctx", spec=spec).results
            for c in case.checks}
    # setup_context keeps x as an attribute: changing x in place changes the gradient
    assert rows["saved_tensors"].status == Status.FAIL
    assert {f.code for f in rows["saved_tensors"].findings} == {"GV212", "GV213"}


def test_a_target_has_its_kinds_capabilities_or_fewer():
    targets = _targets()
    for target in targets.values():
        kind = next(k for k in KINDS if k.name == target.kind)
        assert target.capabilities <= kind.capabilities
    assert targets["class"].has(Capability.OWN_BACKWARD)
    assert not targets["function"].has(Capability.OWN_AUTOGRAD)
    assert targets["module"].has(Capability.PARAMETERS)
    if opzoo is not None:
        assert targets["op"].has(Capability.SCHEMA) and targets["op"].has(Capability.OWN_BACKWARD)
        assert not targets["op without autograd"].has(Capability.OWN_BACKWARD)


def test_checks_skip_a_target_without_what_they_need_in_its_kinds_words():
    targets = _targets()
    reasons = {(name, check): REGISTRY[check].not_applicable(target)
               for name, target in targets.items() for check in REGISTRY}
    assert all(reasons[("class", check)] is None for check in REGISTRY
               if not REGISTRY[check].made_for)
    assert reasons[("class", "op_fake")] == "not for an autograd.Function: made for custom ops only"
    assert reasons[("function", "contract")] == (
        "not for a function: it has no backward of its own (its gradients come from what it "
        "calls: name the Functions it calls as targets)")
    assert reasons[("module", "contract")].startswith("not for a module: it has no backward "
                                                      "of its own (its gradients come from "
                                                      "what forward calls")
    assert reasons[("function", "mutation")] == (  # the check's own words
        "not for a function: autograd records the in-place operations of plain code itself")
    assert reasons[("module", "gradcheck")] is None and reasons[("function", "lint")]
    if opzoo is not None:
        assert reasons[("op", "op_fake")] is None and reasons[("op", "contract")] is None
        assert reasons[("op", "forward_ad")].startswith("not for a custom op: custom ops have "
                                                        "no forward-mode formula")
        # each check skips with its own reason: saved_tensors runs on an op with a backward
        assert reasons[("op", "saved_tensors")] is None
        assert reasons[("op without autograd", "saved_tensors")] == (
            "not for a custom op: it has no backward of its own (none registered with "
            "register_autograd), so nothing saves tensors for one")
        assert reasons[("op without autograd", "contract")] == (
            "not for a custom op: it has no backward of its own (none registered with "
            "register_autograd)")


def test_parse_target_names_ops_attributes_modules_and_specs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "specs").mkdir()
    (tmp_path / "more.yaml").mkdir()  # a folder named like a spec file is a folder
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "a:b.py").write_text("")  # a file whose name has a colon is a file
    forms = {text: (parse_target(text).form.value, parse_target(text).module) for text in [
        "ns::op", "ns::op.default", "torch.ops.ns.op", "pkg.mod:Name", "dir/ops.py:Name",
        "pkg.mod", "ops.py", "pkg", "specs", "more.yaml", "x.yml", "a:b.py", "no such/thing"]}
    assert forms == {
        "ns::op": ("named", ""), "ns::op.default": ("named", ""), "torch.ops.ns.op": ("named", ""),
        "pkg.mod:Name": ("attribute", "pkg.mod"), "dir/ops.py:Name": ("attribute", "dir/ops.py"),
        "pkg.mod": ("module", "pkg.mod"), "ops.py": ("module", "ops.py"),
        "pkg": ("module", "pkg"), "specs": ("specs", ""), "more.yaml": ("specs", ""),
        "x.yml": ("specs", ""), "a:b.py": ("module", "a:b.py"), "no such/thing": ("unknown", "")}
    assert parse_target("torch.ops.ns.op").text == "ns::op"
    assert parse_target("dir/ops.py:Name").is_path and not parse_target("pkg.mod:N").is_path


def test_discovery_returns_its_plan_and_keeps_nothing_between_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "exp.yaml").write_text(
        "target: zoo:Exp\ncases:\n  - args: {x: {shape: [2]}}\n")
    (tmp_path / "specs" / "bad.yaml").write_text("target: zoo:Exp\ncases: 3\n")
    discoverer = Discoverer(load_config(tmp_path), defer_imports=True)
    first = discoverer.run([])
    again = discoverer.run([parse_target(t) for t in ("specs", "mod:Thing", "nothing here/x")])
    assert [j.target for j in first.jobs] == ["zoo:Exp"] and len(first.errors) == 1
    assert [j.target for j in again.jobs] == ["zoo:Exp"]
    assert again.deferred == [TargetName("mod:Thing", Form.ATTRIBUTE)]
    assert [e.code for e in again.errors] == [first.errors[0].code, "GV003"]
    assert [j.target for j in discoverer.run([]).jobs] == ["zoo:Exp"]  # nothing accumulated


def test_a_target_is_parsed_once_and_its_value_used_by_discovery_and_files_read(
        tmp_path, monkeypatch):
    """What a TARGET names reads the file system; the command line decides it once and hands
    the value on: discovery, the files a report must not overwrite and a worker's deferred
    targets use it, never the string again."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "exp.yaml").write_text(
        "target: zoo:Exp\ncases:\n  - args: {x: {shape: [2]}}\n")
    (tmp_path / "mod.py").write_text("")
    names = [parse_target(t) for t in ("specs", "mod:Thing", "mod.py")]
    config = load_config(tmp_path)

    given, canonical = {n.text for n in names}, target_names.canonical_target

    def parsed_again(text):  # a spec's own target: parsed where it is read
        assert text not in given, f"{text!r} parsed again"
        return canonical(text)

    with monkeypatch.context() as patch:
        patch.setattr(target_names, "canonical_target", parsed_again)
        plan = Discoverer(config, defer_imports=True).run(names)
        assert plan.deferred == names[1:] and [j.target for j in plan.jobs] == ["zoo:Exp"]
        read = {p.resolve() for p in files_read(names[1:], config)}
    assert (tmp_path / "mod.py").resolve() in read  # the target's module, found from its value
    assert (tmp_path / "specs" / "exp.yaml").resolve() in read  # a mod:Name runs folder specs


def test_files_read_reads_what_a_run_of_each_form_of_target_reads(tmp_path, monkeypatch):
    """The overwrite guard and discovery match on one ``Form`` (mypy flags a form either
    leaves out): for a TARGET of each form, the files its run reads are among those no report
    may be written over, the modules every spec it runs imports included."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "exp.yaml").write_text(
        "target: mod:Exp\nreference: ref:exp\nimports: [registers]\n"
        "cases:\n  - args: {x: {shape: [2]}}\n")
    for name in ("mod.py", "ref.py", "registers.py", "notes.txt"):
        (tmp_path / name).write_text("")
    config = load_config(tmp_path)
    spec_side = {"specs/exp.yaml", "mod.py", "ref.py", "registers.py"}
    expected = {"specs": spec_side, "mod:Exp": spec_side, "mod": {"mod.py"} | spec_side,
                "ns::op": spec_side, "notes.txt": {"notes.txt"}}
    forms = set()
    for text, files in expected.items():
        name = parse_target(text)
        forms.add(name.form)
        read = {p.resolve() for p in files_read([name], config)}
        assert {(tmp_path / f).resolve() for f in files} <= read, text
    assert forms == set(Form)
