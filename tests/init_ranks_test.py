"""``init`` drafts the rank the code was written for: a matrix where forward transposes
it or multiplies it as one (``x @ W.T``, ``u.T @ x``, ``torch.mm``, ``F.linear``), a batch of
matrices for ``bmm``, one dim per ``einsum`` letter, as many dims as a reduction or a subscript
names, through locals that only rename a parameter. A matrix formula drafted on vectors (where
``x @ W.T`` is a dot product) is never the spec written: the search finds the matrices, and
the correct Function passes what it writes."""
from __future__ import annotations

import ast
import textwrap

import pytest
import torch
import yaml
from torch.autograd.function import once_differentiable

from gradverify.api import verify
from gradverify.init import spec_for
from gradverify.init.guess import first_guesses
from gradverify.init.probe import search
from gradverify.init.source import Hints, read_tree
from gradverify.targets import introspect


def hints_of(source: str, *params: str) -> dict[str, Hints]:
    hints = {p: Hints() for p in params}
    read_tree(ast.parse(textwrap.dedent(source)), hints)
    return hints


@pytest.mark.parametrize("source, param, rank, at_least", [
    ("y = x @ W.T", "W", 2, 0),
    ("y = u.T @ x", "u", 2, 0),
    ("y = torch.mm(a, W)", "W", 2, 0),
    ("y = torch.bmm(q, k)", "q", 3, 0),
    ("y = F.linear(x, W, b)", "b", 1, 0),
    ("y = torch.nn.functional.linear(x, W, b)", "W", 2, 0),
    ("y = torch.einsum('bij,jk->bik', q, k)", "q", 3, 0),
    ("y = torch.einsum('...ij,jk->...ik', q, k)", "q", None, 2),
    ("y = x.sum(dim=(0, 2))", "x", None, 3),
    ("y = x.mean(1)", "x", None, 2),
    ("y = x[:, t]", "x", None, 2),
    ("y = x[..., 0]", "x", None, 0),
    ("y = v * w[:, None]", "w", 1, 0),
    ("y = w[None, :, :] + v", "w", 2, 0),
    # a local that only renames x0, then is updated elementwise in a loop
    ("x = x0\nfor _ in range(n):\n    x = x + dt * torch.tanh(x @ W.T)\n", "x0", None, 0),
])
def test_the_rank_forward_uses_a_parameter_at(source, param, rank, at_least):
    hint = hints_of(source, param, "W")[param]
    assert hint.rank == rank and hint.rank_at_least == at_least
    if "@" in source or "mm" in source:
        assert hint.matrix


def test_a_local_rebound_to_another_rank_is_no_alias():
    """``x = x0`` then ``x = x.sum(0)``: what is done to x says nothing of x0."""
    assert not hints_of("x = x0\nx = x.sum(0)\ny = x @ W.T", "x0", "W")["x0"].matrix
    assert hints_of("x = x0.clone()\nx = x + 1\ny = x @ W.T", "x0", "W")["x0"].matrix


class EulerMatrices(torch.autograd.Function):
    """n explicit Euler steps of x' = tanh(x W^T + b), written for matrices: on vectors its
    formulas would mean another thing (x @ W.T a dot product)."""

    @staticmethod
    def forward(ctx, x0, W, b, dt: float, n_steps: int):
        x = x0
        states = [x0]
        for _ in range(n_steps):
            x = x + dt * torch.tanh(x @ W.T + b)
            states.append(x)
        ctx.save_for_backward(W, b, *states)
        ctx.dt = dt
        return x

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        W, b, *states = ctx.saved_tensors
        u, d_w, d_b = grad, torch.zeros_like(W), torch.zeros_like(b)
        for x in reversed(states[:-1]):
            s = (1 - torch.tanh(x @ W.T + b) ** 2) * u * ctx.dt
            d_w = d_w + s.T @ x
            d_b = d_b + s.sum(dim=0)
            u = u + s @ W
        return u, d_w, d_b, None, None


class Project(torch.autograd.Function):
    """x @ P.T: on vectors, a dot product whose backward formulas (g.T @ x) misread it."""

    @staticmethod
    def forward(ctx, x, P):
        ctx.save_for_backward(x, P)
        return x @ P.T

    @staticmethod
    def backward(ctx, g):
        x, P = ctx.saved_tensors
        return g @ P, g.T @ x


@pytest.mark.parametrize("function, matrices", [
    (EulerMatrices, {"x0": 2, "W": 2}), (Project, {"x": 2, "P": 2})])
