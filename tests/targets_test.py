"""Targets beyond Function classes: custom ops (object, name, overload), plain functions and
nn.Modules; the op checks, each on the bug it owns and on a correct op that a naive version of
it would flag; the checks that do not apply to a kind skip, saying why."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torchversions
from conftest import Result, run_cli
from gradverify import targets, verify
from gradverify.results import Status

torchversions.require_test_ops(module=True)  # opzoo defines custom ops at import

import opzoo  # noqa: E402

HERE = Path(__file__).resolve().parent
SPECS = HERE / "specs_ops"
CORRECT = ["sin", "sin_cos", "sin_into", "repeat_rows", "relu_where", "vsin", "composite",
           "two_functions", "affine", "halves", "scale_and_count"]
BUGS = {  # spec -> (the check that owns the bug, its code, the argument or parameter named)
    "sin_undeclared": ("op_schema", "GV401", "stats"),
    "sin_no_autograd": ("op_autograd_registration", "GV412", "x"),
    "sin_cpu_key": ("op_autograd_registration", "GV411", "x"),
    "sin_bad_fake": ("op_fake", "GV421", None),
    "relu_bool": ("op_aot_dispatch", "GV431", None),
    "vsin_bad": ("vmap", "GV311", None),
    "sin_wrong_sign": ("gradcheck", "GV121", "x"),
    "over_wrong_sign": ("gradcheck", "GV121", "x"),
    "first_row_linear": ("gradcheck", "GV121", "weight"),
    "split_wrong": ("gradcheck", "GV121", "x"),
    "sum_pair_wrong": ("gradcheck", "GV121", "xs[1]"),
}


# one worker runs the module (--dist loadgroup), and so its report fixture once
pytestmark = pytest.mark.xdist_group("targets-report")


@pytest.fixture(scope="module")
def report() -> dict:
    with pytest.MonkeyPatch.context() as patch:  # locations read as from tests/
        patch.chdir(HERE)
        run = run_cli("check", str(SPECS), "--format", "json")  # opzoo: imported here already
    assert run.code == 1, run.stderr
    return json.loads(run.stdout)


def _rows(report: dict, spec: str) -> list[dict]:
    return [r for r in report["results"] if Path(r["spec"]).stem == spec]


@pytest.mark.parametrize("spec", CORRECT)
def test_correct_targets_pass(report, spec):
    rows = _rows(report, spec)
    assert rows and not report["errors"]
    for row in rows:
        assert row["status"] in ("pass", "warn"), row
        assert not [c for c in row["checks"] if c["status"] in ("fail", "error")]


@pytest.mark.parametrize("spec", sorted(BUGS))
def test_each_bug_is_found_by_the_check_that_owns_it(report, spec):
    check, code, named = BUGS[spec]
    rows = _rows(report, spec)
    failing = [r for r in rows if r["status"] == "fail"]
    assert failing, rows
    for row in failing:
        (owner,) = [c for c in row["checks"] if c["name"] == check]
        assert owner["status"] == "fail"
        finding = next(f for f in owner["findings"] if f["code"] == code)
        assert finding.get("input") == named, finding


def test_module_bug_shows_for_a_batch_only(report):
    statuses = {r["case"]: r["status"] for r in _rows(report, "first_row_linear")}
    assert statuses == {"one": "pass", "batch": "fail"}


def test_the_root_cause_is_said_once(report):
    (row,) = _rows(report, "sin_cpu_key")
    skipped = {c["name"]: c["summary"] for c in row["checks"] if c["status"] == "skip"}
    assert "GV411" in skipped["op_fake"] and "GV411" in skipped["gradcheck"]
    (row,) = _rows(report, "sin_bad_fake")
    assert next(c for c in row["checks"] if c["name"] == "op_aot_dispatch")["status"] == "skip"


def test_checks_that_do_not_apply_skip_with_their_reason(report):
    (op,) = _rows(report, "sin")
    reasons = {c["name"]: c["summary"] for c in op["checks"] if c["status"] == "skip"}
    assert "zero tangent" in reasons["forward_ad"]
    assert "register_vmap" in reasons["vmap"]
    (fn,) = _rows(report, "two_functions")
    reasons = {c["name"]: c["summary"] for c in fn["checks"] if c["status"] == "skip"}
    assert "no backward of its own" in reasons["contract"]
    assert not any(c["name"].startswith("op_") for c in fn["checks"])


def test_module_parameters_are_inputs_named_by_named_parameters(report):
    row = _rows(report, "affine")[1]
    assert [i["name"] for i in row["inputs"]] == ["x", "weight", "bias"]


def test_each_kind_brings_its_details_as_typed_values():
    """A target is a core every kind has plus typed details: an op's schema, an own
    formula, a built module."""
    sin_into = targets.introspect(opzoo.sin_into)
    assert sin_into.need(targets.Schema).mutates == ("stats",) and sin_into.writes_inputs
    assert sin_into.need(targets.Schema).name == "gvtest::sin_into"
    assert sin_into.detail(targets.Formula) is None  # no register_autograd
    sin = targets.introspect(opzoo.sin)
    assert sin.need(targets.Formula).style == "register_autograd" and not sin.writes_inputs
    affine = targets.introspect(opzoo.Affine, init_args={"in_features": 4, "out_features": 2})
    built = affine.need(targets.Built)
    assert isinstance(built.instance, opzoo.Affine) and built.parameters == ("weight", "bias")
    assert affine.parameters == ("weight", "bias") and affine.detail(targets.Schema) is None
    plain = targets.introspect(opzoo.two_functions)
    assert plain.details == () and plain.parameters == () and not plain.once_differentiable


def test_function_classes_get_no_op_rows():
    report = verify(opzoo._SinFunction, spec={"cases": [{"args": {"x": {"shape": [3]}}}]})
    assert not any(c.name.startswith("op_") for c in report.results[0].checks)


def test_verify_takes_every_kind():
    spec = {"cases": [{"args": {"x": {"shape": [3, 4]}}}]}
    assert verify(opzoo.sin, spec=spec).ok
    assert verify(torch.ops.gvtest.sin, spec=spec).ok
    assert verify(torch.ops.gvtest.sin.default, spec=spec).ok
    assert verify("gvtest::sin", spec=dict(spec, imports=["opzoo"])).ok
    assert verify(opzoo.two_functions, spec={"cases": [{"args": {
        "x": {"shape": [3]}, "y": {"shape": [3]}}}]}).ok
    report = verify(opzoo.Affine, init_args={"in_features": 4, "out_features": 2}, spec=spec)
    assert report.ok and [i.name for i in report.results[0].inputs] == ["x", "weight", "bias"]
    assert not verify(opzoo.sin_wrong_sign, spec=spec).ok


def test_correct_ops_pass_the_checks_a_naive_version_would_fail():
    """Declared mutation (naive op_schema/mutation), a composite op with no autograd
    registration (naive op_autograd_registration), a fake shape computed from an int argument
    (naive op_fake), a backward with torch.where (naive op_aot_dispatch)."""
    cases = {
        opzoo.sin_into: ({"x": {"shape": [3, 4], "requires_grad": False},
                          "stats": {"shape": [2], "requires_grad": False}},
                         ["op_schema", "mutation"]),
        "gvtest::composite": ({"x": {"shape": [3, 4]}}, ["op_autograd_registration"]),
        opzoo.repeat_rows: ({"x": {"shape": [3, 4]}, "times": 3}, ["op_fake"]),
        opzoo.relu_where: ({"x": {"shape": [3, 4]}}, ["op_aot_dispatch"]),
    }
    for target, (args, checks) in cases.items():
        report = verify(target, spec={"imports": ["opzoo"], "cases": [{"args": args}]},
                        checks=checks)
        statuses = {c.name: c.status for c in report.results[0].checks}
        assert statuses == dict.fromkeys(checks, Status.PASS), (target, statuses)


def test_op_findings_say_how_to_fix():
    spec = {"cases": [{"args": {"x": {"shape": [3, 4]}, "stats": {"shape": [2],
                                                                  "requires_grad": False}}}]}
    report = verify(opzoo.sin_undeclared, spec=spec, checks=["op_schema"])
    (finding,) = report.results[0].checks[0].findings
    assert "mutates_args=('stats',)" in finding.hint
    assert "Tensor(a!) stats" in finding.hint
    report = verify(opzoo.sin_bad_fake, spec={"cases": [{"args": {"x": {"shape": [3, 4]}}}]},
                    checks=["op_fake"])
    (finding,) = report.results[0].checks[0].findings
    assert finding.output == 0 and "[3]" in finding.message and "[3, 4]" in finding.message
    assert finding.location and finding.location.file.endswith("opzoo.py") \
        and finding.location.line


def _cli(*args: str, cwd: Path = HERE) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gradverify", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


# In this process (opzoo is imported already): these are about names, specs and messages, not
# about processes; the isolated default is pool_test.py's, the installed command cli_test.py's.
def test_unknown_op_name_and_bad_init_args_are_clear_errors(tmp_path):
    (tmp_path / "a.yaml").write_text("target: nosuch::op\ncases:\n  - args: {x: {shape: [2]}}\n")
    run = run_cli("check", str(tmp_path / "a.yaml"))
    assert run.code == 3 and "no operator nosuch::op" in run.output
    assert "imports:" in run.output and "Traceback" not in run.stderr
    (tmp_path / "b.yaml").write_text("target: opzoo:Affine\ninit_args: {in_features: {a: 1}}\n"
                                     "cases:\n  - args: {x: {shape: [2]}}\n")
    run = run_cli("check", str(tmp_path / "b.yaml"))
    assert run.code == 3 and "init_args.in_features" in run.output
    (tmp_path / "c.yaml").write_text("target: opzoo:Affine\ncases:\n  - args: {x: {shape: [2]}}\n")
    run = run_cli("check", str(tmp_path / "c.yaml"))
    out = " ".join(run.output.split())
    assert run.code == 3 and "c.yaml:1: init_args:" in out, out
    assert "missing a required argument: 'in_features'" in out
    assert "Traceback" not in run.stderr
    (tmp_path / "d.yaml").write_text("target: opzoo:Affine\n"
                                     "init_args: {in_feature: 4, out_features: 2}\n"
                                     "cases:\n  - args: {x: {shape: [2, 4]}}\n")
    run = run_cli("check", str(tmp_path / "d.yaml"))
    out = " ".join(run.output.split())
    assert run.code == 3 and "(did you mean 'in_features'?)" in out, out


def test_init_and_list_on_ops_functions_and_modules(tmp_path, monkeypatch):
    monkeypatch.chdir(HERE)
    run = run_cli("list", "opzoo")
    assert run.code == 0, run.stderr
    assert "opzoo:sin  (custom op, register_autograd)" in run.stdout
    assert "opzoo:Affine  (nn.Module)" in run.stdout
    for target in ("opzoo:sin", "opzoo:Affine", "opzoo:two_functions"):
        out = tmp_path / (target.split(":")[1] + ".yaml")
        run = run_cli("init", target, "-o", str(out))
        assert run.code == 0, run.stderr
        text = out.read_text()
        assert f"target: {target}" in text and "ran forward and backward" in text
        assert "weight" not in text  # a module's parameters are found, not written
        run = run_cli("check", str(out))
        assert run.code == 0, run.output
    assert "init_args: {in_features: 4, out_features: 4}" in (tmp_path / "Affine.yaml").read_text()


def test_pytest_plugin_takes_ops_functions_and_modules(pytester):
    (pytester.path / "specs_ops").mkdir()
    for name in ("sin", "affine", "sin_wrong_sign"):
        shutil.copy(SPECS / f"{name}.yaml", pytester.path / "specs_ops")
    run = pytester.runpytest("-p", "no:cacheprovider", "-v", "--gradverify",
                             "specs_ops/sin.yaml", "specs_ops/affine.yaml",
                             "specs_ops/sin_wrong_sign.yaml")
    out = run.stdout.str()
    assert run.ret == pytest.ExitCode.TESTS_FAILED, out[-2000:]
    assert "1 failed" in out and "GV121" in out
    assert "specs_ops/sin.yaml::opzoo:sin::small::op_schema PASSED" in out
    assert "::opzoo:Affine::" in out and "::gradcheck PASSED" in out


def test_record_sees_custom_op_calls(project):
    tmp_path = project.root
    (tmp_path / "layer.py").write_text(
        "import torch\n"
        "@torch.library.custom_op('gvrec::tanh2', mutates_args=())\n"
        "def tanh2(x: torch.Tensor, alpha: float) -> torch.Tensor:\n"
        "    return alpha * torch.tanh(x)\n"
        "tanh2.register_fake(lambda x, alpha: torch.empty_like(x))\n"
        "tanh2.register_autograd(\n"
        "    lambda ctx, g: (g * ctx.alpha * (1 - torch.tanh(ctx.saved_tensors[0]) ** 2), None),\n"
        "    setup_context=lambda ctx, inputs, output: (\n"
        "        ctx.save_for_backward(inputs[0]), setattr(ctx, 'alpha', inputs[1])))\n")
    (tmp_path / "train.py").write_text(
        "import torch\nfrom layer import tanh2\nw = torch.randn(16, 8, requires_grad=True)\n"
        "for _ in range(3):\n    tanh2(torch.randn(32, 16) @ w, 0.5).sum().backward()\n")
    run = _cli("record", "-o", "rec", "--", sys.executable, "train.py", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    text = (tmp_path / "rec" / "tanh2.yaml").read_text()
    assert "target: layer:tanh2" in text and "alpha: 0.5" in text
    assert "x: {shape: [N, C]}   # recorded [32, 8] float32" in text
    run = run_cli("check", "rec")  # in this process: the project's layer.py, its own op
    assert run.code == 0, run.output


def test_an_op_name_on_the_command_line_uses_its_folder_spec(project):
    project.write("specs/sin.yaml",
                  "target: gvtest::sin\nimports: [opzoo]\ncases:\n  - args: {x: {shape: [3]}}\n")
    run = run_cli("check", "gvtest::sin")  # in this process, where opzoo is imported
    assert run.code == 0, run.output
    assert "gvtest::sin" in run.stdout


@pytest.mark.parametrize(("op", "code", "named", "words"), [
    (opzoo.scale_by_calls, "GV432", "x", "the gradient for 'x' differs"),
    (opzoo.step_scaled, "GV432", None, "output 0 differs"),
    (opzoo.sin_numpy_backward, "GV431", None, "backward reads a tensor's value"),
    (opzoo.sin_pointer_backward, "GV433", None, "needs real data"),
])
def test_op_aot_dispatch_says_what_tracing_breaks(op, code, named, words):
    report = verify(op, spec={"cases": [{"args": {"x": {"shape": [3, 4]}}}]},
                    checks=["op_aot_dispatch"])
    (check,) = report.results[0].checks
    (finding,) = check.findings
    assert (check.status, finding.code, finding.input) == (Status.FAIL, code, named)
    assert words in finding.message and "opcheck" not in finding.message, finding.message
    assert finding.location and finding.location.file.endswith("opzoo.py")
    assert torch._functorch.config.cse  # the test ran with it off, and gave it back


def test_keyword_only_arguments_given_or_left_at_their_default():
    spec = {"cases": [{"name": "default", "args": {"x": {"shape": [3, 4]},
                                                    "weight": {"shape": [4]}}},
                      {"name": "given", "args": {"x": {"shape": [3, 4]},
                                                  "weight": {"shape": [4]}, "eps": 0.001}}]}
    report = verify(opzoo.rms_kw, spec=spec)
    for result in report.results:
        statuses = {c.name: c.status for c in result.checks}
        assert Status.FAIL not in statuses.values() and statuses["gradcheck"] == Status.PASS
        assert statuses["op_aot_dispatch"] == Status.PASS and statuses["contract"] == Status.PASS
        # The vmap rule declines a batched weight: a note, and x batched alone is checked.
        (vmap,) = [c for c in result.checks if c.name == "vmap"]
        assert vmap.status == Status.PASS and [f.code for f in vmap.findings] == ["GV314"]


def test_tensor_list_elements_are_inputs_of_their_own():
    spec = {"cases": [{"args": {"xs": {"list": [{"shape": [3, 4]}, {"shape": [3, 4]}]},
                                "weights": {"list": [0.5, 2.0]}}}]}
    report = verify(opzoo.wsum, spec=spec)
    assert report.ok
    assert [i.name for i in report.results[0].inputs] == ["xs[0]", "xs[1]", "weights"]
    report = verify(opzoo.wsum_bad, spec=spec)
    (gradcheck,) = [c for c in report.results[0].checks if c.name == "gradcheck"]
    assert gradcheck.status == Status.FAIL
    assert {f.input for f in gradcheck.findings if f.code == "GV121"} == {"xs[1]"}


@pytest.mark.parametrize("module", [opzoo.DropoutBlock, opzoo.FixedProjection,
                                    opzoo.CallCounter])
def test_modules_with_dropout_batch_norm_and_buffers_pass(module):
    """Dropout draws the same mask on every call; a module without parameters gets float64
    buffers; what forward writes into a buffer stays in that call."""
    report = verify(module, spec={"cases": [{"args": {"x": {"shape": [5, 4]}}}]})
    assert report.ok, [(c.name, c.summary) for c in report.results[0].checks]
    assert not [c for c in report.results[0].checks if c.status == Status.WARN]


def test_an_op_without_an_autograd_kernel_or_floating_output():
    spec = {"cases": [{"args": {"x": {"shape": [3, 4]}}}]}
    report = verify("gvtest::plain_sin", spec=dict(spec, imports=["opzoo"]))
    rows = {c.name: c for c in report.results[0].checks}
    (finding,) = rows["op_autograd_registration"].findings
    assert (finding.code, finding.input) == ("GV412", "x") and "fallback" in finding.message
    assert rows["gradcheck"].status == Status.SKIP  # its consequence, said once
    assert rows["op_fake"].status == Status.FAIL  # not a consequence: it has no fake either
    report = verify(opzoo.count_positive, spec=spec)
    rows = {c.name: c for c in report.results[0].checks}
    assert report.ok and rows["op_autograd_registration"].status == Status.SKIP


def test_command_line_finds_ops_by_module_name_spelling_and_changed_file(project):
    """In this process: the project's modules register ops of their own namespace (gvcli)."""
    tmp_path = project.root
    (tmp_path / "lib.py").write_text(
        "import torch\n"
        "L = torch.library.Library('gvcli', 'DEF')\n"
        "L.define('twice(Tensor x) -> Tensor')\n"
        "L.impl('twice', lambda x: x * 2, 'CompositeImplicitAutograd')\n")
    (tmp_path / "ops.py").write_text(
        "import torch\n"
        "@torch.library.custom_op('gvcli::sq', mutates_args=())\n"
        "def sq(x: torch.Tensor) -> torch.Tensor:\n"
        "    return x * x\n"
        "sq.register_fake(lambda x: torch.empty_like(x))\n"
        "sq.register_autograd(lambda ctx, g: 2 * g * ctx.saved_tensors[0],\n"
        "                     setup_context=lambda ctx, inputs, output:\n"
        "                     ctx.save_for_backward(inputs[0]))\n")
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "sq.yaml").write_text(
        "target: gvcli::sq\nimports: [ops]\ncases:\n  - args: {x: {shape: [3]}}\n")
    (tmp_path / "specs" / "twice.yaml").write_text(
        "target: gvcli::twice\nimports: [lib]\ncases:\n  - args: {x: {shape: [3]}}\n")

    def check(*args: str) -> Result:
        return run_cli("check", *args, "--format", "json")

    for args in (["ops"], ["torch.ops.gvcli:sq"], ["gvcli::sq.default"],
                 ["gvcli::sq", "--spec", "specs/sq.yaml"]):
        run = check(*args)
        assert run.code == 0, (args, run.stdout[-1500:], run.stderr[-1500:])
        assert {r["target"] for r in json.loads(run.stdout)["results"]} <= {
            "gvcli::sq", "torch.ops.gvcli:sq", "gvcli::sq.default"}, args
    run = check("lib")  # a module that registers its op by name only
    assert run.code == 0, run.stdout[-1500:]
    assert [r["target"] for r in json.loads(run.stdout)["results"]] == ["gvcli::twice"]
    run = check("--changed", "lib.py")  # a spec that imports the changed file runs
    assert run.code == 0, run.stderr
    assert [r["target"] for r in json.loads(run.stdout)["results"]] == ["gvcli::twice"]


