"""``init`` and ``record`` on ``tests/graphics``: a rendering and simulation package
whose six planted bugs (``RAYKIT_BUGS=1``) hide behind weak inputs: rays that all miss, values
that are all clamped, a recorded mask that selects nothing, a weight and a gain of one, a
recorded loop that runs once, and self-loop edges that make forward 0/0. The specs both commands
write catch every planted bug, unedited, and the correct code passes them. The installed command
runs as a user runs it, in a copy."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from planted import caught, errors_by_target, gv

HERE = Path(__file__).parent / "graphics"
FLAG = "RAYKIT_BUGS"
PLANTED = {
    "raykit.geometry:RaySphere",  # the centre's gradient sign: hidden where every ray misses
    "raykit.geometry:EdgeDirections",  # the projection forgotten: self-loops make forward NaN
    "raykit.shading:Saturate",  # half the gradient inside: hidden where all values clamp
    "raykit.shading:MaskedMean",  # the rows kept swapped: hidden by a mask that keeps none
    "raykit.shading:WeightedBlend",  # the gain forgotten: hidden by a gain of 1
    "raykit.simulate:Integrate",  # steps before the last: hidden by one step
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    shutil.copytree(HERE, tmp_path / "project", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / "project"


def clean(project: Path, folder: str) -> None:
    """The correct code passes every spec of ``folder``: no error, no spec left a TODO (its
    report, clean.json, is the correct code's run for ``caught``)."""
    done = gv(project, "check", folder, "--json", "clean.json", "-q", flag=FLAG)
    assert done.returncode == 0, done.stdout[-3000:]
    assert set(errors_by_target(project / "clean.json", folder)) == PLANTED
    assert not any("TODO" in p.read_text() for p in (project / folder).glob("*.yaml"))


@pytest.mark.slow
def test_init_writes_specs_that_catch_every_bug_hidden_by_misses_clamps_and_ones(project):
    done = gv(project, "init", "raykit", "-o", "guessed/", flag=FLAG)
    assert done.returncode == 0, done.stderr
    wrote = [line for line in done.stdout.splitlines() if line.startswith("wrote ")]
    assert len(wrote) == 6 and all(line.endswith("(inputs run)") for line in wrote), wrote
    saturate = (project / "guessed" / "Saturate.yaml").read_text()
    assert "low: 0.5" not in saturate or "high: 0.5" not in saturate  # not all clamped
    blend = (project / "guessed" / "WeightedBlend.yaml").read_text()
    assert "gain: 1.3" in blend and "forward's default is 1.0" in blend
    edges = (project / "guessed" / "EdgeDirections.yaml").read_text()
    assert "values: [[0, 1, 2, 3, 4, 0], [1, 2, 3, 4, 0, 1]]" in edges
    assert all("# strength: every input's gradient nonzero in every draw" in p.read_text()
               for p in (project / "guessed").glob("*.yaml"))
    clean(project, "guessed")
    assert caught(project, "guessed", flag=FLAG, good_report="clean.json") == [PLANTED]


@pytest.mark.slow
def test_recorded_specs_keep_the_chain_and_catch_every_bug_the_recording_hid(project):
    done = gv(project, "record", "-o", "recorded", "--", "python", "train.py", flag=FLAG)
    assert done.returncode == 0, done.stderr
    out = project / "recorded"
    edges = (out / "EdgeDirections.yaml").read_text()
    assert "values: [[0, 1, 2, 3], [1, 2, 3, 4]]" in edges  # recorded without self-loops
    assert "recorded without self-loops" in edges
    mask = (out / "MaskedMean.yaml").read_text()
    assert "p: 0.5" in mask and "0.0 True" in mask  # recorded selecting nothing
    assert "n_steps: 3" in (out / "Integrate.yaml").read_text()  # recorded 1
    assert "gain: 1.3" in (out / "WeightedBlend.yaml").read_text()  # recorded 1.0
    clean(project, "recorded")
    assert caught(project, "recorded", flag=FLAG, good_report="clean.json") == [PLANTED]
