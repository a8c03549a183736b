"""A newcomer's first run, on ``tests/newcomer``: a package of 13 targets (Functions,
custom ops, a function, a module) re-exported from its submodules, a training script that calls
the Functions, and five planted bugs (``FASTOPS_BUGS=1``) that show only where a spec keeps the
meaning of its values. Every test runs the installed command as a user does, in a copy."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from planted import caught, gv
from torchversions import require_custom_ops

HERE = Path(__file__).parent / "newcomer"
PLANTED = {  # the target of each planted bug
    "fastops.norms:FusedLayerNorm",  # the weight factor forgotten: hidden by a weight of ones
    "fastops.attention:OnlineSoftmaxAttention",  # blocks after the first: hidden by L <= block
    "fastops.quant:StraightThroughQuantize",  # the 8-bit path: hidden by checking 3 bits
    "fastops.router:TopKRouter",  # exact when k = E: hidden by shrinking E to k
    "fastops.losses:ChunkedCrossEntropy",  # a partial last chunk: hidden by N <= chunk
}


@pytest.fixture(autouse=True)
def _custom_ops():
    require_custom_ops()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    shutil.copytree(HERE, tmp_path / "project", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / "project"


def case_of(spec: Path) -> str:
    return spec.read_text().split("cases:", 1)[1]


@pytest.mark.slow
def test_recorded_specs_keep_values_meaning_catch_every_planted_bug_and_are_appended_to(project):
    done = gv(project, "record", "-o", "recorded", "--", "python", "train.py")
    assert done.returncode == 0, done.stderr
    # progress: a line per Function as its spec is written, after the script's own output
    lines = done.stderr.splitlines()
    start = lines.index("gradverify record: 8 Function(s) recorded; writing their specs (each "
                        "case shrunk and tried in a separate process)")
    assert [line.split(": ")[0] for line in lines[start + 1:start + 9]] == [
        f"  recorded/{name}.yaml" for name in (
            "FusedLayerNorm", "RotaryInplace", "StraightThroughQuantize",
            "OnlineSoftmaxAttention", "RecomputeMLP", "TopKRouter", "SegmentSum",
            "ChunkedCrossEntropy")]
    out = project / "recorded"
    norm = case_of(out / "FusedLayerNorm.yaml")
    assert "eps: 1.0e-05" in norm  # a float that reads back as one
    assert "weight: {shape: [L], init: positive}" in norm  # not the recorded ones
    assert "x: {shape: [N, C, L]}" in norm and "backward computes its gradient" in norm
    quant = case_of(out / "StraightThroughQuantize.yaml")
    assert "bits: 8   # recorded value (not tied to D)" in quant  # D was 8 too
    attention = case_of(out / "OnlineSoftmaxAttention.yaml")
    assert "q: {shape: [N, C, L, D]}" in attention  # batch 4 and 4 heads: two dims
    # recorded 24 > 2 * block_size 8: L keeps two blocks (a backward that keeps only the
    # last block fails there)
    assert re.search(r"N: 2 .*\n +C: 3 .*\n +L: 17 ", attention)
    assert "block_size: 8" in attention
    router = case_of(out / "TopKRouter.yaml")
    assert "k: 2" in router and re.search(r"C: 3 +# recorded 8", router)  # k < experts
    loss = case_of(out / "ChunkedCrossEntropy.yaml")
    assert "chunk_size: 5" in loss and re.search(r"N: 11 +# recorded 16", loss)  # 2 chunks
    rotary = case_of(out / "RotaryInplace.yaml")
    assert "cos: {shape: [L, D], requires_grad: false}" in rotary  # backward returns None

    assert caught(project, "recorded") == [PLANTED]

    # recording again, with other sizes: new cases appended, the header recounted (of one
    # Function: each recorded Function costs a probe process)
    script = (project / "train.py").read_text().replace("B, H, L, D, E, V = 4, 4, 24, 8, 8, 40",
                                                        "B, H, L, D, E, V = 2, 4, 24, 8, 8, 40")
    (project / "train.py").write_text(script)
    again = gv(project, "record", "-o", "recorded", "--include", "*:FusedLayerNorm", "--",
               "python", "train.py")
    assert again.returncode == 0, again.stderr
    assert "gradverify record: 1 Function(s) recorded" in again.stderr
    spec = (out / "FusedLayerNorm.yaml").read_text()
    assert "(2 distinct call signatures)." in spec and "(1 distinct" not in spec
    assert spec.count("# signature ") == 2
    assert "recorded/FusedLayerNorm.yaml: 1 new case (2 in all) for" in again.stderr


@pytest.mark.slow
def test_init_follows_a_package_and_its_specs_run_unedited_and_catch_every_planted_bug(project):
    listed = gv(project, "list", "fastops")
    assert listed.returncode == 0, listed.stderr
    targets = [line.split()[0] for line in listed.stdout.splitlines()]
    assert len(targets) == 12 and "fastops.norms:FusedLayerNorm" in targets  # by its module
    assert "fastops.ops:swiglu" in targets and "fastops.modules:ScaledResidual" in targets

    done = gv(project, "init", "fastops", "-o", "guessed/")
    assert done.returncode == 0, done.stderr
    wrote = [line for line in done.stdout.splitlines() if line.startswith("wrote ")]
    assert len(wrote) == 12 and all(line.endswith("(inputs run)") for line in wrote), wrote
    one = gv(project, "init", "fastops.modules:softclip", "-o", "guessed/softclip.yaml")
    assert one.stdout.startswith("wrote guessed/softclip.yaml") and "(inputs run)" in one.stdout
    attention = (project / "guessed" / "OnlineSoftmaxAttention.yaml").read_text()
    assert "q: {shape: [B, H, L, D]}" in attention and "k: {shape: [B, H, L, D]}" in attention
    assert "L: 17" in attention  # longer than block_size 16: the loop runs twice
    norm = (project / "guessed" / "FusedLayerNorm.yaml").read_text()
    assert "weight: {shape: [D]}" in norm and "bias: {shape: [D]}" in norm
    assert "chunk_size: 2 " in (project / "guessed" / "ChunkedCrossEntropy.yaml").read_text()

    # the hand-finished specs catch the same bugs
    assert caught(project, "guessed", "specs") == [PLANTED, PLANTED]

    # a package named on the command line finds the specs of its 12 targets (the run above
    # checked them in full; one check is enough to show each is found)
    checked = gv(project, "check", "fastops", "--json", "package.json", "--only", "contract")
    assert checked.returncode == 0, checked.stdout[-2000:]
    report = json.loads((project / "package.json").read_text())
    assert len({r["target"] for r in report["results"]}) == 12


def test_an_unfinished_spec_says_so_and_a_guessed_value_is_named_as_a_possible_cause(project):
    assert gv(project, "init", "fastops.norms:FusedLayerNorm", "-o", "norm.yaml").returncode == 0
    text = (project / "norm.yaml").read_text()
    assert "weight: {shape: [D]}" in text
    # as init writes it when no guess ran: a TODO, and a weight of the input's shape
    text = text.replace("weight: {shape: [D]}", "weight: {shape: [N, D]}").replace(
        "# Written by `gradverify init`", "# TODO: no inputs tried made forward and backward "
        "run\n# Written by `gradverify init`")
    (project / "norm.yaml").write_text(text)
    line = next(n for n, t in enumerate(text.splitlines(), 1) if t.strip().startswith("weight:"))
    done = gv(project, "check", "norm.yaml", "--json", "r.json")
    assert done.returncode == 1
    out = " ".join(done.stdout.split())
    assert "the spec is unfinished" in out and "[GV019 spec]" in out
    assert f"'weight' was guessed by gradverify init (norm.yaml:{line}: per feature: [D]); a " \
           "wrong guess gives this error" in out
    findings = [f for r in json.loads((project / "r.json").read_text())["results"]
                for c in r["checks"] for f in c["findings"]]
    assert {"GV019", "GV105"} <= {f["code"] for f in findings}

    finished = text.replace("weight: {shape: [N, D]}", "weight: {shape: [D]}    ").replace(
        "# TODO: no inputs tried made forward and backward run\n", "")
    (project / "norm.yaml").write_text(finished)
    done = gv(project, "check", "norm.yaml")
    assert done.returncode == 0 and "GV019" not in done.stdout, done.stdout


@pytest.mark.slow
def test_the_report_says_each_thing_once_within_100_columns(project):
    """Issue 28's report noise: a -v pointer only where -v is not on; the @once_differentiable
    note (GV143) once per target, not per case, and the unneeded-gradient note (GV204) once per
    spec, shown with -v; -v within 100 columns; saved inputs counted as
    inputs for a Function that writes into its input (whose checks see copies)."""
    (project / "attention.yaml").write_text(  # three cases, each computing unneeded grads
        # an old-style Function (GV363) as a note, as a project may set it: a passing target
        "target: fastops.attention:OnlineSoftmaxAttention\n"
        "checks: {func: {unsupported: note}}\ncases:\n" + "".join(
            f"  - name: c{n}\n    args: {{q: {{shape: [1, 1, {n}, 2]}}, "
            f"k: {{shape: [1, 1, {n}, 2]}}, v: {{shape: [1, 1, {n}, 2]}}, block_size: 2}}\n"
            for n in (3, 4, 5)))
    for flags in ((), ("-q",)):  # a performance note (GV204) on a passing target: not shown
        quiet = gv(project, "check", "attention.yaml", *flags)
        assert quiet.returncode == 0, quiet.stdout
        assert "GV204" not in quiet.stdout and "GV143" not in quiet.stdout, quiet.stdout
    verbose = gv(project, "check", "attention.yaml", "-v")
    assert verbose.stdout.count("[GV204 needs_input_grad]") == 1, verbose.stdout  # per spec
    assert verbose.stdout.count("[GV143 gradgradcheck]") == 1, verbose.stdout  # per target

    bugged = gv(project, "check", "specs/norms.yaml", bugs=True)
    assert "(-v shows the analytical and numerical Jacobian blocks)" in bugged.stdout
    assert "run with -v" not in bugged.stdout
    verbose = gv(project, "check", "specs/norms.yaml", "specs/others.yaml", "-v", bugs=True)
    assert "-v shows" not in verbose.stdout and "analytical block (columns 0-" in verbose.stdout
    assert [line for line in verbose.stdout.splitlines() if len(line) > 100] == []
    rotary = next(line for line in verbose.stdout.split("fastops.rotary:RotaryInplace ::")[1]
                  .splitlines() if "saved_tensors" in line)
    assert "saves 2 tensors (2 inputs)" in rotary, rotary
