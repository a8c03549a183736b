"""A failed check's smallest failing case, and its bare-torch repro (``--repro DIR``): shown,
dumped, written, and run with bare torch (it fails on the bug, passes on the fix)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, Project, run_cli

BROKEN = "specs_broken_broken_ops_"
"""How a repro's file name starts for specs/broken's targets."""


def _fixed() -> str:
    """broken_ops.py with SinWrongSign's one wrong line fixed."""
    source = (ROOT / "specs/broken/broken_ops.py").read_text()
    assert "return -grad * torch.cos(x)" in source
    return source.replace("return -grad * torch.cos(x)", "return grad * torch.cos(x)")


def _broken(project: Project) -> None:
    (project.root / "specs/broken").mkdir(parents=True)
    for name in ("broken.yaml", "broken_ops.py"):
        shutil.copy(ROOT / "specs/broken" / name, project.root / "specs/broken" / name)


def _bare(script: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The script as a user runs it: a fresh Python, no gradverify on its path."""
    return subprocess.run([sys.executable, "-I", str(script)], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


def test_repro_fails_under_bare_torch_and_passes_on_the_fix(project: Project) -> None:
    _broken(project)
    result = run_cli("check", "specs/broken/broken.yaml", "--only", "gradcheck,gradgradcheck",
                     "--repro", "repro", "--format", "plain")
    assert result.code == 1
    assert "smallest failing case:\n    - name: vector-smallest" in result.output
    written = {p.name for p in (project.root / "repro").iterdir()}
    assert {f"{BROKEN}CubeDetachedBackward_vector_gradgradcheck.py",
            f"{BROKEN}MatmulTransposed_square_gradcheck.py",
            f"{BROKEN}SinWrongSign_vector_gradcheck.py",
            f"{BROKEN}SquareForgetsGrad_matrix_gradcheck.py"} <= written
    assert f"repro: repro/{BROKEN}SinWrongSign_vector_gradcheck.py (GV121 gradcheck" \
        in result.stderr
    script = project.root / f"repro/{BROKEN}SinWrongSign_vector_gradcheck.py"
    text = script.read_text()
    assert "gradverify" not in text.split("import torch", 1)[1].replace(
        "# the folder gradverify ran in, from this script's", "")  # bare torch only
    assert str(project.root) not in text  # no local path: the project's folder from the script's
    for cwd in (project.root / "repro", project.root, Path(sys.executable).parent):
        done = _bare(script, cwd)
        assert done.returncode == 1, (cwd, done.stderr)
    assert "FAILED: torch.autograd.gradcheck on specs.broken.broken_ops:SinWrongSign" \
        in done.stderr and "Jacobian mismatch" in done.stderr
    project.write("fixed/fixed_ops.py", _fixed())
    fixed = project.root / "fixed/repro.py"
    fixed.write_text(text.replace("from specs.broken.broken_ops import SinWrongSign",
                                  f"sys.path.insert(0, {str(project.root / 'fixed')!r})\n"
                                  "from fixed_ops import SinWrongSign"))
    done = _bare(fixed, project.root)
    assert done.returncode == 0, done.stderr
    assert "ok: torch.autograd.gradcheck passes" in done.stdout
    done = _bare(project.root / f"repro/{BROKEN}CubeDetachedBackward_vector_gradgradcheck.py",
                 project.root)
    assert done.returncode == 1 and "FAILED: torch.autograd.gradgradcheck" in done.stderr
    moved = project.root.parent / f"{project.root.name}-moved"
    shutil.copytree(project.root, moved)  # the project, and the script with it
    (project.root / "specs/broken/broken_ops.py").unlink()  # nothing left where it ran
    done = _bare(moved / "repro" / script.name, moved.parent)
    assert done.returncode == 1 and "FAILED: torch.autograd.gradcheck" in done.stderr


def test_a_check_bare_torch_cannot_show_gets_no_script_and_says_so(project: Project) -> None:
    _broken(project)
    result = run_cli("check", "specs/broken/broken.yaml", "--only", "precision,contract",
                     "--repro", "repro", "--format", "plain")
    assert result.code == 1
    assert "no bare-torch repro for precision" in result.output
    # what autograd itself rejects (too few gradients) is shown by one backward
    (written,) = (project.root / "repro").iterdir()
    assert written.name == f"{BROKEN}ScaleMissingNone_scalar-factor_contract.py"
    done = _bare(written, project.root)
    assert done.returncode == 1 and "returned an incorrect number of gradients" in done.stderr


VIEWS_GRAD = """
import torch


class Triple(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.shape = x.shape
        return x * 3

    @staticmethod
    def backward(ctx, g):
        return (g.{how}(-1) * 3).view(ctx.shape)
"""


def _fails_then_passes(project: Project, module: str, spec: str, check: str, code: str,
                       texts: tuple[str, str], said: tuple[str, str]) -> None:
    """``check``'s repro of ``code`` on ``module`` (its broken and fixed ``texts``): written,
    failing under bare torch from another folder with ``said[0]``, passing with ``said[1]``
    once the module is fixed."""
    project.write(f"{module}.py", texts[0])
    project.write(f"{module}.yaml", spec)
    result = run_cli("check", f"{module}.yaml", "--only", check, "--repro", "repro")
    assert result.code == 1 and f"[{code} {check}]" in result.output, result.output
    (script,) = (project.root / "repro").iterdir()
    done = _bare(script, Path(sys.executable).parent)
    assert done.returncode == 1, done.stderr
    assert said[0] in done.stderr
    project.write(f"{module}.py", texts[1])  # the fix
    done = _bare(script, project.root)
    assert done.returncode == 0, done.stderr
    assert said[1] in done.stdout


def test_a_backward_that_assumes_a_contiguous_gradient_gets_a_bare_torch_repro(
        project: Project) -> None:
    _fails_then_passes(
        project, "views", "target: views:Triple\ncases:\n  - args: {x: {shape: [3, 4]}}\n",
        "layout", "GV254", (VIEWS_GRAD.format(how="view"), VIEWS_GRAD.format(how="reshape")),
        ("FAILED: backward of views:Triple raised on an incoming gradient with the same "
         "values transposed in memory", "ok: backward gives the same gradients whatever"))


WITH_REFERENCE = """
import torch


def reference(x, w):
    return torch.tanh(x) * w


class ScaledTanh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return torch.tanh(x) * w

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        t = torch.tanh(x)
        return g * (1 - t * t){factor}, g * t
"""


def test_a_gradient_that_differs_from_the_reference_gets_a_bare_torch_repro(
        project: Project) -> None:
    _fails_then_passes(
        project, "scaled", "target: scaled:ScaledTanh\nreference: scaled:reference\n"
        "cases:\n  - args: {x: {shape: [4]}, w: {shape: [4]}}\n", "reference", "GV332",
        # the broken one forgets w in x's gradient
        (WITH_REFERENCE.format(factor=""), WITH_REFERENCE.format(factor=" * w")),
        ("FAILED: the gradient of scaled:ScaledTanh for input 0 differs from autograd "
         "through the reference", "ok: outputs and gradients equal the reference's"))


MODULE = """
import torch


class _Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(weight, x)
        return weight * x

    @staticmethod
    def backward(ctx, g):
        weight, x = ctx.saved_tensors
        return g * weight, (g * x).sum(0){factor}


class Scaled(torch.nn.Module):
    def __init__(self, width, drop=0.0):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(width))
        self.register_buffer("calls", torch.zeros(()))
        self.drop = torch.nn.Dropout(drop)

    def forward(self, x):
        self.calls += 1
        return self.drop(_Scale.apply(x, self.weight))
"""


def test_a_module_target_gets_a_bare_torch_repro_built_from_its_init_args(
        project: Project) -> None:
    """The module built as gradverify builds it (seeded, from init_args), its parameters
    inputs, the same dropout mask on every call: bare gradcheck fails on the bug in the
    parameter's gradient and passes on the fix."""
    _fails_then_passes(
        project, "layers", "target: layers:Scaled\ninit_args: {width: 4, drop: 0.25}\n"
        "cases:\n  - args: {x: {shape: [3, 4]}}\n", "gradcheck", "GV121",
        (MODULE.format(factor=" * 2"), MODULE.format(factor="")),
        ("FAILED: torch.autograd.gradcheck on layers:Scaled", "ok: torch.autograd.gradcheck"))
    (script,) = (project.root / "repro").iterdir()
    assert "built = Scaled(**{'width': 4, 'drop': 0.25}).double()" in script.read_text()


def test_repro_never_writes_over_a_file_it_did_not_write(project: Project) -> None:
    _broken(project)
    mine = project.write(f"repro/{BROKEN}SinWrongSign_vector_gradcheck.py", "print('mine')\n")
    result = run_cli("check", "specs/broken/broken.yaml", "--only", "gradcheck",
                     "--case", "vector", "--repro", "repro")
    assert mine.read_text() == "print('mine')\n"
    assert "is not a repro gradverify wrote: left as it is" in result.stderr
    assert result.code == 2  # the report is shown, a file asked for is missing


def test_repro_folder_that_is_a_file_is_refused_before_the_run(project: Project) -> None:
    _broken(project)
    project.write("taken", "a file\n")
    result = run_cli("check", "specs/broken/broken.yaml", "--repro", "taken")
    assert result.code == 2
    assert "--repro" in result.stderr and "is a file, not a folder" in result.stderr
    assert "smallest" not in result.output  # nothing ran


def test_json_and_isolated_runs_carry_the_smallest_case(project: Project) -> None:
    _broken(project)
    result = run_cli("check", "specs/broken/broken.yaml", "--only", "gradcheck", "--case",
                     "square", "--format", "json", isolate=True)
    assert result.code == 1
    (case,) = json.loads(result.output)["results"]
    (finding,) = case["checks"][0]["findings"]
    smallest = finding["smallest"]
    assert smallest["name"] == "square-smallest" and smallest["repro"] is None
    # the transpose shows only where the sizes differ: shrunk to the smallest distinct ones
    assert smallest["shapes"] == [{"name": "a", "shape": [1, 2]},
                                  {"name": "b", "shape": [2, 2]}]
    assert "a: {shape: [1, 2]" in smallest["case"] and smallest["tried"] > 1


def test_verify_in_process_shrinks_too() -> None:
    from gradverify import verify
    from specs.broken.broken_ops import SinWrongSign  # type: ignore[import-not-found]

    report = verify(SinWrongSign, spec={"cases": [{"name": "big", "args": {
        "x": {"shape": [6, 5]}}}]}, checks=["gradcheck"])
    (finding,) = report.results[0].checks[0].findings
    assert finding.smallest is not None
    assert finding.smallest.shapes == (("x", (1, 1)),)
    assert finding.smallest.case.startswith('- name: big-smallest')


def test_on_an_accelerator_candidates_that_raise_on_the_cpu_never_reach_the_device(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen on CUDA: shrinking x under the literal index [4, 1, 1] made an out-of-range index,
    a device-side assert there, which poisoned the process for every case after it. On an
    accelerator each candidate's forward runs on the CPU first (``cpu:0`` stands in for the
    device here: a run whose device is not ``cpu``) and one that raises is not run."""
    import sys

    from gradverify import verify
    from gradverify.run import execute

    sys.path.insert(0, str(Path(__file__).parent))
    import zoo

    shapes: list[tuple[int, ...]] = []
    real = execute.run_case

    def recording(info, spec, case, bound, options, *args, **kwargs):  # type: ignore[no-untyped-def]
        shapes.extend(tuple(a.shape) for name, a in case.args if name == "x")
        return real(info, spec, case, bound, options, *args, **kwargs)

    monkeypatch.setattr(execute, "run_case", recording)
    cls = zoo.GatherDetachesIncomingGrad
    report = verify(cls, spec=cls.SPEC, checks=["gradgradcheck"], device="cpu:0")
    (finding,) = [f for f in report.results[0].checks[0].findings if f.code == "GV142"]
    assert finding.smallest is not None
    assert ("x", (5,)) in finding.smallest.shapes  # index 4 needs five elements: not shrunk
    assert shapes and all(s[0] >= 5 for s in shapes if s), shapes


MUTATING = '''
import torch
from torch.autograd import Function


class ScalesSaved(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.mul_(2)
'''


def test_a_write_into_a_saved_tensor_gets_a_repro_comparing_values(project: Project) -> None:
    project.write("ops.py", MUTATING)
    project.write("s.yaml", "target: ops:ScalesSaved\ncases:\n  - name: v\n"
                            "    args: {x: {shape: [4, 3]}}\n")
    result = run_cli("check", "s.yaml", "--only", "mutation", "--repro", "out")
    assert result.code == 1, result.output
    script = project.root / "out/ops_ScalesSaved_v_mutation.py"
    done = _bare(script, project.root)
    assert done.returncode == 1
    assert "wrote into the tensors forward saved in place" in done.stderr
    project.write("ops.py", MUTATING.replace("x.mul_(2)", "x * 2"))
    done = _bare(script, project.root)
    assert done.returncode == 0 and "ok: backward leaves" in done.stdout


ABORTS_WHEN_SMALL = '''
import os

import torch
from torch.autograd import Function


class AbortsWhenSmall(Function):
    @staticmethod
    def forward(ctx, x):
        if x.numel() == 1:
            os.abort()
        ctx.save_for_backward(x)
        return torch.sin(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return -grad * torch.cos(x)
'''


def test_a_smaller_case_that_kills_the_worker_leaves_the_failure_standing(
        project: Project) -> None:
    project.write("ops.py", ABORTS_WHEN_SMALL)
    project.write("s.yaml", "target: ops:AbortsWhenSmall\ncases:\n  - name: v\n"
                            "    args: {x: {shape: [3]}}\n")
    result = run_cli("check", "s.yaml", "--only", "gradcheck", "--format", "json",
                     isolate=True)
    assert result.code == 1
    (case,) = json.loads(result.stdout)["results"]
    (row,) = case["checks"]
    assert (case["status"], row["name"], row["status"]) == ("fail", "gradcheck", "fail")
    assert row["findings"][0]["code"] == "GV121" and row["findings"][0]["smallest"] is None


WRONG = """
import torch


class Sin(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sin(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return -grad * torch.cos(x)
"""


def test_two_targets_whose_names_read_the_same_get_a_script_each(project: Project) -> None:
    """``a.b:Sin`` and ``a_b:Sin`` both read ``a_b_Sin``: neither script replaces the other."""
    project.write("a/__init__.py", "")
    project.write("a/b.py", WRONG)
    project.write("a_b.py", WRONG)
    result = run_cli("check", "a.b:Sin", "a_b:Sin", "--only", "gradcheck", "--repro",
                     "repro")
    assert result.code == 1, result.output
    written = sorted(p.name for p in (project.root / "repro").iterdir())
    assert len(written) == 2 and all(name.startswith("a_b_Sin_") for name in written)
    said = [line for line in result.stderr.splitlines() if line.startswith("repro: ")]
    assert sorted(line.split()[1].removeprefix("repro/") for line in said) == written
    for name in written:
        assert _bare(project.root / "repro" / name, project.root).returncode == 1


def test_script_names_differ_without_case_and_stay_short() -> None:
    """``mod:Foo`` and ``mod:foo`` are one file on macOS's and Windows' file systems; a long
    sweep's case name stays within a file name's 255 bytes."""
    from gradverify.run.repro import MAX_NAME, file_names

    keys = [("mod:Foo", "v", "gradcheck"), ("mod:foo", "v", "gradcheck"),
            ("mod:Bar", "x" * 300, "gradcheck"), ("mod:Baz", "v", "gradcheck")]
    names = file_names(keys)
    assert len({n.casefold() for n in names.values()}) == 4
    assert all(len(n) <= MAX_NAME for n in names.values())
    assert names[keys[3]] == "mod_Baz_v_gradcheck.py"  # its own name: kept as it reads


def test_a_repro_folder_named_with_a_newline_is_said_escaped(project: Project) -> None:
    """A line of stderr that starts ``::error::`` is a GitHub workflow command."""
    _broken(project)
    result = run_cli("check", "specs/broken/broken.yaml", "--only", "gradcheck", "--case",
                     "vector", "--repro", "out\n::error::x")
    assert result.code == 1, result.output
    assert "repro: out\\n::error::x/" in result.stderr
    assert not any(line.startswith("::") for line in result.stderr.splitlines())
