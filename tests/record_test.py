"""`gradverify record` and `gradverify.record()`: specs from a real run that run, and that catch
a planted bug in each recorded Function; the run itself unchanged."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest
import torch

import functions
import gradverify
from conftest import Project, run_cli
from gradverify.recording.capture import describe
from gradverify.recording.draft import case_dict, draft
from gradverify.recording.spool import Observation
from gradverify.spec.file import load_file
from recording.bugs import BUGS

HERE = Path(__file__).parent / "recording"
FUNCTIONS = ("ScatterAdd", "SegmentSum", "MaskedScale", "SparseMM", "SortPair", "Unfold8")


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gradverify", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(autouse=True)
def _forget_recording_ops():
    """Tests here import tests/recording/ops.py as ``ops``: later tests in this process write
    an ``ops.py`` of their own, which must not find this one cached."""
    yield
    module = sys.modules.get("ops")
    if module is not None and str(HERE) in str(getattr(module, "__file__", "")):
        del sys.modules["ops"]


@pytest.fixture
def training(project: Project) -> Path:
    """A copy of tests/recording: the current directory, whose modules a check in this process
    imports (and the ``project`` fixture forgets again)."""
    for name in ("ops.py", "train.py"):
        shutil.copy(HERE / name, project.root / name)
    sys.modules.pop("ops", None)  # never another test's
    return project.root


@pytest.mark.slow
def test_record_writes_specs_that_run_and_catch_a_planted_bug_in_each(training):
    done = _cli("record", "-o", "specs/rec", "--", "python", "train.py", "1", cwd=training)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("loss ")  # the script's output passes through, untouched
    written = sorted(p.stem for p in (training / "specs/rec").glob("*.yaml"))
    assert written == sorted(FUNCTIONS)
    assert "next: gradverify check specs/rec" in done.stderr
    scatter = (training / "specs/rec/ScatterAdd.yaml").read_text()
    assert "high: L" in scatter and "dim_size: 2   # = L (recorded 10)" in scatter
    assert "# recorded 64" in scatter
    segment = (training / "specs/rec/SegmentSum.yaml").read_text()
    assert "sorted: true" in segment and "init: randint" in segment
    assert "init: bernoulli" in (training / "specs/rec/MaskedScale.yaml").read_text()
    assert "factory: specs/rec/SparseMM_factories.py:make_recorded" in \
        (training / "specs/rec/SparseMM.yaml").read_text()
    unfold = (training / "specs/rec/Unfold8.yaml").read_text()
    assert "C: 8      # recorded 32" in unfold  # backed off from 2: a multiple of 8
    assert "backed off to C=8" in done.stderr

    # the checks run in this process (the recording above is the command's, end to end)
    correct = run_cli("check", "specs/rec", "--format", "json")
    assert correct.code == 0, correct.stdout[-3000:] + correct.stderr

    source = (training / "ops.py").read_text()
    for name, (good, bad) in BUGS.items():
        assert source.count(good) == 1, name
        source = source.replace(good, bad)
    (training / "ops.py").write_text(source)
    del sys.modules["ops"]  # the bugged ops.py, imported afresh
    broken = run_cli("check", "specs/rec", "--format", "json")
    assert broken.code == 1
    report = json.loads(broken.stdout)
    failed = {r["target"].split(":")[1] for r in report["results"] if r["status"] == "fail"}
    assert failed == set(FUNCTIONS)


def test_record_check_runs_the_check_and_exit_codes_pass_through(training):
    (training / "fails.py").write_text("import sys\nfrom ops import SortPair\nimport torch\n"
                                       "SortPair.apply(torch.randn(3, 4))\nprint('out')\n"
                                       "sys.exit(7)\n")
    done = _cli("record", "--check", "--", "python", "fails.py", cwd=training)
    assert done.returncode == 7
    # the script's output, then the check's report: its case passes (old-style: GV363 warns)
    assert done.stdout.startswith("out\n")
    assert re.search(r"^specs/recorded/SortPair.yaml  ops:SortPair  [.W]$", done.stdout, re.M)
    closing = done.stdout.rstrip().splitlines()[-1]
    assert " passed" in closing and "failed" not in closing and "error" not in closing
    assert "the command exited with 7" in done.stderr
    assert (training / "specs/recorded/SortPair.yaml").is_file()


def test_existing_specs_are_never_overwritten(training):
    """Without shrinking (no probe process per run): which cases are new is decided on the
    recorded calls; package_project_test.py appends with shrinking."""
    (training / "a.py").write_text("import torch\nfrom ops import SortPair\n"
                                   "SortPair.apply(torch.randn(6, 4))\n")
    (training / "b.py").write_text("import torch\nfrom ops import SortPair\n"
                                   "SortPair.apply(torch.randn(6, 7, 5))\n")
    assert _cli("record", "--no-shrink", "--", "python", "a.py", cwd=training).returncode == 0
    spec = training / "specs/recorded/SortPair.yaml"
    spec.write_text(spec.read_text() + "# my note\n")
    again = _cli("record", "--no-shrink", "--", "python", "a.py", cwd=training)
    assert "nothing new" in again.stderr and "# my note" in spec.read_text()
    assert _cli("record", "--no-shrink", "--", "python", "b.py", cwd=training).returncode == 0
    (first, second) = [c.name for c in load_file(spec)[0].cases]
    assert (first, second) == ("recorded", "recorded-2") and "# my note" in spec.read_text()
    assert _cli("record", "--no-shrink", "--force", "--", "python", "b.py",
                cwd=training).returncode == 0
    assert [c.name for c in load_file(spec)[0].cases] == ["recorded"]
    assert "# my note" not in spec.read_text()


def test_a_callable_argument_gets_a_factory_stub_the_validator_names(training):
    (training / "cb.py").write_text('''
import torch
from torch.autograd import Function

class Apply(Function):
    @staticmethod
    def forward(ctx, x, fn):
        return fn(x)

    @staticmethod
    def backward(ctx, grad):
        return grad, None

Apply.apply(torch.randn(5, requires_grad=True), lambda t: t * 1)
''')
    assert _cli("record", "--", "python", "cb.py", cwd=training).returncode == 0
    text = (training / "specs/recorded/Apply.yaml").read_text()
    assert 'factory: "TODO: fn is a callable"' in text
    done = run_cli("check", "specs/recorded/Apply.yaml")  # in this process: cb.py runs at import
    assert done.code == 3
    assert "needs a factory that gradverify could not write (TODO: fn is a callable)" in \
        " ".join(done.output.split())


@pytest.mark.parametrize("command", [["torchrun", "train.py"], ["python"], ["python", "nope.py"]])
def test_a_command_it_cannot_record_is_a_usage_error(training, command):
    done = _cli("record", "--", *command, cwd=training)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "error:" in done.stderr


def _train_step(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    sys.path.insert(0, str(HERE))
    try:
        import ops
    finally:
        sys.path.remove(str(HERE))
    torch.manual_seed(seed)
    w = torch.randn(8, 8, requires_grad=True)
    x = torch.randn(16, 8) @ w
    index = torch.randint(0, 5, (16,))
    y = ops.ScatterAdd.apply(x, index, 5)
    v, _ = ops.SortPair.apply(x)
    with torch.no_grad():
        ops.MaskedScale.apply(x, x > 0, 2.0)
    loss = y.pow(2).sum() + v[:, -1].sum()
    loss.backward()
    return loss.detach(), w.grad, torch.rand(3)  # the last: the RNG state afterwards


def test_recording_does_not_change_the_run(tmp_path):
    plain = _train_step(0)
    with gradverify.record(tmp_path / "specs") as rec:
        recorded = _train_step(0)
    for a, b in zip(plain, recorded):
        assert torch.equal(a, b)
    names = sorted(p.stem for p in rec.written)
    assert names == ["MaskedScale", "ScatterAdd", "SortPair"]  # no_grad calls are recorded too


def test_forked_dataloader_workers_are_recorded(tmp_path):
    sys.path.insert(0, str(HERE))
    try:
        import ops
    finally:
        sys.path.remove(str(HERE))

    class Data(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 4

        def __getitem__(self, i: int) -> torch.Tensor:
            return ops.SortPair.apply(torch.randn(3, 5 + i))[0]

    loader = torch.utils.data.DataLoader(Data(), batch_size=None, num_workers=2,
                                         multiprocessing_context="fork")
    with gradverify.record(tmp_path, limit=2) as rec:
        assert len(list(loader)) == 4
    (spec,) = load_file(tmp_path / "SortPair.yaml")
    assert len(spec.cases) == 2  # the limit holds across the worker processes
    assert rec.calls >= 2


def test_recording_is_thread_safe_and_keeps_the_limit(tmp_path):
    sys.path.insert(0, str(HERE))
    try:
        import ops
    finally:
        sys.path.remove(str(HERE))
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(50):
                ops.SortPair.apply(torch.randn(2, 3 + (n + i) % 6))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    with gradverify.record(tmp_path, limit=3, shrink=False):
        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
    (spec,) = load_file(tmp_path / "SortPair.yaml")
    assert len(spec.cases) == 3


def test_compiled_regions_are_named_in_a_note(tmp_path):
    sys.path.insert(0, str(HERE))
    try:
        import ops
    finally:
        sys.path.remove(str(HERE))
    step = torch.compile(lambda x: ops.SortPair.apply(x)[0].sum(), backend="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with gradverify.record(tmp_path) as rec:
            step(torch.randn(3, 4, requires_grad=True)).backward()
    assert any("torch.compile" in n and "TORCHDYNAMO_DISABLE=1" in n for n in rec.notes)


def test_value_facts():
    assert describe(torch.tensor([0, 2, 2, 5]))["sorted"] is True
    assert describe(torch.tensor([[2.0, 1.0], [1.0, 2.0]]))["spd"] is True
    assert describe(torch.eye(3))["onehot"] is True
    assert describe(torch.rand(4) + 1)["positive"] is True
    assert describe(torch.full((3,), 7.0))["constant"] == 7.0
    assert describe(torch.tensor([True, False, False, False]))["density"] == 0.25
    assert describe(print) == {"kind": "object", "type": "builtins.builtin_function_or_method",
                               "callable": True}
    assert describe((1, None, "x"))["items"][2] == {"kind": "value", "value": "x"}


def test_dims_are_named_shrunk_distinct_and_ordered():
    obs = Observation("m:F", (
        {"name": "x", **describe(torch.randn(64, 512, 768))},
        {"name": "w", **describe(torch.randn(768, 512))},
        {"name": "labels", **describe(torch.arange(512).remainder(100))},
        {"name": "classes", "kind": "value", "value": 100},
        {"name": "axis", "kind": "value", "value": 2},
    ))
    joined = frozenset({"size:512", "size:768"})
    d = draft(obs, joined)
    assert d.recorded == {"N": 64, "C": 512, "L": 768, "D": 100}
    assert d.sizes == {"N": 3, "C": 5, "L": 6, "D": 4}  # distinct, in the recorded order, and
    # above the axis number 2 that stays as recorded
    case = case_dict(d.args, d.dtype, d.sizes, "c")
    assert case["args"]["x"]["shape"] == ["N", "C", "L"]
    assert case["args"]["w"]["shape"] == ["L", "C"]
    assert case["args"]["labels"]["high"] == "D"  # values 0..99 index the dim of size 100
    assert case["args"]["classes"] == 4 and case["args"]["axis"] == 2


KERNELS = '''
import torch


class ScatterSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, src, index, num_classes):
        out = src.new_zeros((num_classes, src.shape[1]))
        out.index_add_(0, index, src)
        ctx.save_for_backward(index)
        return out

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        return grad.index_select(0, index), None, None


class ChunkedScale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, chunk_size=3):
        out = torch.empty_like(x)
        for start in range(0, x.shape[0], chunk_size):
            out[start:start + chunk_size] = x[start:start + chunk_size] * w
        ctx.save_for_backward(x, w)
        return out

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        return grad * w, (grad * x).sum(0)
'''

TRAIN = '''
import torch
from kern import ScatterSum, ChunkedScale
src = torch.randn(4, 4, requires_grad=True)
ScatterSum.apply(src, torch.tensor([0, 1, 2, 3]), 4).sum().backward()
x = torch.randn(8, 3, requires_grad=True)
ChunkedScale.apply(x, torch.randn(3, requires_grad=True)).sum().backward()
'''


def test_recorded_values_keep_their_relations(project):
    """An index with one entry per row of a square tensor, whose values a count bounds that
    equals the tensor's sizes; a loop whose step is forward's default (never passed)."""
    tmp_path = project.root
    (tmp_path / "kern.py").write_text(KERNELS)
    (tmp_path / "train.py").write_text(TRAIN)
    done = _cli("record", "-o", "rec", "--", "python", "train.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    scatter = (tmp_path / "rec" / "ScatterSum.yaml").read_text()
    assert "src: {shape: [N, C]}" in scatter  # the rows and columns of [4, 4]: two dims
    assert "index: {shape: [N], dtype: int64, init: randint, high: 4" in scatter
    assert "values index num_classes = 4" in scatter and "num_classes: 4" in scatter
    chunked = (tmp_path / "rec" / "ChunkedScale.yaml").read_text()
    assert re.search(r"N: 4 +# recorded 8", chunked), chunked  # longer than the default step 3
    assert run_cli("check", "rec").code == 0  # in this process


def test_a_call_under_no_grad_is_no_second_case_of_the_same_call(project):
    """An evaluation step under ``torch.no_grad()`` checks every floating input as
    differentiable: the case of the training step's call, not a duplicate of it."""
    project.write("twice.py", functions.module(functions.square("Cube")) + (
        "\n\nx = torch.randn(4, 3, requires_grad=True)\n"
        "Cube.apply(x).sum().backward()\n"
        "with torch.no_grad():\n"
        "    Cube.apply(torch.randn(4, 3))\n"))
    result = _cli("record", "-o", "specs", "--", sys.executable, "twice.py", cwd=project.root)
    assert result.returncode == 0, result.stdout + result.stderr
    (spec,) = load_file(project.root / "specs" / "Cube.yaml")
    assert len(spec.cases) == 1


