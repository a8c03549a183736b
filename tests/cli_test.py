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
    assert "specs/square.yaml  ops:Square  ." in result.stdout  # one line, a dot per case
    assert "ops:Square :: vec" in run_cli("check", "-v").stdout  # every case's table
    assert re.match(r"15 passed, 2 skipped in \d", result.stdout.rstrip().splitlines()[-1])


def test_check_fails_with_named_input(ops):
    ops.write("specs/cube.yaml", "target: ops:Cube\ncases:\n  - args: {x: {shape: [3]}}\n")
    result = run_cli("check", "specs/cube.yaml")
    assert result.code == 1
    assert "gradient for 'x' (output 0) is wrong: off by a constant factor 0.6667" in result.flat
    assert "ops.py:" in result.stdout and "[GV121 gradcheck]" in result.stdout
    assert "explain: gradverify explain GV121" in result.stdout


def test_bad_spec_exits_3_and_other_targets_still_run(ops):
    ops.write("specs/bad.yaml",
              "target: ops:Square\ncases:\n  - args: {x: {shape: [3], dtyp: x}}\n")
    result = run_cli("check")
    assert result.code == 3
    assert "specs/bad.yaml:3: cases[0].args.x.dtyp: unknown key 'dtyp' (did you mean 'dtype'?)" \
        in result.flat
    assert "specs/square.yaml  ops:Square  ." in result.stdout


def test_failure_and_input_error_exit_3_wins(ops):
    ops.write("specs/cube.yaml", "target: ops:Cube\ncases:\n  - args: {x: {shape: [3]}}\n")
    ops.write("specs/missing.yaml", "target: ops:Sqaure\ncases:\n  - args: {x: {shape: [3]}}\n")
    result = run_cli("check")
    assert result.code == 3
    assert "'ops' has no attribute 'Sqaure' (did you mean 'Square'?)" in result.stdout


@pytest.mark.parametrize(("target", "code", "message"), [
    ("ops:Nope", 3, "'ops' has no attribute 'Nope'"),
    ("ops:NotAFunction", 3, "gradverify verifies torch.autograd.Function classes, custom ops"),
    ("nomodule:Thing", 3, "cannot import module 'nomodule'"),
    ("specs/none.yaml", 3, "no such spec file"),
    ("ops.py:Square", 0, "specs/square.yaml  ops:Square  ."),
    ("ops:Square", 0, "specs/square.yaml  ops:Square  ."),
    ("ops", 0, "specs/square.yaml  ops:Square  ."),
    ("ops.py", 0, "specs/square.yaml  ops:Square  ."),
    ("specs", 0, "specs/square.yaml  ops:Square  ."),
    ("specs/square.yaml", 0, "specs/square.yaml  ops:Square  ."),
])
def test_target_forms(ops, target, code, message):
    result = run_cli("check", target)
    assert result.code == code, result.output
    assert message in result.flat


def test_inferred_spec_is_reported(ops):
    result = run_cli("check", "ops:Cube", "--only", "contract", "-v")
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
    result = run_cli("check", "ops:Square", "--spec", "other/cube.yaml", "-v")
    assert result.code == 0 and "ops:Square :: small" in result.stdout


def test_nothing_selected_exits_5(ops):
    result = run_cli("check", "--case", "nomatch")
    assert result.code == 5 and "no checks ran" in result.stdout
    result = run_cli("check", "ops:Square", "--case", "nomatch")
    assert result.code == 5


def test_empty_project_exits_5_with_advice(project):
    result = run_cli("check")
    assert result.code == 5
    assert "no spec folder found" in result.flat and "gradverify init" in result.flat


def test_usage_errors_exit_2(ops):
    result = run_cli("check", "--only", "gradchek")
    assert result.code == 2 and "did you mean 'gradcheck'" in result.output
    assert run_cli("check", "--format", "xml").code == 2
    assert run_cli("nosuchcommand").code == 2
    result = run_cli("explain", "GV999")
    assert result.code == 2 and "no code or check named" in result.output


