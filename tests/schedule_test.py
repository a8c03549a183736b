"""The schedule (``gradverify.run.schedule``): which checks have a row, and whether each runs
or is skipped with its reason, decided from what the checks declare. Pure: no torch, no
Function runs; the rows of earlier checks are made up here."""
from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from gradverify.checks.base import Trait
from gradverify.registry import CODES, REGISTRY
from gradverify.results import CheckResult, Finding, Severity, Status
from gradverify.run import consequences, schedule
from gradverify.targets.model import Capability

CHECKS = Path(__file__).resolve().parents[1] / "gradverify" / "checks"


class _Class:
    """What the schedule reads of an autograd.Function target."""

    kind = "autograd.Function"
    capabilities = frozenset({Capability.OWN_AUTOGRAD, Capability.OWN_BACKWARD,
                              Capability.CLASS_SOURCE, Capability.OWN_CTX,
                              Capability.FORWARD_AD})

    def has(self, capability: Capability) -> bool:
        return capability in self.capabilities


def _row(name: str, status: Status, *codes: str) -> CheckResult:
    severity = Severity.ERROR if status in (Status.FAIL, Status.XFAIL) else Severity.WARNING
    return CheckResult(name, status, 0.0, "", tuple(Finding(c, severity, c) for c in codes))


def _decide(name: str, *earlier: CheckResult, forward: schedule.Forward | None = None
            ) -> schedule.Decision:
    return schedule.decide(REGISTRY[name], _Class(), {r.name: r for r in earlier},
                           forward or schedule.Forward())


def test_a_failed_contract_skips_every_check_that_calls_backward():
    failed = _row("contract", Status.FAIL, "GV201")
    for name, check in REGISTRY.items():
        if Trait.CALLS_BACKWARD in check.traits and check.not_applicable(_Class()) is None:
            assert _decide(name, failed).skip == "skipped: contract failed", name
    assert _decide("lint", failed).run  # reads the class
    assert _decide("gradcheck", _row("contract", Status.XFAIL, "GV201")).skip  # expected, too
    assert _decide("gradcheck", _row("contract", Status.PASS)).run


def test_a_finding_skips_the_checks_whose_traits_it_invalidates():
    wrote = _row("mutation", Status.FAIL, "GV221")  # forward writes into its input
    comparing = {n for n, c in REGISTRY.items()
                 if Trait.COMPARES_RUNS in c.traits and not c.made_for}  # tiles: no row here
    assert {"determinism", "layout", "precision", "forward_ad", "vmap"} <= comparing
    for name in comparing:
        assert _decide(name, wrote).skip == "skipped: a consequence of GV221 (see mutation)"
    assert _decide("undefined_grad", wrote).run and _decide("lint", wrote).run
    kink = _row("gradcheck", Status.WARN, "GV122")  # inputs on a non-differentiable point
    assert _decide("gradgradcheck", kink).skip == "skipped: a consequence of GV122 (see gradcheck)"
    assert _decide("needs_input_grad", kink).run


def test_forward_raising_is_carried_by_one_row_and_pointed_at_by_the_others():
    error = Finding("GV008", Severity.ERROR, "forward raised")
    raised = schedule.Forward(error=error)
    assert _decide("contract", forward=raised).carry
    carried = schedule.Forward(error=error, carrier="contract")
    assert _decide("gradcheck", forward=carried).skip == "skipped: forward raised (see contract)"
    assert _decide("gradcheck", forward=carried).forward
    assert _decide("lint", forward=carried).run  # reads the class, not the case
    not_finite = schedule.Forward(error=error, not_finite=True)
    assert "not finite" in (_decide("gradcheck", forward=not_finite).skip or "")
    assert _decide("lint", forward=not_finite).run


def test_a_check_the_target_cannot_have_is_skipped_in_its_words():
    class _Function(_Class):
        kind = "function"
        capabilities = frozenset({Capability.KEYWORDS})

    decision = schedule.decide(REGISTRY["saved_tensors"], _Function(), {})
    assert decision.skip and decision.skip.startswith("not for a function:")


def test_an_earlier_finding_explains_a_later_one_on_the_same_input():
    root = Finding("GV121", Severity.ERROR, "wrong", input="x",
                   pattern="not multiplied by the incoming gradient")
    first = CheckResult("gradcheck", Status.FAIL, 0.0, "", (root,))
    later = [Finding("GV144", Severity.ERROR, "detached", input="x"),
             Finding("GV144", Severity.ERROR, "detached", input="y"),
             Finding("GV141", Severity.ERROR, "wrong", input="x")]
    marked = consequences.marked(REGISTRY["gradgradcheck"], later, {"gradcheck": first})
    assert [f.consequence_of for f in marked] == ["GV121 (gradcheck)", None, None]


