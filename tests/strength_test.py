"""What a PASS proves (``checks/_strength.py`` and forward's domain, ``run/classify.py``):
inputs that never exercise a gradient (every ray misses, every value clamped, an empty mask) are
a warning (GV129), an input held at one constant value a note (GV130), and inputs on which
forward is NaN or inf are the inputs' fault, said once for the case (GV023), never a FAIL
blaming backward. Each mechanism is shown on a Function of its own: what bare torch says (the
old behaviour: a PASS with a bug in place, or a FAIL blaming backward) and what gradverify says.
Correct Functions whose Jacobian is zero in some rows only (a gather, a ReLU) get nothing new."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.autograd import Function

import zoo
from gradverify import verify
from gradverify.results import Severity, Status
from gradverify.spec.file import SpecError, from_dict


class RaySphereWrongSign(Function):
    """Distance along unit rays from ``o`` to a unit sphere at ``c``, 0 where the ray misses;
    the gradient for ``c`` has its sign flipped."""

    @staticmethod
    def forward(ctx, o, d, c):
        oc = o - c
        b = (oc * d).sum(-1)
        disc = b * b - (oc * oc).sum(-1) + 1.0
        hit = disc > 0
        s = disc.clamp_min(1e-12).sqrt()
        ctx.save_for_backward(oc, d, b, s, hit)
        return torch.where(hit, -b - s, torch.zeros_like(b))

    @staticmethod
    def backward(ctx, g):
        oc, d, b, s, hit = ctx.saved_tensors
        g = torch.where(hit, g, torch.zeros_like(g))[..., None]
        d_oc = g * (-d - (b[..., None] * d - oc) / s[..., None])
        d_d = g * (-oc - b[..., None] * oc / s[..., None])
        return d_oc, d_d, d_oc.sum(0)  # bug: d/dc = -d/d(oc)


def _rays(c: list[float], directions: list[list[float]]) -> dict:
    return {"cases": [{"name": "rays", "args": {
        "o": {"values": [[0.0, 0.0, 0.0]] * len(directions)},
        "d": {"values": directions, "requires_grad": False},
        "c": {"values": c}}}]}


AWAY = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]


class ClampWrongSign(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(-0.5, 0.5)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return -g * ((x > -0.5) & (x < 0.5))  # bug: the sign


class MaskedSumWrongFactor(Function):
    @staticmethod
    def forward(ctx, x, mask):
        ctx.save_for_backward(mask)
        return (x * mask).sum()

    @staticmethod
    def backward(ctx, g):
        (mask,) = ctx.saved_tensors
        return 2 * g * mask, None  # bug: the factor 2


class WeightForgotten(Function):
    @staticmethod
    def forward(x, w):
        return x * w

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, g):
        x, _w = ctx.saved_tensors
        return g, g * x  # bug: the gradient for x forgets w


class Normalize(Function):
    """x / |x| along the last dim: correct, undefined for a zero vector."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x / x.norm(dim=-1, keepdim=True)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        n = x.norm(dim=-1, keepdim=True)
        y = x / n
        return (g - y * (g * y).sum(-1, keepdim=True)) / n


class Sqrt(Function):
    """Correct; at 0 its finite differences need sqrt of a negative number."""

    @staticmethod
    def forward(ctx, x):
        y = x.sqrt()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g / (2 * y)


class Gather(Function):
    """Correct: entries of x no index picks have a zero column."""

    @staticmethod
    def forward(ctx, x, index):
        ctx.save_for_backward(index)
        ctx.size = x.shape[0]
        return x[index]

    @staticmethod
    def backward(ctx, g):
        (index,) = ctx.saved_tensors
        return g.new_zeros(ctx.size).index_add(0, index, g), None