def test_calls_whose_cases_come_out_the_same_are_one_case_that_names_both(project):
    """A training step with data ``x`` not requiring grad (whose gradient backward computes,
    so it is checked anyway) and an evaluation step under ``torch.no_grad()`` record two
    signatures but one case: written once, naming the other, and not added again."""
    project.write("evals.py", (
        "import torch\n\n\n"
        "class Weigh(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x, w):\n"
        "        ctx.save_for_backward(x, w)\n"
        "        return x * w\n\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        x, w = ctx.saved_tensors\n"
        "        return g * w, (g * x).sum(0)\n\n\n"
        "torch.manual_seed(0)\n"
        "w = torch.randn(3, requires_grad=True)\n"
        "Weigh.apply(torch.randn(4, 3), w).sum().backward()\n"
        "with torch.no_grad():\n"
        "    Weigh.apply(torch.randn(4, 3), w.detach())\n"))
    for _ in range(2):
        result = _cli("record", "-o", "specs", "--", sys.executable, "evals.py",
                      cwd=project.root)
        assert result.returncode == 0, result.stdout + result.stderr
    text = (project.root / "specs" / "Weigh.yaml").read_text()
    (spec,) = load_file(project.root / "specs" / "Weigh.yaml")
    assert len(spec.cases) == 1, text
    assert re.search(r"# also signature [0-9a-f]{12}: recorded otherwise", text), text
    assert "nothing new" in result.stdout + result.stderr
