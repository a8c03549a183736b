"""Triton kernels under Triton's interpreter: the suite's own kernels
(``tests/triton_zoo``), float32 inside whatever they are handed, get the right verdicts. Every
correct one passes (no float64-only failure), every planted bug is caught by the error-baseline
rule, the tile boundaries or the layout check, and what the interpreter cannot run is a note.

``TRITON_INTERPRET=1`` must be set before triton is imported (triton decorates its own
library's functions at import), so the zoo runs as a user runs it on a machine without CUDA:
one ``gradverify check`` command, in a process of its own, with the variable set. A triton or
torch that cannot run the zoo on CPU tensors (older than ``torch.library.triton_op``) skips the
module, saying why."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("triton", reason="triton is in the test extras")

TESTS = Path(__file__).resolve().parent
PROBE = ("import torch\nfrom triton_zoo import kernels\n"
         "kernels.ScaledSiLU.apply(torch.ones(3), 1.0)\n")


def _environment() -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": path}


ROWS_N = {"x": {"shape": ["R", "N"]}, "weight": {"shape": ["N"]}, "eps": 1e-6}
SPECS: dict[str, dict[str, Any]] = {  # named sizes: the tiles check varies N
    "RMSNorm": {"reference": "triton_zoo.references:rmsnorm", "dims": {"R": 2, "N": 16},
                "cases": [{"args": ROWS_N}]},
    "LogSumExp": {"reference": "triton_zoo.references:logsumexp", "dims": {"R": 2, "N": 16},
                  "cases": [{"args": {"x": {"shape": ["R", "N"]}}}]},
    "Rotary": {"reference": "triton_zoo.references:rotary",  # x's 16 is twice H: no tiles
               "cases": [{"args": {"x": {"shape": [2, 16]},
                                   "cos": {"shape": [2, 8], "requires_grad": False},
                                   "sin": {"shape": [2, 8], "requires_grad": False}}}]},
    "ScaledSiLU": {"reference": "triton_zoo.references:scaled_silu", "dims": {"N": 32},
                   "cases": [{"args": {"x": {"shape": [2, "N"]}, "scale": 1.7}}]},
}
NO_REFERENCE = ("LogSumExp", "ScaledSiLU")
"""Also run without their reference: judged by gradcheck at float32 tolerances."""
BUGS = {  # planted bug: (the correct kernel's spec, the check that catches it, its code, input)
    "RMSNormLastBlockMask": ("RMSNorm", "tiles", "GV381", "x"),
    "RMSNormWeightNotReduced": ("RMSNorm", "reference", "GV332", "weight"),
    "LogSumExpLoopShort": ("LogSumExp", "tiles", "GV381", None),
    "ScaledSiLUMissingFactor": ("ScaledSiLU", "reference", "GV332", "x"),
    "RotaryAssumesContiguousGrad": ("Rotary", "layout", "GV253", "x"),
}


def _documents() -> list[dict[str, Any]]:
    """Every zoo target with its spec: the correct kernels with and without their reference,
    the planted bugs with their correct kernel's spec, and the triton op."""
    documents = []
    for name, spec in sorted(SPECS.items()):
        documents.append({"target": f"triton_zoo.kernels:{name}", **spec})
        if name in NO_REFERENCE:
            bare = {k: v for k, v in spec.items() if k != "reference"}
            documents.append({"target": f"triton_zoo.kernels:{name}", **bare,
                              "cases": [{"name": "no-reference", **bare["cases"][0]}]})
    for bug, (of, *_) in sorted(BUGS.items()):
        documents.append({"target": f"triton_zoo.buggy:{bug}", **SPECS[of]})
    documents.append({"target": "triton_zoo.interpreter_limits:Scale",
                      "cases": [{"args": {"x": {"shape": [5]}, "scale": 2.0}}]})
    documents.append({"target": "gvzoo::mul_add", "imports": ["triton_zoo.kernels"],
                      "reference": "triton_zoo.references:mul_add", "dims": {"N": 24},
                      "cases": [{"args": {"x": {"shape": [2, "N"]}, "y": {"shape": [2, "N"]}}}]})
    return documents


# one command of about 40 s: started first (conftest.py), on one worker (--dist loadgroup)
# that runs the module's fixture once
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("triton-zoo")]