@pytest.mark.parametrize("named", [("x",), (None,), ("x", "bias")],
                         ids=["one input", "none", "two of three"])
def test_a_declared_expected_failure_of_gradcheck_covers_every_input(named):
    """Declaring gradcheck's failure says backward is not the gradient, of any input: what
    assumes it is (needs_input_grad's None for a needed input) follows on every input, even
    where gradcheck's findings name one input (torch's message) or none (backward raised)."""
    found = tuple(Finding("GV121", Severity.ERROR, "wrong", input=name) for name in named)
    declared = dataclasses.replace(CheckResult("gradcheck", Status.XFAIL, 0.0, "", found),
                                   expect="a relevance rule, not a gradient")
    later = [Finding("GV202", Severity.ERROR, "None for a needed input", input=name)
             for name in ("weight", "bias")]
    marked, reason = consequences.declared(REGISTRY["needs_input_grad"], later,
                                           {"gradcheck": declared})
    cited = "GV121 (gradcheck)"
    assert [f.consequence_of for f in marked] == [cited, cited]
    assert reason is not None and "declared expected failure of gradcheck" in reason
    other = [Finding("GV201", Severity.ERROR, "raised with a partial gradient", input="weight")]
    assert consequences.declared(REGISTRY["needs_input_grad"], other,
                                 {"gradcheck": declared})[0][0].consequence_of is None


def test_a_refusal_of_float64_skips_only_the_checks_that_need_float64():
    refused = Finding("GV026", Severity.ERROR, "backward raised E on ...",
                      refuses_float64="backward raised E")
    judged = schedule.Forward(error=refused, judged_in_working_dtype=True)
    skip = schedule.Decision(skip="skipped: needs float64, where backward raised E", forward=True)
    assert _decide("gradcheck", forward=judged) == _decide("vmap", forward=judged) == skip
    assert _decide("reference", forward=judged).run and _decide("lint", forward=judged).run
    # no check judges in the working dtype: the first row carries the error
    assert _decide("contract", forward=schedule.Forward(error=refused)).carry
    carried = schedule.Forward(error=refused, carrier="contract")
    assert _decide("gradcheck", forward=carried).skip == (
        "skipped: needs float64, where backward raised E (see contract)")
    assert _decide("gradcheck", forward=schedule.Forward(
        error=Finding("GV008", Severity.ERROR, "forward raised E"), carrier="contract")
    ).skip == "skipped: forward raised (see contract)"


def test_the_schedule_imports_no_torch():
    code = ("import sys; from gradverify.run import schedule; "
            "from gradverify.registry import REGISTRY; "
            "schedule.decide(REGISTRY['gradcheck'], None, {}, "
            "schedule.Forward(not_finite=True)); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


NOT_CHECK_NAMES = {
    ("_compare.py", "reference"): "a dict key: the reference value of a comparison",
    ("_probes.py", "vmap"): "the name of a Function's vmap staticmethod",
    ("op_fake.py", "device"): "a field of opcheck's message (Devices)",
    ("_elsewhere.py", "device"): "a factory call's keyword argument (device=)",
}
"""Strings in check modules that are spelt like a check but do not name one."""


@pytest.mark.parametrize("path", sorted(CHECKS.glob("*.py")), ids=lambda p: p.name)
def test_no_check_module_names_another_check(path):
    """Checks relate through traits (``Check.traits``, reached by ``Check.consequences``) and
    symptoms (``Code.reports``), never by name or by another check's codes: a new check is its
    module, its registry line and tests."""
    tree = ast.parse(path.read_text())
    own = {n.value.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
           and any(isinstance(t, ast.Name) and t.id == "name" for t in n.targets)
           and isinstance(n.value, ast.Constant)}
    named = {(path.name, n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant)
             and n.value in REGISTRY and n.value not in own}
    assert named <= NOT_CHECK_NAMES.keys(), sorted(named - NOT_CHECK_NAMES.keys())
    owner = {code: c.check for code, c in CODES.items()}
    others = sorted(n.value for n in ast.walk(tree) if own and isinstance(n, ast.Constant)
                    and isinstance(n.value, str) and owner.get(n.value) not in (None, *own))
    assert others == [], f"{path.name} names other checks' codes"  # (helpers make any check's)
    for node in ast.walk(tree):  # and no reading of another check's row by name
        if isinstance(node, ast.Attribute) and node.attr == "results":
            pytest.fail(f"{path.name}:{node.lineno} reads ctx.results; ask ctx.verdict(trait)")