def test_factory_errors_exit_3(ops):
    ops.write("specs/f.yaml",
              "target: ops:Square\ncases:\n  - name: f\n    factory: ops:bad_factory\n")
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
    assert data["schema"] == 2 and data["gradverify"] == "0.1.0"
    assert set(data) >= {"torch", "python", "settings", "summary", "results", "errors"}
    assert data["triton"] is None  # Triton's interpreter is not on (triton_test.py)
    assert data["settings"] == {"device": "cpu", "seed": 0, "mode": "auto", "strict": False,
                                "empty_ok": False}
    assert data["summary"]["cases"] == 1 and data["summary"]["pass"] == 15
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
    assert result.code == 0
    assert "wrote specs/generated.yaml: ops:Square (inputs run)" in result.stdout
    text = (ops.root / "specs/generated.yaml").read_text()
    assert "target: ops:Square" in text and "x: {shape: [N, D]}" in text
    assert "these inputs ran forward and backward" in text
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
                out = input.mm(weight.t())
                return (out + bias if bias is not None else out) * scale

            @staticmethod
            def backward(ctx, grad):
                return grad, grad, grad.sum(0), None, None
    ''')
    text = run_cli("init", "lin:Lin").stdout
    assert "input: {shape: [N, D]}" in text and "weight: {shape: [K, D]}" in text
    assert "bias: {shape: [K]}" in text
    assert "# scale: 2.0   (forward's default" in text and "# dim: 1   (forward's default" in text


def test_list_without_import_and_with_module(ops):
    result = run_cli("list")
    assert result.code == 0 and "specs/square.yaml:1  ops:Square  1 case" in result.stdout
    result = run_cli("list", "ops")
    assert "ops:Square  (setup_context)  spec: specs/square.yaml:1" in result.stdout
    assert "ops:Cube  (forward(ctx, ...))  no spec (gradverify init ops:Cube)" in result.stdout


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


def test_bundled_examples_pass_end_to_end(tmp_path):
    """`gradverify check` in the repository root, as a user runs it (a subprocess): every check
    of every bundled example passes, skips or fails as expected, in a report that fits."""
    result = subprocess.run([sys.executable, "-m", "gradverify", "check", "--no-color",
                             "--json", str(tmp_path / "r.json")],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    last = result.stdout.rstrip().splitlines()[-1]
    assert re.search(r"\b\d+ passed", last) and not re.search(r"\b\d+ failed", last)
    assert "1 xfailed" in last   # the estimator (the float32-only kernel passes)
    assert len(result.stdout.splitlines()) <= 40
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["results"] and not report["errors"]
    assert [(r["target"], r["case"], c["name"], c["status"]) for r in report["results"]
            for c in r["checks"] if c["status"] not in ("pass", "skip", "xfail")] == []


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


def test_compose_in_a_spec_turns_on_the_composition_checks(ops):
    """``compose: all`` at a spec's top: its cases get the composition checks (autocast here;
    compile skipped by name, for time); an unknown value is a spec error (exit 3) that says
    what it takes, never a traceback."""
    ops.write("specs/square.yaml", "compose: all\n" + SQUARE_SPEC)
    result = run_cli("check", "--skip", "compile", "--format", "json")
    names = [c["name"] for c in json.loads(result.stdout)["results"][0]["checks"]]
    assert result.code == 0 and "autocast" in names and "compile" not in names, result.output
    ops.write("specs/square.yaml", "compose: maybe\n" + SQUARE_SPEC)
    result = run_cli("check")
    assert result.code == 3 and "Traceback" not in result.output
    assert "specs/square.yaml:1: compose: expected all (every composition check" in \
        unwrap(result.output), result.output


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
    text = (project.root / "specs/total.yaml").read_text()
    assert "xs: [{shape: [N, D]}, {shape: [N, D]}]" in text
    assert "gradient for 'xs[1]'" in run_cli("check", "specs/total.yaml").flat


# --------------------------------------------------------------------------- what is said, and once

INPLACE = functions.module('''
class ClampNoDirty(Function):
    @staticmethod
    def forward(ctx, x):
        x.clamp_(min=0)          # writes into the caller's tensor, without mark_dirty
        ctx.save_for_backward(x)
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * (y > 0).to(grad.dtype)


