"""torch's own test databases as a peer's test suite: every OpInfo entry of
``torch.testing._internal.autograd_function_db``, ``custom_op_db`` and ``hop_db`` has a spec
under ``tests/torchdb/`` (its own sample inputs; ``dbtargets.py`` for the OpInfos whose op is a
lambda and the samples that need structure). Each target's expected verdict is written down
beside what bare torch says on the same sample (float64, default flags): every target bare torch
calls correct passes, every real defect is caught by its check, and nothing is refused.

The slowest specs run with GRADVERIFY_SLOW=1 (``SLOW``); their verdicts were proven once and are
kept here. CUDA-only entries cannot run on a CPU at all, in bare torch or here.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import torchversions

DB = Path(__file__).resolve().parent / "torchdb"
SLOW = {
    # torch's nested maps and flex-attention backward cost minutes on a CPU (map's own double
    # backward takes 25-65 s)
    "hop_db/map_nested.yaml", "hop_db/map_triple_nested.yaml",
    "hop_db/flex_attention_backward.yaml", "hop_db/flex_attention_backward_explicit_buffers.yaml",
    # 8-12 s each, and nothing the default run does not check: scan's verdict is while_loop's
    # (a control-flow op with no double backward that raises on strided inputs: gradgradcheck
    # and layout fail), and simple_map_flat is simple_map spread by hand (a list argument and a
    # list output spread into inputs and outputs: simple_map itself runs)
    "hop_db/scan.yaml", "hop_db/map_simple_flat.yaml",
}
AF = "torch.testing._internal.autograd_function_db:"
CO = "torch.testing._internal.custom_op_db:"
HOP = "torch.testing._internal.hop_db:"

# target -> (bare gradcheck, bare gradgradcheck, the checks gradverify fails it by)
EXPECTED: dict[str, tuple[str, str, frozenset[str]]] = {
    # autograd_function_db
    AF + "NumpyCube": ("pass", "pass", frozenset()),
    AF + "NumpyExp_": ("raises on a leaf (in-place: users call it on a copy)", "same", frozenset()),
    "dbtargets:numpy_exp_mark_dirty": ("pass", "pass", frozenset()),
    AF + "NumpyMul": ("pass", "pass", frozenset()),  # GV106: unsummed broadcast (a warning)
    AF + "NumpyCubeNotComposable": ("raises: output 1 is a numpy array", "same",
                                    frozenset({"gradcheck", "saved_tensors"})),
    # bare gradgradcheck fails on the once_differentiable backward that the function calls:
    # double backward declared unsupported, a skip (GV143; docs/checks.md)
    "dbtargets:numpy_cube_not_composable": ("fail: backward ignores grad_output", "fail",
                                            frozenset({"gradcheck"})),
    AF + "NumpySort": ("fail: forward returns its input unsorted", "pass",
                       frozenset({"gradcheck", "forward_ad"})),
    AF + "NumpyTake": ("pass", "pass", frozenset()),
    AF + "Select": ("pass", "pass", frozenset()),
    AF + "CubeGenVmap": ("fail: backward's 6 * dinput ignores grad_saved", "fail",
                         frozenset({"gradcheck", "gradgradcheck"})),
    AF + "MulGenVmap": ("pass", "pass", frozenset()),
    AF + "SortGenVmap": ("pass", "pass", frozenset()),
    AF + "SelectGenVmap": ("pass", "pass", frozenset()),
    AF + "ScaleGradGenVmap": ("fail: scales the gradient by 3.14 on purpose", "pass",
                              frozenset({"gradcheck", "forward_ad"})),
    AF + "ZeroGradientsGenVmap": ("fail: zero gradients on purpose", "pass",
                                  frozenset({"gradcheck", "forward_ad"})),
    AF + "ForwardHasDefaultArgs": ("pass", "pass", frozenset()),
    AF + "TakeGenVmap": ("pass", "pass", frozenset()),
    # custom_op_db
    CO + "numpy_cube": ("pass", "pass", frozenset()),
    CO + "numpy_mul": ("pass", "pass", frozenset()),
    CO + "numpy_mul_scalar": ("pass", "pass", frozenset()),
    CO + "numpy_sort": ("pass", "pass", frozenset()),
    CO + "numpy_take": ("pass", "pass", frozenset()),
    CO + "numpy_nonzero": ("pass (integer output)", "raises in torch's own code", frozenset()),
    "_torch_testing::numpy_nms": ("pass (integer output)", "raises in torch's own code",
                                  frozenset()),
    "_torch_testing::numpy_view_copy": ("pass", "pass", frozenset()),
    "_torch_testing::numpy_cat": ("pass (its vmap rule unpacks in_dims wrongly: raises)", "pass",
                                  frozenset({"vmap"})),
    "_torch_testing::numpy_split_copy": ("pass", "pass", frozenset()),
    "dbtargets:numpy_split_copy_tuple": ("pass", "pass", frozenset()),
    "_torch_testing::numpy_split_copy_with_int": ("pass (its wrapper)", "pass", frozenset()),
    "dbtargets:numpy_split_copy_with_int_first": ("pass", "pass", frozenset()),
    # hop_db
    HOP + "simple_scan": ("pass", "fail (no double backward); raises on transposed inputs",
                          frozenset({"gradgradcheck", "layout"})),
    HOP + "simple_invoke_subgraph": ("pass", "pass", frozenset()),
    HOP + "simple_map": ("pass", "pass", frozenset()),
    "dbtargets:simple_map_flat": ("pass", "pass", frozenset()),
    HOP + "nested_map": ("pass", "pass", frozenset()),
    "dbtargets:nested_map_flat": ("pass", "pass", frozenset()),
    HOP + "triple_nested_map": ("pass", "pass", frozenset()),
    "dbtargets:triple_nested_map_flat": ("pass", "pass", frozenset()),
    HOP + "simple_cond": ("pass", "fail: its backward has no graph", frozenset({"gradgradcheck"})),
    HOP + "simple_invoke_quant": ("pass", "pass", frozenset()),
    HOP + "simple_invoke_quant_packed": ("pass", "pass", frozenset()),
    HOP + "simple_while_loop": ("pass (x requiring grad)", "fail; raises on strided inputs",
                                frozenset({"gradgradcheck", "layout"})),
    HOP + "simple_while_loop_stack_output": ("x gets no gradient (torch's gradcheck crashes "
                                             "on the int output)", "pass",
                                             frozenset({"gradcheck"})),
    HOP + "simple_auto_functionalize": ("nothing requires grad (writes into its inputs)", "same",
                                        frozenset()),
    HOP + "simple_flex_attention_backward": ("fail: no gradient for query", "raises",
                                             frozenset({"gradcheck"})),
    HOP + "simple_local_map_hop": ("pass", "pass", frozenset()),
    HOP + "simple_register_hook": ("fail: the hook doubles the gradient", "fail",
                                   frozenset({"gradcheck"})),
}
CPU_IMPOSSIBLE = {"torch.nn.attention.flex_attention:flex_attention", HOP + "simple_inline_asm"}
"""CUDA-only OpInfos: forward raises on a CPU, in bare torch and here (an error, GV008)."""


def _specs(*dbs: str) -> list[str]:
    slow = os.environ.get("GRADVERIFY_SLOW")
    return sorted(str(p.relative_to(DB)) for db in dbs for p in (DB / db).glob("*.yaml")
                  if slow or str(p.relative_to(DB)) not in SLOW)


# one process for the two small databases (most of a run is importing them), one for hop_db
@pytest.mark.slow
@pytest.mark.parametrize("dbs", [("autograd_function_db", "custom_op_db"), ("hop_db",)],
                         ids="+".join)
def test_torchs_test_databases_get_the_verdicts_bare_torch_proves(dbs):
    torchversions.require_test_ops()  # the databases' own ops, written for current torch
    run = subprocess.run([sys.executable, "-m", "gradverify", "check", *_specs(*dbs), "--format",
                          "json", "--no-isolate"], cwd=DB, capture_output=True, text=True,
                         timeout=900)
    report = json.loads(run.stdout)
    errors = {e["target"]: e["message"] for e in report["errors"]}
    assert not errors, errors  # nothing refused
    failing: dict[str, set[str]] = {}
    for result in report["results"]:
        checks = {c["name"]: c for c in result["checks"]}
        failing.setdefault(result["target"], set()).update(
            name for name, c in checks.items() if c["status"] == "fail")
        if result["target"] in CPU_IMPOSSIBLE:
            assert result["status"] == "error", result
            continue
        assert result["status"] != "error", result
        assert "gradcheck" not in checks or checks["gradcheck"]["status"] != "skip" \
            or "no input requires grad" in checks["gradcheck"]["summary"] \
            or "integer" in checks["gradcheck"]["summary"], (result["target"], checks["gradcheck"])
    ran = {t: f for t, f in failing.items() if t not in CPU_IMPOSSIBLE}
    assert ran, run.stderr
    assert {t: sorted(f) for t, f in ran.items()} == \
        {t: sorted(EXPECTED[t][2]) for t in ran}


def test_every_database_entry_has_a_spec_and_an_expected_verdict():
    """Each OpInfo is named in the first comment line of its spec (``hop_db: map.simple``). The
    databases change between torch releases: complete for the pinned torch."""
    torchversions.require_test_ops()
    from torch.testing._internal.autograd_function_db import autograd_function_db
    from torch.testing._internal.custom_op_db import custom_op_db
    from torch.testing._internal.hop_db import hop_db

    from gradverify import torchcompat

    texts = [p.read_text() for p in DB.glob("*/*.yaml")]
    targets = {line.split(":", 1)[1].strip() for text in texts for line in text.splitlines()
               if line.startswith("target:")}
    assert targets == set(EXPECTED) | CPU_IMPOSSIBLE
    pinned = (Path(__file__).resolve().parent.parent / "torch.txt").read_text()
    if f"torch=={torchcompat.version()}" not in pinned:
        pytest.skip("the databases change between torch releases: complete for the pinned one")
    headers = " ".join(text.split("\n", 1)[0] for text in texts)
    labels = [f"{db}: {e.name}" + (f".{e.variant_test_name}" if e.variant_test_name else "")
              for db, entries in (("autograd_function_db", autograd_function_db),
                                  ("custom_op_db", custom_op_db), ("hop_db", hop_db))
              for e in entries]
    assert [label for label in labels if label not in headers] == []