def test_keyword_only_parameters_of_functions_and_modules():
    report = verify(opzoo.scaled_product, spec={"cases": [{"args": {
        "x": {"shape": [3]}, "y": {"shape": [3]}, "scale": 0.5}}]})
    assert report.ok and [i.name for i in report.results[0].inputs] == ["x", "y", "scale"]
    (gradcheck,) = [c for c in report.results[0].checks if c.name == "gradcheck"]
    assert gradcheck.status == Status.PASS
    report = verify(opzoo.Gated, spec={"cases": [{"args": {"x": {"shape": [2, 3]},
                                                           "gated": True}}]})
    assert report.ok and [i.name for i in report.results[0].inputs] == ["x", "gated", "gate"]
    report = verify(opzoo.scaled_product, spec={"cases": [{"args": {"x": {"shape": [3]}}}]})
    (error,) = report.errors
    assert "missing argument 'y' for scaled_product(x, *, y, scale=2.0)" in error.message


def test_op_fake_names_the_output_that_differs():
    report = verify(opzoo.sum_and_double, spec={"cases": [{"args": {"x": {"shape": [5, 4]}}}]},
                    checks=["op_fake"])
    (finding,) = report.results[0].checks[0].findings
    assert (finding.code, finding.output) == ("GV421", 1), finding.message
    assert "output 1 shape [5], the real op [5, 4]" in finding.message