class Raises(Function):
    @staticmethod
    def forward(ctx, x):
        raise ValueError("unsupported input")

    @staticmethod
    def backward(ctx, grad):
        return grad
''')


def test_a_root_cause_is_said_once(project):
    project.write("inplace.py", INPLACE)
    project.write("specs/r.yaml", "target: inplace:Raises\ndims: {N: [2, 3]}\ncases:\n"
                                  "  - name: v\n    args: {x: {shape: [N]}}\n")
    result = run_cli("check", "specs/r.yaml")
    assert result.flat.count("forward raised ValueError: unsupported input") == 4  # row + finding
    assert result.flat.count("[GV008") == 2  # once per case
    assert "skipped: forward raised (see contract)" in result.flat
    result = run_cli("check", "inplace:ClampNoDirty")
    assert "[GV221 mutation]" in result.flat
    assert "GV251" not in result.flat and "GV322" not in result.flat  # no layout/precision advice
    assert "a consequence of GV221 (see mutation)" in result.flat


def test_fail_rows_say_what_failed(project):
    project.write("inplace.py", INPLACE)
    result = run_cli("check", "inplace:ClampNoDirty", "-v")
    assert re.search(r"FAIL +mutation +[\d.]+s forward writes into input 'x' in place without "
                     r"ctx.mark_dirty", result.flat)


def test_a_sweep_applies_wherever_a_dim_is_used(project):
    project.write("seg.py", functions.module('''
class SegSum(Function):
    @staticmethod
    def forward(ctx, values, ids, n: int):
        ctx.save_for_backward(ids)
        return values.new_zeros(n, values.shape[1]).index_add(0, ids, values)

    @staticmethod
    def backward(ctx, grad):
        (ids,) = ctx.saved_tensors
        return grad[ids], None, None
'''))
    project.write("specs/seg.yaml", "target: seg:SegSum\ndims: {S: [3, 6]}\ncases:\n  - name: a\n"
                  "    args:\n      values: {shape: [5, 2]}\n"
                  "      ids: {shape: [5], dtype: int64, high: S}\n      n: S\n")
    result = run_cli("check", "specs/seg.yaml", "-v")
    assert result.code == 0, result.output
    assert "seg:SegSum :: a[S=3]" in result.stdout and "seg:SegSum :: a[S=6]" in result.stdout
    assert "n: int" in result.stdout


def test_every_error_of_a_spec_file_is_listed(ops):
    ops.write("specs/bad.yaml", "target: ops:Square\ntolerance: {atl: 1}\ncases:\n"
                                "  - args: {x: {shape: [3], dtyp: float32}}\n"
                                "  - args: {x: {shape: [3], init: bogus}}\n")
    result = run_cli("check", "specs/bad.yaml")
    assert result.code == 3
    assert all(message in result.flat for message in (
        "specs/bad.yaml:2: tolerance.atl: unknown key 'atl'",
        "specs/bad.yaml:4: cases[0].args.x.dtyp: unknown key 'dtyp'",
        "specs/bad.yaml:5: cases[1].args.x.init: unknown init 'bogus'"))


def test_an_unmatched_case_filter_lists_the_cases(ops):
    result = run_cli("check", "--case", "nobias")
    assert result.code == 5
    assert "--case nobias matches no case" in result.flat and "ops:Square: vec" in result.flat


def test_changed_factory_modules_rerun_their_specs(ops):
    ops.write("factories.py", "import torch\n\ndef make(generator):\n"
                              "    return (torch.randn(3, generator=generator),)\n")
    ops.write("specs/made.yaml", "target: ops:Cube\ncases:\n  - factory: factories:make\n")
    result = run_cli("check", "--changed", "factories.py")
    assert result.code == 1 and "ops:Cube" in result.stdout
    assert "specs/square.yaml" not in result.stdout


def test_case_named_as_the_report_prints_it():
    from gradverify.run.runner import selected_case

    assert selected_case("basic[S=3]", ("basic[S=3]",))
    assert not selected_case("basic[S=1]", ("basic[S=3]",))
    assert selected_case("basic[S=1]", ("basic",)) and selected_case("basic[S=1]", ("b*",))