class ReLU(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp_min(0)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (x > 0)


class Detach(Function):
    """Correct, with a gradient zero by design for ``x``."""

    @staticmethod
    def forward(ctx, x):
        return x.round()

    @staticmethod
    def backward(ctx, g):
        return torch.zeros_like(g)


def _passed(case) -> bool:
    """The case passed: every check, but func's warning that torch.func cannot run an
    old-style Function (GV363), which these Functions are."""
    return case.status == Status.PASS or (case.status == Status.WARN and all(
        zoo.old_style_warning(c) for c in case.checks if c.status == Status.WARN))


def _codes(report, check: str | None = None) -> list[str]:
    return [f.code for case in report.results for row in case.rows
            if check is None or row.name == check for f in row.findings]


def _bare_gradcheck(fn, *inputs) -> bool:
    return torch.autograd.gradcheck(fn, inputs, raise_exception=False)


# -- a gradient never exercised: GV129 ---------------------------------------------------


def test_rays_that_all_miss_were_a_pass_and_are_now_a_warning():
    o = torch.zeros(3, 3, dtype=torch.float64, requires_grad=True)
    c = torch.tensor([10.0, 10.0, 10.0], dtype=torch.float64, requires_grad=True)
    d = torch.tensor(AWAY, dtype=torch.float64)
    assert _bare_gradcheck(lambda o, c: RaySphereWrongSign.apply(o, d, c), o, c)  # the old PASS

    report = verify(RaySphereWrongSign, spec=_rays([10.0, 10.0, 10.0], AWAY))
    (row,) = [r for case in report.results for r in case.checks if r.name == "gradcheck"]
    assert row.status == Status.WARN and report.results[0].status == Status.WARN
    found = {f.input: f for f in row.findings if f.code == "GV129"}
    assert set(found) == {"o", "c"}
    assert found["c"].severity == Severity.WARNING and "zeros with zeros" in found["c"].message
    assert "every ray misses" in found["c"].message and "zero_grad: [c]" in found["c"].hint
    assert found["c"].location is not None and found["c"].location.line


def test_rays_that_hit_catch_the_sign_bug():
    report = verify(RaySphereWrongSign, spec=_rays([2.0, 0.0, 0.0], AWAY))
    assert "GV121" in _codes(report, "gradcheck") and "GV129" not in _codes(report)
    assert not report.ok


@pytest.mark.parametrize(("cls", "spec", "name"), [
    pytest.param(ClampWrongSign, {"x": {"shape": [6], "init": "uniform", "low": 1, "high": 2}},
                 "x", id="all-clamped"),
    pytest.param(MaskedSumWrongFactor, {"x": {"shape": [5]}, "mask": {
        "shape": [5], "init": "zeros", "requires_grad": False}}, "x", id="empty-mask"),
])
def test_a_gradient_zero_on_every_case_is_a_warning(cls, spec, name):
    report = verify(cls, spec={"cases": [{"name": "c", "args": spec}]})
    found = [f for case in report.results for r in case.checks for f in r.findings
             if f.code == "GV129"]
    assert [f.input for f in found] == [name] and report.ok  # a warning: --strict fails it
    assert "GV121" not in _codes(report)


def test_one_case_that_exercises_the_gradient_is_enough():
    spec = {"cases": [
        {"name": "clamped", "args": {"x": {"shape": [6], "init": "uniform", "low": 1, "high": 2}}},
        {"name": "inside", "args": {"x": {"shape": [6], "init": "uniform", "low": -0.4,
                                          "high": 0.4}}}]}
    report = verify(ClampWrongSign, spec=spec)
    assert "GV129" not in _codes(report) and "GV121" in _codes(report)


def test_a_gradient_zero_by_design_is_declared_in_the_spec():
    spec = {"cases": [{"name": "c", "args": {"x": {"shape": [4]}}}]}
    assert "GV129" in _codes(verify(Detach, spec=spec))
    report = verify(Detach, spec={**spec, "zero_grad": ["x"]})
    assert "GV129" not in _codes(report) and _passed(report.results[0])


def test_zero_grad_must_name_inputs():
    with pytest.raises(SpecError, match="zero_grad"):
        from_dict({"zero_grad": [3], "cases": [{"args": {"x": {"shape": [2]}}}]})


@pytest.mark.parametrize(("cls", "args"), [
    pytest.param(Gather, {"x": {"shape": [6]}, "index": {"values": [0, 2, 2], "dtype": "int64"}},
                 id="gather"),
    pytest.param(ReLU, {"x": {"values": [-1.0, 0.5, -0.25, 2.0]}}, id="relu"),
])
def test_a_jacobian_zero_in_some_rows_only_gets_nothing(cls, args):
    report = verify(cls, spec={"cases": [{"name": "c", "args": args}]})
    assert {"GV129", "GV130", "GV023"}.isdisjoint(_codes(report))
    assert _passed(report.results[0])


# -- an input held constant: GV130 ------------------------------------------------------


def test_a_weight_of_ones_hides_a_forgotten_factor_and_gets_a_note():
    ones = {"x": {"shape": [2, 3]}, "w": {"shape": [2, 3], "init": "ones"}}
    report = verify(WeightForgotten, spec={"cases": [{"name": "ones", "args": ones}]})
    assert report.ok  # the old behaviour: nothing fails with w = 1
    (note,) = [f for case in report.results for r in case.checks for f in r.findings
               if f.code == "GV130"]
    assert note.severity == Severity.INFO and note.input == "w"
    assert "forgets to multiply by it" in note.message

    varied = {"x": {"shape": [2, 3]}, "w": {"shape": [2, 3], "init": "uniform", "low": 0.5,
                                            "high": 1.5}}
    report = verify(WeightForgotten, spec={"cases": [{"name": "varied", "args": varied}]})
    assert not report.ok and "GV130" not in _codes(report)


def test_a_constant_that_differs_between_cases_gets_no_note():
    spec = {"cases": [{"name": f"w{v}", "args": {"x": {"shape": [3]}, "w": {"values": [v] * 3}}}
                      for v in (2.0, 3.0)]}
    assert "GV130" not in _codes(verify(WeightForgotten, spec=spec))


# -- forward outside its domain: GV023 -------------------------------------------------------


def test_forward_nan_on_the_inputs_was_blamed_on_backward_and_is_now_the_inputs_fault():
    x = torch.tensor([[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]], dtype=torch.float64,
                     requires_grad=True)
    assert not _bare_gradcheck(Normalize.apply, x)  # the old FAIL, blaming backward

    report = verify(Normalize, spec={"cases": [{"name": "zero", "args": {"x": {
        "values": [[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]]}}}]})
    (case,) = report.results
    (about,) = case.about_case
    (finding,) = about.findings
    assert finding.code == "GV023" and finding.severity == Severity.WARNING
    assert "nan at output 0[0, 0]" in finding.message
    assert "zero vector normalised" in finding.message
    assert case.status == Status.WARN and report.ok
    assert not [r for r in case.checks if r.status in (Status.FAIL, Status.ERROR)]
    assert all("GV023" in r.summary for r in case.checks if r.name != "lint")


def test_forward_not_finite_where_finite_differences_look_is_the_inputs_fault():
    report = verify(Sqrt, spec={"cases": [{"name": "edge", "args": {"x": {
        "values": [0.0, 1.0, 2.0]}}}]})
    (case,) = report.results
    assert [f.code for r in case.about_case for f in r.findings] == ["GV023"]
    assert "moved by -1e-06" in case.about_case[0].findings[0].message
    assert report.ok


class HalfFilled(Function):
    """Fills its float64 output on every other call only (bitsandbytes' CPU dequantize_4bit
    returns ``torch.empty`` for float64: memory it never wrote, NaN by chance of the heap, so
    one run's probe saw NaN and skipped every check, another's did not)."""

    calls = 0

    @staticmethod
    def forward(ctx, x):
        HalfFilled.calls += 1
        out = x * 2
        if x.dtype == torch.float64 and HalfFilled.calls % 2 == 1:
            out[0] = float("nan")
        return out

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


def test_a_nan_that_a_second_call_does_not_repeat_is_no_domain_edge(monkeypatch):
    """GV023 skips the value checks only where forward is NaN again on the same inputs;
    otherwise the checks judge what forward returns."""
    monkeypatch.setattr(HalfFilled, "calls", 0)
    report = verify(HalfFilled, spec={"cases": [{"name": "c", "args": {"x": {"shape": [4]}}}]})
    (case,) = report.results
    assert "GV023" not in {f.code for r in case.about_case for f in r.findings}
    gradcheck = next(r for r in case.checks if r.name == "gradcheck")
    assert gradcheck.status != Status.SKIP and gradcheck.findings, gradcheck
    assert case.status != Status.PASS


def test_a_case_inside_the_domain_is_verified_as_before():
    report = verify(Normalize, spec={"cases": [{"name": "c", "args": {"x": {"shape": [2, 3]}}}]})
    assert _passed(report.results[0]) and not report.results[0].about_case


# -- hints that quote the in-place write, and never blame saving an output -------------------


class SoftmaxInPlaceWrongSign(Function):
    """Saves its output, then normalises it in place (fine: backward reads what forward
    returns); backward has a sign bug."""

    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        y /= y.sum(-1, keepdim=True)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return -y * (g - (g * y).sum(-1, keepdim=True))


class HalvedAfterSaving(Function):
    """Saves t = 2x, then halves it in place; backward was written for the saved 2x."""

    @staticmethod
    def forward(ctx, x):
        t = 2 * x
        ctx.save_for_backward(t)
        t /= 2
        return t.sin()

    @staticmethod
    def backward(ctx, g):
        (t,) = ctx.saved_tensors
        return g * (t / 2).cos()


def test_a_hint_never_blames_saving_an_output():
    report = verify(SoftmaxInPlaceWrongSign, spec={"cases": [{"name": "c", "args": {
        "x": {"shape": [2, 3]}}}]})
    (finding,) = [f for case in report.results for r in case.checks for f in r.findings
                  if f.code == "GV121"]
    assert "save" not in (finding.hint or "") and "sign" in finding.hint
    assert "GV224" not in _codes(report)


def test_the_hint_for_a_saved_tensor_changed_in_place_quotes_the_write():
    report = verify(HalvedAfterSaving, spec={"cases": [{"name": "c", "args": {
        "x": {"shape": [4]}}}]})
    (finding,) = [f for case in report.results for r in case.checks for f in r.findings
                  if f.code == "GV224"]
    assert "`t /= 2` writes in place: write `t = t / 2`" in finding.hint
    assert finding.location is not None and finding.location.line is not None


def test_the_console_says_a_strength_note_for_a_passing_case_too():
    from conftest import run_cli

    result = run_cli("check", "strength_test:WeightForgotten", "--spec",
                     str(Path(__file__).parent / "specs_strength" / "weight_of_ones.yaml"),
                     "--format", "plain")
    assert result.code == 0, result.output
    assert "every entry of 'w' is 1 in every case" in result.output
    assert "[GV130 gradcheck]" in result.output


def test_a_modules_parameters_get_no_constant_note():
    from gradverify.examples.ops import Affine

    report = verify(Affine, spec={"init_args": {"in_features": 4, "out_features": 3},
                                  "cases": [{"name": "c", "args": {"x": {"shape": [2, 4]}}}]})
    assert report.ok and "GV130" not in _codes(report)  # its bias of zeros is its constructor's


class EdgeDirections(Function):
    """Unit vectors along a graph's edges; a self-loop is 0/0. Correct."""

    @staticmethod
    def forward(ctx, pos, edges):
        d = pos[edges[1]] - pos[edges[0]]
        ctx.save_for_backward(pos, edges)
        return d / d.norm(dim=-1, keepdim=True)

    @staticmethod
    def backward(ctx, g):
        pos, edges = ctx.saved_tensors
        d = pos[edges[1]] - pos[edges[0]]
        n = d.norm(dim=-1, keepdim=True)
        u = d / n
        gd = (g - u * (g * u).sum(-1, keepdim=True)) / n
        out = torch.zeros_like(pos)
        return out.index_add(0, edges[1], gd).index_add(0, edges[0], -gd), None


class Integrate(Function):
    """Explicit Euler for n_steps; the gradient for the force forgets dt (a bug)."""

    @staticmethod
    def forward(ctx, x, force, n_steps: int):
        ctx.n_steps = n_steps
        return x + n_steps * 0.1 * force

    @staticmethod
    def backward(ctx, g):
        return g, g * ctx.n_steps, None  # bug: forgets dt = 0.1


def test_a_self_loop_edge_makes_forward_nan_and_is_the_inputs_fault():
    args = {"pos": {"shape": [4, 3]}, "edges": {"values": [[0, 1, 2], [1, 1, 3]],
                                                 "dtype": "int64"}}
    report = verify(EdgeDirections, spec={"cases": [{"name": "loop", "args": args}]})
    (case,) = report.results
    assert [f.code for r in case.about_case for f in r.findings] == ["GV023"]
    assert "output 0[1, 0]" in case.about_case[0].findings[0].message and report.ok

    chain = {**args, "edges": {"values": [[0, 1, 2], [1, 2, 3]], "dtype": "int64"}}
    report = verify(EdgeDirections, spec={"cases": [{"name": "chain", "args": chain}]})
    assert _passed(report.results[0])


def test_zero_steps_leave_the_force_unexercised():
    zero = {"x": {"shape": [3]}, "force": {"shape": [3]}, "n_steps": 0}
    report = verify(Integrate, spec={"cases": [{"name": "zero", "args": zero}]})
    assert [f.input for c in report.results for r in c.checks for f in r.findings
            if f.code == "GV129"] == ["force"]
    report = verify(Integrate, spec={"cases": [{"name": "two", "args": {**zero, "n_steps": 2}}]})
    assert "GV121" in _codes(report)
