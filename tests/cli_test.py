"""The command line: exit codes and messages, through CliRunner and the one exit boundary."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

import functions
from conftest import ROOT, run_cli, unwrap

GOOD_OPS = functions.module(functions.square()) + """

class Cube(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x ** 2 * grad   # wrong: should be 3


class NotAFunction:
    pass


def make(generator, dims):
    return (torch.randn(dims["N"], generator=generator, dtype=torch.float64),)


def bad_factory():
    raise ValueError("boom")
"""

SQUARE_SPEC = """
target: ops:Square
cases:
  - name: vec
    args: {x: {shape: [4]}}
"""


@pytest.fixture
def ops(project):
    project.write("ops.py", GOOD_OPS)
    project.write("specs/square.yaml", SQUARE_SPEC)
    return project


def test_version_and_help():
    result = run_cli("--version")
    assert result.code == 0 and "gradverify 0.1.0" in result.stdout
    result = run_cli("--help")
    assert result.code == 0 and "check" in result.stdout and "explain" in result.stdout


def test_check_passes_on_default_spec_folder(ops):
    result = run_cli("check")
    assert result.code == 0, result.output
    assert "ops:Square :: vec" in result.stdout
    assert re.match(r"11 passed, 2 skipped in \d", result.stdout.rstrip().splitlines()[-1])


def test_check_fails_with_named_input(ops):
    ops.write("specs/cube.yaml", "target: ops:Cube\ncases:\n  - args: {x: {shape: [3]}}\n")
    result = run_cli("check", "specs/cube.yaml")
    assert result.code == 1
    assert "gradient for 'x' (output 0) is wrong: off by a constant factor 0.6667" in result.stdout
    assert "ops.py:" in result.stdout and "[GV121 gradcheck]" in result.stdout
    assert "explain: gradverify explain GV121" in result.stdout


def test_bad_spec_exits_3_and_other_targets_still_run(ops):
    ops.write("specs/bad.yaml", "target: ops:Square\ncases:\n  - args: {x: {shape: [3], dtyp: x}}\n")
    result = run_cli("check")
    assert result.code == 3
    assert "specs/bad.yaml:3: cases[0].args.x.dtyp: unknown key 'dtyp' (did you mean 'dtype'?)" \
        in result.stdout
    assert "ops:Square :: vec" in result.stdout and "PASS" in result.stdout


def test_failure_and_input_error_exit_3_wins(ops):
    ops.write("specs/cube.yaml", "target: ops:Cube\ncases:\n  - args: {x: {shape: [3]}}\n")
    ops.write("specs/missing.yaml", "target: ops:Sqaure\ncases:\n  - args: {x: {shape: [3]}}\n")
    result = run_cli("check")
    assert result.code == 3
    assert "'ops' has no attribute 'Sqaure' (did you mean 'Square'?)" in result.stdout


@pytest.mark.parametrize(("target", "code", "message"), [
    ("ops:Nope", 3, "'ops' has no attribute 'Nope'"),
    ("ops:NotAFunction", 3, "not a torch.autograd.Function subclass"),
    ("nomodule:Thing", 3, "cannot import module 'nomodule'"),
    ("specs/none.yaml", 3, "no such spec file"),
    ("ops.py:Square", 0, "ops:Square :: vec"),
    ("ops:Square", 0, "(specs/square.yaml)"),
    ("ops", 0, "ops:Square :: vec"),
    ("ops.py", 0, "ops:Square :: vec"),
    ("specs", 0, "ops:Square :: vec"),
    ("specs/square.yaml", 0, "ops:Square :: vec"),
])
def test_target_forms(ops, target, code, message):
    result = run_cli("check", target)
    assert result.code == code, result.output
    assert message in result.flat


def test_inferred_spec_is_reported(ops):
    result = run_cli("check", "ops:Cube", "--only", "contract")
    assert result.code == 0
    assert "ops:Cube :: inferred  (inferred spec)" in result.stdout
    assert "inputs: x [3x4] float32" in result.stdout


def test_inferred_spec_forward_failure_suggests_init(project):
    project.write("mm.py", GOOD_OPS.replace("return x * x", "return x @ x"))
    result = run_cli("check", "mm:Square")
    assert result.code == 1
    assert "forward raised RuntimeError" in result.stdout
    assert "gradverify init mm:Square" in result.stdout


def test_spec_option_for_a_bare_target(ops):
    ops.write("other/cube.yaml", "cases:\n  - name: small\n    args: {x: {shape: [2]}}\n")
    result = run_cli("check", "ops:Square", "--spec", "other/cube.yaml")
    assert result.code == 0 and "ops:Square :: small" in result.stdout


def test_nothing_selected_exits_5(ops):
    result = run_cli("check", "--case", "nomatch")
    assert result.code == 5 and "no checks ran" in result.stdout
    result = run_cli("check", "ops:Square", "--case", "nomatch")
    assert result.code == 5


def test_empty_project_exits_5_with_advice(project):
    result = run_cli("check")
    assert result.code == 5
    assert "no spec folder found" in result.stdout and "gradverify init" in result.stdout


def test_usage_errors_exit_2(ops):
    result = run_cli("check", "--only", "gradchek")
    assert result.code == 2 and "did you mean 'gradcheck'" in result.output
    assert run_cli("check", "--format", "xml").code == 2
    assert run_cli("nosuchcommand").code == 2
    result = run_cli("explain", "GV999")
    assert result.code == 2 and "no code or check named" in result.output


def test_factory_errors_exit_3(ops):
    ops.write("specs/f.yaml", "target: ops:Square\ncases:\n  - name: f\n    factory: ops:bad_factory\n")
    result = run_cli("check", "specs/f.yaml")
    assert result.code == 3 and "factory ops:bad_factory raised ValueError: boom" in result.output


def test_factory_gets_generator_and_dims(ops):
    ops.write("specs/f.yaml", "target: ops:Square\ndims: {N: [2, 3]}\ncases:\n"
              "  - name: f\n    factory: ops:make\n")
    result = run_cli("check", "specs/f.yaml", "--format", "json")
    assert result.code == 0, result.output
    data = json.loads(result.stdout)
    assert [r["inputs"][0]["shape"] for r in data["results"]] == [[2], [3]]


def test_json_report_schema(ops):
    result = run_cli("check", "--format", "json")
    data = json.loads(result.stdout)
    assert data["schema"] == 1 and data["gradverify"] == "0.1.0"
    assert set(data) >= {"torch", "python", "settings", "summary", "results", "errors"}
    assert data["settings"] == {"device": "cpu", "seed": 0, "mode": "auto"}
    assert data["summary"]["cases"] == 1 and data["summary"]["pass"] == 11
    assert data["summary"]["skip"] == 2 and data["summary"]["fail"] == 0
    assert data["summary"]["exit_code"] == 0
    (case,) = data["results"]
    assert case["target"] == "ops:Square" and case["spec"] == "specs/square.yaml"
    assert case["inputs"] == [{"name": "x", "kind": "tensor", "shape": [4], "dtype": "float32",
                               "requires_grad": True}]
    assert [c["name"] for c in case["checks"]][:3] == ["contract", "gradcheck", "gradgradcheck"]
    saved = next(c for c in case["checks"] if c["name"] == "saved_tensors")
    assert saved["summary"].startswith("saves 1 tensor (1 input), 16 B per call")
    assert case["checks"][1]["mode"] == "slow"


def test_json_and_output_files(ops):
    ops.write("specs/cube.yaml", "target: ops:Cube\ncases:\n  - args: {x: {shape: [3]}}\n")
    result = run_cli("check", "--json", "out/report.json", "--format", "plain", "--output",
                     "out/report.txt")
    assert result.code == 1
    data = json.loads((ops.root / "out/report.json").read_text())
    finding = data["results"][0]["checks"][1]["findings"][0]
    assert finding["code"] == "GV121" and finding["input"] == "x" and finding["output"] == 0
    assert finding["location"].startswith("ops.py:")
    assert "failed" in (ops.root / "out/report.txt").read_text()
    assert "failed" in result.stdout
    assert not list((ops.root / "out").glob(".*.tmp"))


def test_seed_changes_inputs_reproducibly(ops):
    a = run_cli("check", "--format", "json", "--seed", "1", "--only", "gradcheck").stdout
    b = run_cli("check", "--format", "json", "--seed", "1", "--only", "gradcheck").stdout
    assert json.loads(a)["settings"]["seed"] == 1
    strip = lambda s: [c["summary"] for r in json.loads(s)["results"] for c in r["checks"]]  # noqa: E731
    assert strip(a) == strip(b)


def test_internal_error_exits_4(ops, monkeypatch):
    from gradverify.checks import _jacobian

    # A builtin raising inside gradverify's own frame stands in for a bug of ours.
    monkeypatch.setattr(_jacobian, "jacobian_entries", len)
    result = run_cli("check")
    assert result.code == 4
    assert "internal error" in result.stdout and "please report" in result.stdout


def test_init_writes_a_spec_that_runs(ops):
    result = run_cli("init", "ops:Square", "-o", "specs/generated.yaml")
    assert result.code == 0 and "wrote specs/generated.yaml" in result.stdout
    text = (ops.root / "specs/generated.yaml").read_text()
    assert "target: ops:Square" in text and "x: {shape: [N, 4]}" in text
    assert run_cli("check", "specs/generated.yaml").code == 0
    again = run_cli("init", "ops:Square", "-o", "specs/generated.yaml")
    assert again.code == 2 and "--force" in again.output


def test_init_reads_annotations_and_defaults(project):
    project.write("lin.py", '''
        from typing import Optional
        import torch
        from torch.autograd import Function

        class Lin(Function):
            @staticmethod
            def forward(ctx, input: torch.Tensor, weight: torch.Tensor,
                        bias: Optional[torch.Tensor] = None, scale: float = 2.0, dim: int = 1):
                return input

            @staticmethod
            def backward(ctx, grad):
                return grad, None, None, None, None
    ''')
    text = run_cli("init", "lin:Lin").stdout
    assert "input: {shape: [N, 4]}" in text
    assert "bias: null" in text and "Optional" in text
    assert "scale: 2.0" in text and "dim: 1" in text


def test_list_without_import_and_with_module(ops):
    result = run_cli("list")
    assert result.code == 0 and "specs/square.yaml:1  ops:Square  1 case" in result.stdout
    result = run_cli("list", "ops")
    assert "ops:Square  [ctx]  spec: specs/square.yaml:1" in result.stdout
    assert "ops:Cube  [ctx]  no spec (gradverify init ops:Cube)" in result.stdout


def test_explain_codes_and_checks():
    result = run_cli("explain", "GV121")
    assert result.code == 0
    for section in ("What it is", "Why it matters", "Example", "Fix"):
        assert section in result.stdout
    assert "jacobian-mismatch" in run_cli("explain", "gv121").stdout
    assert "GV121" in run_cli("explain", "jacobian-mismatch").stdout
    assert "GV143" in run_cli("explain", "gradgradcheck").stdout
    assert "GV101" in run_cli("explain").stdout


def test_explain_overview_aligns_every_check_name():
    lines = [line for line in run_cli("explain").stdout.splitlines()
             if line.startswith("  ") and not line.strip().startswith("GV")]
    # the summary starts in the same column on every row, the longest name included
    columns = {len(line) - len(line[2:].split(" ", 1)[1].lstrip()) for line in lines}
    assert len(columns) == 1
    assert any("needs_input_grad  " in line for line in lines)


def test_python_dash_m_and_installed_script(tmp_path):
    result = subprocess.run([sys.executable, "-m", "gradverify", "--version"],
                            capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0 and "0.1.0" in result.stdout


def test_bundled_examples_pass_end_to_end():
    """`gradverify check` in the repository root, as a user runs it (a subprocess)."""
    result = subprocess.run([sys.executable, "-m", "gradverify", "check", "--no-color"],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    last = result.stdout.rstrip().splitlines()[-1]
    assert re.search(r"\b\d+ passed", last) and not re.search(r"\b\d+ failed", last)
    assert "2 xfailed" in last   # the estimator and the float32-only kernel


def test_broken_examples_fail_end_to_end():
    result = subprocess.run([sys.executable, "-m", "gradverify", "check", "specs/broken",
                             "--no-color"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 1
    stdout = unwrap(result.stdout)
    for expected in ("sign flipped", "not multiplied by the incoming gradient", "GV102",
                     "transposed", "second derivative d(grad 'x')/d('x') is wrong"):
        assert expected in stdout


def test_device_cuda_without_cuda_is_a_usage_error(ops):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    result = run_cli("check", "--device", "cuda")
    assert result.code == 2 and "CUDA is not available" in result.output


def test_opt_in_compile_check_from_the_command_line(ops):
    result = run_cli("check", "--only", "compile", "--format", "json")
    data = json.loads(result.stdout)
    assert [c["name"] for c in data["results"][0]["checks"]] == ["compile"]
    assert data["results"][0]["checks"][0]["status"] == "pass"


def test_every_spec_naming_a_class_runs(ops):
    ops.write("specs/more/square_big.yaml",
              "target: ops.py:Square\ncases:\n  - name: big\n    args: {x: {shape: [6, 7]}}\n")
    result = run_cli("check", "ops:Square", "--only", "gradcheck", "--format", "json")
    assert result.code == 0, result.output
    report = json.loads(result.stdout)
    assert {(r["spec"], r["case"]) for r in report["results"]} == {
        ("specs/square.yaml", "vec"), ("specs/more/square_big.yaml", "big")}


STAR = functions.module('''
class Total(Function):
    @staticmethod
    def forward(ctx, *xs):
        ctx.count = len(xs)
        return torch.stack(xs).sum(0)

    @staticmethod
    def backward(ctx, grad):
        return tuple(-grad for _ in range(ctx.count))   # wrong sign
''')


def test_star_args_forward_is_checked_with_a_list_of_inputs(project):
    project.write("star.py", STAR)
    result = run_cli("check", "star:Total")
    assert result.code == 1, result.output
    assert "inputs: xs[0] [3x4] float32, xs[1] [3x4] float32" in result.stdout
    assert "gradient for 'xs[0]'" in result.flat
    written = run_cli("init", "star:Total", "-o", "specs/total.yaml")
    assert written.code == 0
    assert "xs: [{shape: [N, 4]}, {shape: [N, 4]}]" in (project.root / "specs/total.yaml").read_text()
    assert "gradient for 'xs[1]'" in run_cli("check", "specs/total.yaml").flat