def test_init_drafts_matrices_for_matrix_code_and_the_correct_code_passes(function, matrices):
    info = introspect(function)
    guesses, attempt = search(info, first_guesses(info))
    assert attempt.ok
    ranks = {g.name: len(g.shape) for g in guesses if g.name in matrices}
    assert ranks == matrices
    spec = yaml.safe_load(spec_for(info).text)
    spec.pop("target")
    args = spec["cases"][0]["args"]
    if function is EulerMatrices:  # the weight square, so that x + tanh(x @ W.T) adds up
        assert args["W"]["shape"] == ["D", "D"] and args["n_steps"] not in (-1, 0, 1)
    assert verify(function, spec, checks=["gradcheck"], seed=0).ok


class BandEnergies(torch.autograd.Function):
    """spec [B, F, K] @ weight.T: forward runs on a matrix too, but backward's einsum reads what
    forward saved as three dims."""

    @staticmethod
    def forward(ctx, spec, weight):
        ctx.save_for_backward(spec, weight)
        return spec @ weight.T

    @staticmethod
    def backward(ctx, grad):
        s, w = ctx.saved_tensors
        return grad @ w, torch.einsum("bfn,bfk->nk", grad, s)


def test_the_rank_backward_reads_a_saved_input_at_is_its_rank():
    info = introspect(BandEnergies)
    guesses = {g.name: g for g in first_guesses(info)}
    assert len(guesses["spec"].shape) == 3 and len(guesses["weight"].shape) == 2
    spec = yaml.safe_load(spec_for(info).text)
    spec.pop("target")
    assert verify(BandEnergies, spec, checks=["gradcheck"], seed=0).ok


@pytest.mark.parametrize("source, param, flag", [
    ("pos = torch.arange(T) - delay[..., None]", "delay", "per_row"),
    ("ctx.save_for_backward(x, sigma)", "sigma", "saved"),
    ("L = torch.linalg.cholesky(A)", "A", "spd"),
])
def test_what_forward_does_with_a_parameter_marks_it(source, param, flag):
    assert getattr(hints_of(source, param)[param], flag)
    assert not getattr(hints_of("y = x * 2", param)[param], flag)


def test_a_flattening_of_leading_dims_asks_for_two_of_them():
    """``x.reshape(-1, W)`` on one leading dim merges nothing (a ``.view`` of the gradient
    there cannot fail); on two it does."""
    assert hints_of("flat = x.reshape(-1, W)", "x", "W")["x"].rank_at_least == 3
    assert hints_of("flat = x.reshape(W, -1)", "x", "W")["x"].rank_at_least == 0


class SavesALocal(torch.autograd.Function):
    """forward saves a local, not a parameter: backward's names for it say nothing of the
    parameters (and reading them must not fail)."""

    @staticmethod
    def forward(ctx, x):
        y = x * 2
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * 2 + 0 * y.T.sum()


def test_a_saved_local_is_read_without_failing():
    info = introspect(SavesALocal)
    assert [g.name for g in first_guesses(info)] == ["x"]


class Bands(torch.nn.Module):
    """A module whose forward is a Function's apply: what that Function's forward and
    backward do with ``spec`` (backward's einsum: three dims) is what the module needs, and
    the last dim meets the module's weight [3, 4]."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(3, 4))

    def forward(self, spec):
        return BandEnergies.apply(spec, self.weight)


def test_a_module_calling_a_function_is_drafted_as_that_function_needs():
    info = introspect(Bands)
    guesses, attempt = search(info, first_guesses(info))
    assert attempt.ok
    (spec,) = (g for g in guesses if g.name == "spec")
    assert len(spec.shape) == 3 and spec.shape[-1] == 4
    assert "module's weight" in spec.why


class Rotate3(torch.autograd.Function):
    """Points [N, 3] times a 3x3 matrix built inside forward: the size 3 is in no name, only
    in the error forward raises on [N, 4]."""

    @staticmethod
    def forward(ctx, points, angle):
        c, s = torch.cos(angle), torch.sin(angle)
        z, o = torch.zeros_like(c), torch.ones_like(c)
        R = torch.stack([torch.stack([c, -s, z]), torch.stack([s, c, z]),
                         torch.stack([z, z, o])])
        ctx.save_for_backward(points, angle, R)
        return points @ R.T

    @staticmethod
    def backward(ctx, g):
        points, angle, R = ctx.saved_tensors
        c, s = torch.cos(angle), torch.sin(angle)
        z = torch.zeros_like(c)
        dR = torch.stack([torch.stack([-s, -c, z]), torch.stack([c, -s, z]),
                          torch.stack([z, z, z])])
        return g @ R, (g.T @ points * dR).sum()


class Mahalanobis(torch.autograd.Function):
    """y^T A^{-1} y through a Cholesky factorisation of A's symmetric part: A must be SPD."""

    @staticmethod
    def forward(ctx, A, y):
        L = torch.linalg.cholesky(0.5 * (A + A.mT))
        s = torch.cholesky_solve(y.unsqueeze(-1), L).squeeze(-1)
        ctx.save_for_backward(s)
        return (y * s).sum(-1)

    @staticmethod
    def backward(ctx, grad):
        (s,) = ctx.saved_tensors
        gs = grad[..., None] * s
        return -gs[..., :, None] * s[..., None, :], 2 * gs