def test_init_args_for_a_target_that_is_not_a_module_is_an_error():
    report = verify(opzoo.sin, spec={"init_args": {"n": 3},
                                     "cases": [{"args": {"x": {"shape": [3]}}}]})
    (error,) = report.errors
    assert error.code == "GV002" and "init_args builds an nn.Module target" in error.message


def test_a_modules_gradient_finding_points_at_the_function_it_calls(report):
    (row,) = [r for r in _rows(report, "first_row_linear") if r["status"] == "fail"]
    (gradcheck,) = [c for c in row["checks"] if c["name"] == "gradcheck"]
    lines = Path(opzoo.__file__).read_text().splitlines()
    start = next(i for i, text in enumerate(lines) if "class _FirstRowLinear" in text)
    line = next(i for i in range(start, len(lines)) if "def backward" in lines[i]) + 1
    assert {f["location"] for f in gradcheck["findings"]} == {f"opzoo.py:{line}"}


@pytest.mark.parametrize("xs", [[{"shape": [3]}, {"shape": [3]}], []])
def test_optional_and_empty_tensor_lists_are_spread_as_torch_flattens_them(xs):
    report = verify(opzoo.weighted_optional_sum, spec={"cases": [{"args": {
        "xs": {"list": xs}, "w": {"shape": [3]}}}]})
    assert report.ok, [(c.name, c.summary) for c in report.results[0].checks]
    assert [i.name for i in report.results[0].inputs] == [f"xs[{i}]" for i in range(len(xs))] \
        + ["w"]


