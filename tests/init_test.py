"""``gradverify init``: guesses from names, annotations and forward's source, then a probe that
makes forward and backward run, and specs that ``check`` runs without edits."""
from __future__ import annotations

import functions
from conftest import run_cli
from gradverify.init.guess import first_guesses
from gradverify.targets import introspect

INDEXED = functions.module('''
class SegmentMean(Function):
    @staticmethod
    def forward(ctx, values, segment_ids, num_segments: int):
        counts = torch.bincount(segment_ids, minlength=num_segments).clamp(min=1)
        sums = values.new_zeros(num_segments, values.shape[1]).index_add(0, segment_ids, values)
        ctx.save_for_backward(segment_ids, counts)
        return sums / counts.unsqueeze(1).to(values.dtype)

    @staticmethod
    def backward(ctx, grad):
        segment_ids, counts = ctx.saved_tensors
        return (grad / counts.unsqueeze(1).to(grad.dtype))[segment_ids], None, None


class Pool(Function):
    @staticmethod
    def forward(ctx, features, spx, num_superpixels: int):
        B, C, H, W = features.shape
        idx = spx.reshape(B, 1, H * W).long().expand(B, C, H * W)
        sums = features.new_zeros(B, C, num_superpixels).scatter_add(2, idx,
                                                                      features.reshape(B, C, -1))
        ctx.save_for_backward(idx)
        ctx.hw = (H, W)
        return sums

    @staticmethod
    def backward(ctx, grad):
        (idx,) = ctx.saved_tensors
        H, W = ctx.hw
        return grad.gather(2, idx).reshape(grad.shape[0], grad.shape[1], H, W), None, None


class Spike(Function):
    @staticmethod
    def forward(ctx, membrane, threshold=1.0):
        ctx.save_for_backward(membrane)
        return (membrane >= threshold).to(membrane.dtype)

    @staticmethod
    def backward(ctx, grad):
        (m,) = ctx.saved_tensors
        return grad / (1 + m.abs()) ** 2, None


class Coords(Function):
    @staticmethod
    def forward(ctx, x, coords):
        ctx.mark_non_differentiable(coords)
        return x * 2, coords

    @staticmethod
    def backward(ctx, grad, grad_coords):
        return grad * 2, None


class Impossible(Function):
    @staticmethod
    def forward(ctx, x):
        raise ValueError("needs a GPU")

    @staticmethod
    def backward(ctx, grad):
        return grad
''')


def _guesses(project, name):
    import indexed

    return {g.name: g for g in first_guesses(introspect(getattr(indexed, name)))}


def test_names_and_source_make_the_first_guesses(project):
    project.write("indexed.py", INDEXED)
    seg = _guesses(project, "SegmentMean")
    assert seg["segment_ids"].dtype == "int64" and seg["segment_ids"].high == "S"
    assert seg["segment_ids"].sorted and seg["num_segments"].kind == "int"
    pool = _guesses(project, "Pool")
    assert pool["features"].shape == ("B", "C", "H", "W")  # B, C, H, W = features.shape
    assert pool["spx"].dtype == "int64"  # .long(), and an index name
    assert pool["num_superpixels"].value == "S"


def test_init_module_writes_specs_that_run(project):
    project.write("indexed.py", INDEXED)
    result = run_cli("init", "indexed", "-o", "specs/")
    assert result.code == 0, result.output
    for name in ("SegmentMean", "Pool", "Spike", "Coords"):
        assert f"wrote specs/{name}.yaml: indexed:{name} (inputs run)" in result.stdout
    assert "wrote specs/Impossible.yaml: indexed:Impossible (TODO: ValueError: needs a GPU)" \
        in result.stdout
    pool = (project.root / "specs/Pool.yaml").read_text()
    assert "spx: {shape: [B, H, W], dtype: int64, high: S}" in pool
    assert "num_superpixels: S" in pool
    coords = (project.root / "specs/Coords.yaml").read_text()
    assert "requires_grad: false" in coords and "backward gives it no gradient" in coords
    spike = (project.root / "specs/Spike.yaml").read_text()
    assert "piecewise constant" in spike and "# expect: {gradcheck:" in spike
    assert "TODO" in (project.root / "specs/Impossible.yaml").read_text()
    (project.root / "specs/Impossible.yaml").unlink()
    check = run_cli("check", "specs")
    assert check.code == 1  # Spike's surrogate gradient, until its expect is uncommented
    assert "GV008" not in check.output
    assert "indexed:Spike" in check.output and check.output.count("error:") == 1


def test_init_module_to_stdout_is_a_yaml_stream(project):
    project.write("indexed.py", INDEXED)
    text = run_cli("init", "indexed").stdout
    assert text.count("---\n") == 4 and text.count("target: indexed:") == 5


def test_a_module_without_functions_is_an_input_error(project):
    project.write("empty.py", "x = 1\n")
    result = run_cli("init", "empty")
    assert result.code == 3
    assert "defines nothing gradverify verifies by module (no torch.autograd.Function" \
        in result.output


STE = '''
import torch
from torch.autograd import Function


class RoundSTE(Function):
    """Rounds; the gradient passes straight through (a surrogate by design)."""

    @staticmethod
    def forward(ctx, x):
        return torch.round(x * 4) / 4

    @staticmethod
    def backward(ctx, grad):
        return grad


class Round(Function):
    @staticmethod
    def forward(ctx, x):
        return torch.round(x * 4) / 4

    @staticmethod
    def backward(ctx, grad):
        return grad
'''


def test_a_surrogate_gradient_its_docstring_declares_is_expected(project):
    project.write("ste.py", STE)
    assert run_cli("init", "ste:RoundSTE", "-o", "ste.yaml").code == 0
    text = (project.root / "ste.yaml").read_text()
    assert '\nexpect: {gradcheck: "surrogate gradient by design' in text
    assert run_cli("check", "ste.yaml").code == 0  # an expected failure, no false one
    assert run_cli("init", "ste:Round", "-o", "round.yaml").code == 0
    assert "\n# expect: {gradcheck:" in (project.root / "round.yaml").read_text()  # asked only