@pytest.fixture(scope="module")
def zoo(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], dict[str, Any]]:
    """The JSON results of one ``gradverify check`` of the whole zoo, by (target, case)."""
    folder = tmp_path_factory.mktemp("triton")
    probe = subprocess.run([sys.executable, "-c", PROBE], env=_environment(), cwd=folder,
                           capture_output=True, text=True, timeout=300)
    if probe.returncode:
        pytest.skip("Triton's interpreter cannot run the zoo here: "
                    + probe.stderr.strip().splitlines()[-1][:300])
    (folder / "zoo.yaml").write_text(yaml.safe_dump_all(_documents(), sort_keys=False))
    # in workers, as by default: a planted bug that reads past a tensor under the interpreter
    # may corrupt the memory of the process running it
    run = subprocess.run([sys.executable, "-m", "gradverify", "check", "zoo.yaml", "--format",
                          "json"], env=_environment(), cwd=folder, capture_output=True,
                         text=True, timeout=900)
    report = json.loads(run.stdout)
    assert not report["errors"], report["errors"]
    assert report["triton"] == "interpreter (TRITON_INTERPRET=1)"
    return {(r["target"], r["case"]): {c["name"]: c for c in r["checks"]}
            for r in report["results"]}


def _errors(checks: dict[str, Any]) -> list[str]:
    """The errors and warnings, but func's that torch.func cannot run an old-style Function
    (GV363): the kernels are written as most Triton Functions are, forward taking ctx."""
    return [f"{c['name']}: {f['code']} {f['message']}" for c in checks.values()
            for f in c["findings"] if f["severity"] in ("error", "warning")
            and f["code"] != "GV363"]


@pytest.mark.parametrize(("name", "case"), [(n, "case0") for n in sorted(SPECS)]
                         + [(n, "no-reference") for n in NO_REFERENCE])
def test_a_correct_float32_kernel_passes(zoo, name, case):
    checks = zoo[(f"triton_zoo.kernels:{name}", case)]
    assert _errors(checks) == []
    assert "forward computes in float32 inside (detected)" in checks["gradcheck"]["summary"]
    if name == "Rotary":
        assert "the literal size 16; name it in `dims:`" in checks["tiles"]["summary"]
    else:
        assert checks["tiles"]["status"] == "pass", checks["tiles"]["summary"]
    if case == "case0":
        assert checks["reference"]["summary"].startswith("float32: every output and gradient")


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_each_planted_bug_is_caught_naming_where(zoo, bug):
    _, check, code, name = BUGS[bug]
    checks = next(c for (target, _), c in zoo.items() if target == f"triton_zoo.buggy:{bug}")
    found = [f for f in checks[check]["findings"] if f["code"] == code]
    assert checks[check]["status"] == "fail" and found, (checks[check]["summary"],
                                                         _errors(checks))
    assert name is None or any(f["input"] == name or f"'{name}'" in f["message"]
                               for f in found)
    if check == "tiles":
        # the spec's own sizes (multiples of the tile) hide it: only the boundaries show it
        assert checks["reference"]["status"] == "pass", checks["reference"]["summary"]
        assert "at N = " in found[0]["message"] and found[0]["data"]["size"] % 16


def test_a_triton_op_passes_and_what_the_interpreter_cannot_run_is_a_note(zoo):
    checks = zoo[("gvzoo::mul_add", "case0")]
    assert _errors(checks) == []
    for name in ("op_fake", "op_aot_dispatch"):
        assert checks[name]["status"] == "skip"
        (note,) = checks[name]["findings"]
        assert note["code"] == "GV025" and note["severity"] == "info"
        assert "triton_zoo/kernels.py:" in note["location"]  # the user's function
        assert "run this check on a machine with CUDA" in note["hint"]
    assert checks["tiles"]["data"]["tiles"] == {"mul_add_kernel": [32]}
    assert checks["tiles"]["data"]["sizes"] == [1, 31, 32, 33, 65]


def test_a_kernel_the_interpreter_cannot_run_is_a_note_not_a_failure(zoo):
    """``scale.to(tl.float32)`` on a Python float: CUDA runs it, the interpreter cannot."""
    (row,) = zoo[("triton_zoo.interpreter_limits:Scale", "case0")].values()  # no check runs
    assert row["name"] == "interpreter" and row["status"] == "skip"
    (note,) = row["findings"]
    assert note["code"] == "GV025" and note["severity"] == "info"
    assert "'float' object has no attribute 'to'" in note["message"]
    assert "run it on a machine with CUDA" in note["hint"]


def test_tile_sizes_are_read_from_launches():
    from gradverify.targets import triton_launches as _triton

    kernels = pytest.importorskip("triton_zoo.kernels")
    assert _triton.tile_sizes(kernels.RMSNorm) == {
        "rmsnorm_fwd_kernel": (16,), "rmsnorm_bwd_dx_kernel": (16,),
        "rmsnorm_bwd_dw_kernel": (16,)}
    assert _triton.tile_sizes(kernels.ScaledSiLU) == {
        "scaled_silu_fwd_kernel": (32,), "scaled_silu_bwd_kernel": (32,)}
    assert _triton.boundary_sizes(16) == (1, 15, 16, 17, 33)
