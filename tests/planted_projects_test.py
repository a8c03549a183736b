"""``init`` and ``record`` on two real-shaped projects with planted bugs: an audio
package (``tests/audio``: ``sigkit``, ``SIGKIT_BUGS=1``) and a physics one (``tests/physics``:
``simkit``, ``SIMKIT_BUGS=1``), whose bugs need structure a vector draft lacks: a batch of
matrices, overlapping frames, a gradient that arrives permuted over merged dims, a module's
parameter shape, a feedback path longer than the recording's kept relations, a branch on a
tensor's rank, two spacings that differ. ``confirm.py`` in
each folder shows with bare gradcheck that every planted bug is real. The specs each command
writes pass on the correct code (no error anywhere) and catch the bugs listed; the ones left
are listed with why, so that a regression and a gain both show."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

import torchversions
from planted import caught, errors_by_target, gv

torchversions.require_custom_ops(module=True)  # each project defines a custom op

HERE = Path(__file__).parent

AUDIO = {
    "sigkit.spectral:StftMag",  # .view on the incoming gradient: leading dims merged
    "sigkit.spectral:Frame",  # overlap-add with = instead of +=: windows that overlap
    "sigkit.filters:CombReverb",  # the feedback dropped: a delay shorter than the signal
    "sigkit.spectral:FilterbankMatmul",  # the batch summed before the product: a batch
    "sigkit.dynamics:SoftClip",  # the drive forgotten: a drive other than 1
    # the channel mean forgotten in the 3-D branch (``x.dim() == 3``), which train.py never
    # calls: a case of its own, x [B, N, D] (init) or the recorded x made 3-D (record)
    "sigkit.dynamics:RmsEnvelope",
}
"""Caught by both commands."""

AUDIO_INIT = AUDIO | {"sigkit.spectral:Filterbank"}  # the module: spec [B, C, 4], its weight's

PHYSICS = {
    "simkit.dynamics:AdjointEuler",  # steps before the last: more than one step
    "simkit.dynamics:TanhField",  # W.T for W: a square weight that is not symmetric
    "simkit.mechanics:SpringEnergy",  # index_add on one end only: shared endpoints
    "simkit.mechanics:SphereContact",  # the normal unnormalised: points inside the sphere
    "simkit.linalg:CholeskyQuadForm",  # the batch summed: a batch of SPD matrices
    "simkit.fields:GridLaplacian",  # dy = dx: two spacings that differ
}
"""Caught by both commands."""


def project(tmp_path: Path, folder: str) -> Path:
    shutil.copytree(HERE / folder, tmp_path / folder,
                    ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / folder


def verified(where: Path, folder: str, flag: str) -> set[str]:
    """The correct code passes every spec (no error finding, no TODO left); the targets whose
    planted bug the specs catch."""
    done = gv(where, "check", folder, "--json", "clean.json", "-q", flag=flag)
    assert done.returncode == 0, done.stdout[-3000:]
    assert not any(errors_by_target(where / "clean.json", folder).values())
    assert not any("TODO" in p.read_text() for p in (where / folder).glob("*.yaml"))
    return caught(where, folder, flag=flag, good_report="clean.json")[0]


DRAFTED = {  # the spec init writes: what it must hold
    "audio": {
        "StftMag.yaml": "frames: {shape: [B, C, L]}",  # two leading dims to merge
        "Filterbank.yaml": "spec: {shape: [B, C, 4]}",  # meets the module's weight [8, 4]
        "sigkit.fractional_delay.yaml": "delay: {shape: [N]",  # a delay per row
        "RmsEnvelope.yaml": "name: x_3d   # forward branches on x's rank 3",
        "FilterbankMatmul.yaml": "spec: {shape: [B, C, L]}",  # backward's einsum
    },
    "physics": {
        "CholeskyQuadForm.yaml": "init: spd",
        "simkit.coulomb_friction.yaml": "normal_force: {shape: [N]}",  # normal_force[:, None]
        "LennardJones.yaml": "sigma: {shape: [], init: positive}",  # saved for backward
        "RigidRotate.yaml": "points: {shape: [N, 3]}",  # the 3 forward's error named
        "GridLaplacian.yaml": "dy: -0.7",  # not dx's 1.3
    },
}


@pytest.mark.slow
@pytest.mark.parametrize(("folder", "package", "flag", "planted"), [
    ("audio", "sigkit", "SIGKIT_BUGS", AUDIO_INIT), ("physics", "simkit", "SIMKIT_BUGS", PHYSICS)])
def test_init_drafts_the_structure_the_bugs_need(tmp_path, folder, package, flag, planted):
    where = project(tmp_path, folder)
    done = gv(where, "init", package, "-o", "guessed/", flag=flag)
    assert done.returncode == 0, done.stderr
    for name, text in DRAFTED[folder].items():
        assert text in (where / "guessed" / name).read_text(), name
    assert verified(where, "guessed", flag) == planted


@pytest.mark.slow
@pytest.mark.parametrize(("folder", "flag", "planted"), [
    ("audio", "SIGKIT_BUGS", AUDIO), ("physics", "SIMKIT_BUGS", PHYSICS)])
def test_recorded_specs_catch_what_the_training_run_exercised(tmp_path, folder, flag, planted):
    where = project(tmp_path, folder)
    done = gv(where, "record", "-o", "recorded", "--", "python", "train.py", flag=flag)
    assert done.returncode == 0, done.stderr
    assert verified(where, "recorded", flag) == planted
    if folder == "audio":  # the case for the branch says it was made, not recorded
        rms = (where / "recorded" / "RmsEnvelope.yaml").read_text()
        assert "# not recorded: forward branches on x's rank 3" in rms
        assert "# made (not recorded): [2, 8, 256] float32" in rms
        assert re.search(r"L: 33 +# made 256", rms), rms  # the made call's size, two blocks
