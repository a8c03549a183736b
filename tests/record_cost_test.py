"""`gradverify record` keeps small dims and stays within its bar (issue: record keeps meaningful
small dims; record within its bar): 3-D points stay 3-D in the written spec, which then passes
on the correct code and catches a planted bug; capture keeps a bounded number of calls per
Function; one probe process serves every Function, and a Function whose probe ends it costs
only its own; strengthening one Function is bounded in time. Speed itself is measured in
bench/record_time.py, not here."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch
from torch.autograd import Function

import gradverify
from conftest import Project, run_cli
from gradverify.recording.capture import describe
from gradverify.recording.draft import KEPT_SIZE, draft
from gradverify.recording.prober import Prober
from gradverify.recording.spool import Observation, Spool
from gradverify.recording.write import write_specs

POINTS = '''
import os

import torch

BUG = os.environ.get("POINTS_BUG") == "1"


class Distance(torch.autograd.Function):
    """|p - q| over the coordinate dim of (N, 3) points: runs on 2-D points too."""

    @staticmethod
    def forward(ctx, p, q):
        d = torch.linalg.vector_norm(p - q, dim=-1)
        ctx.save_for_backward(p, q, d)
        return d

    @staticmethod
    def backward(ctx, g):
        p, q, d = ctx.saved_tensors
        unit = (p - q) / d.unsqueeze(-1)
        if BUG:  # the third coordinate's gradient forgotten: hidden where points are 2-D
            unit = unit * torch.tensor([1.0, 1.0, 0.0], dtype=unit.dtype)[:unit.shape[-1]]
        grad = g.unsqueeze(-1) * unit
        return grad, -grad


class Torque(torch.autograd.Function):
    """r x f of (N, 3) vectors (torch.linalg.cross needs 3 coordinates)."""

    @staticmethod
    def forward(ctx, r, f):
        ctx.save_for_backward(r, f)
        return torch.linalg.cross(r, f, dim=-1)

    @staticmethod
    def backward(ctx, g):
        r, f = ctx.saved_tensors
        return torch.linalg.cross(f, g, dim=-1), torch.linalg.cross(g, r, dim=-1)
'''

TRAIN = '''
import torch
from points import Distance, Torque

torch.manual_seed(0)
p = torch.randn(64, 3, requires_grad=True)
q = torch.randn(64, 3)
for _ in range(3):
    loss = Distance.apply(p, q).sum() + Torque.apply(p, q).pow(2).sum()
    loss.backward()
print("done")
'''


def _gv(*args: str, cwd: Path, bug: bool = False) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "POINTS_BUG": "1" if bug else "0"}
    return subprocess.run([sys.executable, "-m", "gradverify", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_a_small_dim_keeps_its_recorded_size_and_larger_ones_shrink_above_it():
    points = Observation("m:F", ({"name": "p", **describe(torch.randn(256, 3))},))
    assert draft(points).sizes == {"N": 4, "C": 3}  # before: C 2 (recorded 3), N 3
    quats = Observation("m:F", ({"name": "x", **describe(torch.randn(7, 100, 4))},
                                {"name": "rgb", **describe(torch.randn(7, 100, 3))}))
    d = draft(quats)
    assert d.recorded == {"N": 7, "C": 100, "L": 4, "D": 3}
    assert d.sizes == {"N": 5, "C": 6, "L": 4, "D": 3}  # 3 and 4 kept; distinct above them
    rotated = Observation("m:F", ({"name": "r", **describe(torch.randn(3, 3))},
                                  {"name": "p", **describe(torch.randn(50, 3))}))
    # two dims recorded 3: the points' coordinates (a last axis) keep it, the rows go below
    assert draft(rotated).sizes == {"N": 2, "C": 3, "L": 4}
    heads = Observation("m:F", ({"name": "q", **describe(torch.randn(4, 4, 24, 8))},))
    assert draft(heads).sizes == {"N": 2, "C": 3, "L": 5, "D": 4}  # neither 4 is a last axis
    wide = Observation("m:F", ({"name": "x", **describe(torch.randn(6, 9))},))
    assert all(size < 6 for size in draft(wide).sizes.values())  # larger than KEPT_SIZE
    assert KEPT_SIZE == 4


def test_recorded_3d_points_stay_3d_pass_on_correct_code_and_catch_a_planted_bug(
        project: Project):
    project.write("points.py", POINTS)
    project.write("train.py", TRAIN)
    done = _gv("record", "-o", "rec", "--", "python", "train.py", cwd=project.root)
    assert done.returncode == 0, done.stderr
    for name in ("Distance", "Torque"):
        spec = (project.root / "rec" / f"{name}.yaml").read_text()
        assert re.search(r"C: 3 +# recorded 3", spec), spec  # before: "C: 2  # recorded 3"
        assert "N: 4 " in spec, spec
    assert "backed off" not in done.stderr  # cross's 3 is kept, not found by raising
    assert run_cli("check", "rec").code == 0  # the correct code passes
    bugged = _gv("check", "rec/Distance.yaml", cwd=project.root, bug=True)
    assert bugged.returncode == 1, bugged.stdout[-2000:]
    assert "Distance" in bugged.stdout


class Grows(Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


def test_capture_keeps_at_most_limit_calls_per_function(tmp_path: Path):
    """300 calls of one Function, each of a new shape, and 300 of one shape: the spool keeps
    ``limit`` calls (3), not 300; the Function is then skipped with one set lookup."""
    with gradverify.record(tmp_path / "rec", limit=3, shrink=False) as recording:
        for n in range(2, 302):
            Grows.apply(torch.randn(n, requires_grad=True)).sum().backward()
        for _ in range(300):
            Grows.apply(torch.randn(5, requires_grad=True))
    assert recording.calls == 3
    spec = (tmp_path / "rec" / "Grows.yaml").read_text()
    assert spec.count("# signature ") == 3
    assert "(3 distinct call signatures)" in spec


ADDS = '''
import os
import torch


class AddOne(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x + 1

    @staticmethod
    def backward(ctx, g):
        return g


class DiesSmall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        if x.shape[0] < 16:  # the probe's shrunk sizes end the process
            os._exit(3)
        return x * 3

    @staticmethod
    def backward(ctx, g):
        return g * 3


class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g * w, g * x


class Gain(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, gain):
        ctx.gain = gain
        return x * gain

    @staticmethod
    def backward(ctx, g):
        return g * ctx.gain, None
'''


def _call(target: str, **tensors: torch.Tensor) -> Observation:
    return Observation(target, tuple({"name": n, **describe(t)} for n, t in tensors.items()))


def test_one_probe_process_serves_every_function_and_one_that_dies_costs_only_itself(
        project: Project):
    project.write("adds.py", ADDS)
    x = torch.randn(64, 32, requires_grad=True)
    spool = Spool((_call("adds:AddOne", x=x), _call("adds:DiesSmall", x=x),
                   _call("adds:Scale", x=x, w=torch.randn(64, 32))), frozenset())
    with Prober() as prober:
        written = write_specs(spool, project.root / "rec", limit=3, force=False, shrink=True,
                              origin="a test", prober=prober)
    assert len(written.paths) == 3
    assert prober.started == 2  # one for AddOne and DiesSmall; DiesSmall ended it
    dies = (project.root / "rec" / "DiesSmall.yaml").read_text()
    assert "# strength" not in dies  # written as drafted, with why
    assert any("the probe failed (the probe process ended (exit status 3))" in n
               for n in written.notes), written.notes
    for name in ("AddOne", "Scale"):  # shrunk and strengthened in the probe processes
        spec = (project.root / "rec" / f"{name}.yaml").read_text()
        assert "# strength: every input's gradient nonzero" in spec, spec
        assert "N: 64" not in spec


def test_strengthening_one_function_is_bounded_in_time(project: Project):
    """With no time left, a case is measured but neither strengthened nor scored with mutants
    (the probe gives each Function ``FUNCTION_SECONDS`` in all)."""
    from gradverify.recording.strong import strong_case
    from gradverify.targets import resolve

    project.write("adds.py", ADDS)
    info = resolve("adds:Gain")
    x = {"name": "x", **describe(torch.randn(64, 32, requires_grad=True))}
    call = Observation("adds:Gain", (x, {"name": "gain", "kind": "value", "value": 1.0}))
    sizes = draft(call).sizes
    unbounded = strong_case(info, call, frozenset(), sizes)
    assert "mutation score" in unbounded["strength"]
    assert [e["value"] for e in unbounded["edits"]] == [1.3]  # a gain of 1 hides a factor
    bounded = strong_case(info, call, frozenset(), sizes, seconds=0.0)
    assert "mutation score" not in bounded["strength"]
    assert bounded["edits"] == []
    # a search cut short says so: the spec may be weaker than the same search finds elsewhere
    assert "the search for stronger values stopped at its 0 s limit" in bounded["strength"]


def test_strengthening_never_grows_a_dim_kept_at_its_recorded_size():
    """A dim may grow where that kills more mutants; not 3 coordinates kept as recorded."""
    from gradverify.init.measure import with_mutants
    from gradverify.init.strengthen import Strength, strengthen

    def probe(case: Any) -> Strength:
        return Strength(True, exercised=("p",), inputs=("p",), hits=3)

    def larger_kills_more(case: Any) -> tuple[int, int]:
        return min(case["dims"]["C"], 7), 7

    case = {"dims": {"C": 3}, "args": {"p": {"shape": ["C"]}}}
    scorer = with_mutants(probe, larger_kills_more)
    assert strengthen(case, scorer).case["dims"] == {"C": 7}
    assert strengthen(case, scorer, fixed_dims=frozenset({"C"})).case["dims"] == {"C": 3}


def test_a_recording_of_overlapping_frames_is_not_shrunk_to_one_frame(project: Project):
    """15 overlapping frames (x [8, 256], a window of 32 every 16) shrink to sizes where one
    frame is left; a backward that overwrites instead of adding the overlap then lives. The
    shrunk case grows back (a dim doubled, within its recorded size) until it kills it."""
    import functions
    from gradverify.recording.strong import strong_case
    from gradverify.targets import resolve

    project.write("frames.py", functions.module(functions.frames()))
    info = resolve("frames:Frames")
    x = {"name": "x", **describe(torch.randn(8, 256, requires_grad=True))}
    window = {"name": "window", **describe(torch.randn(32, requires_grad=True))}
    call = Observation("frames:Frames", (x, window, {"name": "hop", "kind": "value",
                                                     "value": 16}))
    sizes = {"N": 2, "C": 18, "L": 17}  # where record's size search ends: one frame
    assert draft(call).sizes.keys() == sizes.keys()
    strong = strong_case(info, call, frozenset(), sizes)
    grown = {e["dim"]: e["value"] for e in strong["edits"] if e.get("dim")}
    assert grown == {"C": 37}  # (37 - 17) // 16 + 1 = 2 frames, which overlap
    killed, total = re.search(r"mutation score: (\d+)/(\d+)", strong["strength"]).groups()
    assert killed == total, strong["strength"]
