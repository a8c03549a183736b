"""The bug classes the checks exist for, shown with plain torch: why each finding matters."""
from __future__ import annotations

import gc
import weakref

import torch

import zoo
from gradverify import verify
from gradverify.results import Status


def test_writing_into_the_incoming_gradient_corrupts_another_branch():
    x = torch.randn(4, dtype=torch.float64, requires_grad=True)
    y = torch.randn(4, dtype=torch.float64, requires_grad=True)
    other = y * 5           # created first, so its backward runs after the Function's
    mine = zoo.BackwardMutatesGrad.apply(x)
    weights = torch.ones(4, dtype=torch.float64)
    # AddBackward hands its one incoming gradient tensor to both branches.
    ((mine + other) * weights).sum().backward()
    assert torch.allclose(x.grad, torch.full_like(x, 3.0))
    assert torch.allclose(y.grad, torch.full_like(y, 15.0))   # corrupted: should be 5
    report = verify(zoo.BackwardMutatesGrad, spec=zoo.VEC, checks=["mutation"])
    assert report.results[0].checks[0].status == Status.FAIL


def test_output_kept_on_ctx_outlives_its_caller_without_gc():
    gc.disable()
    try:
        out = zoo.OutputOnCtx.apply(torch.randn(3, dtype=torch.float64, requires_grad=True))
        ref = weakref.ref(out)
        del out
        assert ref() is not None      # a reference cycle: only the collector frees it
        gc.collect()
        assert ref() is None
    finally:
        gc.enable()


def test_unprotected_ctx_tensor_gives_silently_wrong_gradient():
    x = torch.randn(4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, dtype=torch.float64, requires_grad=True)
    out = zoo.InputOnCtx.apply(x, w)
    expected = x.detach().clone()
    with torch.no_grad():
        x.mul_(2)                     # no error from autograd...
    out.sum().backward()
    assert not torch.allclose(w.grad, expected)   # ...and a wrong gradient for w


def test_memory_summary_counts_saved_tensors():
    from gradverify.examples.linear import LinearFunction

    spec = {"cases": [{"name": "c", "args": {"input": {"shape": [4, 3]},
                                             "weight": {"shape": [5, 3]},
                                             "bias": {"shape": [5]}}}]}
    report = verify(LinearFunction, spec=spec, checks=["saved_tensors"])
    (check,) = report.results[0].checks
    assert check.data["saved"] == {"count": 3, "inputs": 3, "outputs": 0, "intermediates": 0,
                                   "bytes": (12 + 15 + 5) * 4, "dtype": "float32"}
    assert check.summary == "saves 3 tensors (3 inputs), 128 B per call in float32"


def test_needs_input_grad_subsets_are_bounded():
    from gradverify.checks.needs_input_grad import subsets

    assert len(subsets([0, 1, 2, 3])) == 15
    assert len(subsets(list(range(6)))) == 13   # all, each alone, each left out
    assert subsets([0, 1])[0] == (0, 1)