@pytest.mark.parametrize("function, param, shape", [
    (Rotate3, "points", ("N", 3)), (Mahalanobis, "A", ("D", "D"))])
def test_sizes_an_error_names_and_matrices_a_factorisation_needs(function, param, shape):
    info = introspect(function)
    guesses, attempt = search(info, first_guesses(info))
    assert attempt.ok
    assert next(g for g in guesses if g.name == param).shape == shape
    spec = yaml.safe_load(spec_for(info).text)
    spec.pop("target")
    assert verify(function, spec, checks=["gradcheck"], seed=0).ok


def test_a_branch_on_a_rank_is_read_from_each_spelling():
    for source in ("if x.dim() == 3:\n    pass", "if x.ndim != 3:\n    pass",
                   "y = a if len(x.shape) == 3 else b"):
        assert hints_of(source, "x")["x"].branches == [3], source
    assert hints_of("if x.dim() > 3:\n    pass", "x")["x"].branches == []


class LinkedRms(torch.autograd.Function):
    """The RMS of x's last dim; a 3-D x [B, C, T] gets one level linked across channels. The
    planted mistake of the 3-D path (the channel mean forgotten) is in a branch a 2-D draft
    never takes."""

    PLANTED = False

    @staticmethod
    def forward(ctx, x):
        ms = (x * x).mean(dim=(1, 2)) if x.dim() == 3 else (x * x).mean(dim=-1)
        rms = torch.sqrt(ms + 1e-6)
        ctx.save_for_backward(x, rms)
        return rms

    @staticmethod
    def backward(ctx, grad):
        x, rms = ctx.saved_tensors
        if x.dim() == 3:
            n = x.shape[2] if LinkedRms.PLANTED else x.shape[1] * x.shape[2]
            return (grad / (n * rms))[:, None, None] * x
        return (grad / (x.shape[-1] * rms))[:, None] * x


def test_a_branch_on_the_rank_gets_a_case_that_catches_its_bug(monkeypatch):
    info = introspect(LinkedRms)
    text = spec_for(info).text
    assert "- name: x_3d   # forward branches on x's rank 3" in text
    assert "not run:" not in text  # the two cases together run every line of backward
    spec = yaml.safe_load(text)
    spec.pop("target")
    assert len(spec["cases"]) == 2
    assert verify(LinkedRms, spec, checks=["gradcheck"], seed=0).ok
    monkeypatch.setattr(LinkedRms, "PLANTED", True)
    assert not verify(LinkedRms, spec, checks=["gradcheck"], seed=0).ok


def test_record_makes_a_call_for_a_branch_no_recorded_call_took():
    from gradverify.recording.shrink import branch_calls
    from gradverify.recording.spool import Observation

    info = introspect(LinkedRms)
    x2 = {"kind": "tensor", "name": "x", "shape": [4, 6], "dtype": "float32"}
    ((made, why),) = branch_calls(info, [Observation("t:LinkedRms", (x2,))])
    assert made.args[0]["shape"] == [2, 4, 6] and "not recorded" in why
    x3 = {**x2, "shape": [2, 4, 6]}
    assert branch_calls(info, [Observation("t:LinkedRms", (x2,)),
                               Observation("t:LinkedRms", (x3,))]) == []


def test_a_matrix_formula_on_a_vector_is_rejected_every_time():
    """torch warns of ``x.T`` on a non-matrix once a process; the probe judges every draft
    alike, the second as the first."""
    from gradverify.init.guess import Guess
    from gradverify.init.probe import evaluate

    info = introspect(Project)
    vectors = [Guess("x", "tensor", shape=("N",)), Guess("P", "tensor", shape=("N",))]
    for _ in range(2):
        attempt = evaluate(info, vectors)
        assert not attempt.ok and "dimension other than 2" in (attempt.error or "")