def test_a_module_that_draws_random_numbers_or_keeps_a_float64_buffer():
    spec = {"cases": [{"args": {"x": {"shape": [2, 4]}}}]}
    report = verify(opzoo.NoisyScale, spec=spec)
    rows = {c.name: c for c in report.results[0].checks}
    assert report.ok and rows["gradcheck"].status == Status.PASS
    assert "random numbers" in rows["precision"].summary and \
        rows["layout"].status == Status.SKIP
    report = verify(opzoo.Accumulator, spec=spec)
    rows = {c.name: c for c in report.results[0].checks}
    assert report.ok and rows["precision"].status == Status.PASS
    torch.manual_seed(5)
    before = torch.random.get_rng_state()
    verify(opzoo.NoisyScale, spec=spec)
    assert torch.equal(before, torch.random.get_rng_state())  # the caller's stream, given back


def test_a_reference_takes_the_targets_arguments_with_lists_gathered():
    spec = {"reference": "opzoo:scaled_cat_reference", "checks": {"reference": True},
            "cases": [{"args": {"xs": {"list": [{"shape": [2]}, {"shape": [3]}]},
                                "scale": 1.5}}]}
    report = verify(opzoo.scaled_cat, spec=spec, checks=["reference", "gradcheck"])
    checks = {c.name: c for c in report.results[0].checks}
    assert checks["reference"].status == Status.PASS, checks["reference"].findings
    assert [i.name for i in report.results[0].inputs][:2] == ["xs[0]", "xs[1]"]
