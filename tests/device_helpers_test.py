"""Helpers that make tensors beside a case's own keep them on the case's device: seen failing
on an H200 under ``--device cuda`` (every case an internal error, GV011, from a CPU tensor
multiplied with a CUDA one). ``meta`` stands in for CUDA here: mixing it with a CPU tensor
raises as mixing CUDA with the CPU does."""
from __future__ import annotations

import torch

from gradverify.checks import _computes, _probes


def test_the_computes_in_nudge_stays_on_the_value_s_device():
    value = torch.empty(3, 4, dtype=torch.float64, device="meta")
    assert _computes._nudged(value, 0).device.type == "meta"


def test_a_missing_gradient_becomes_zeros_on_the_input_s_device():
    like = torch.empty(5, dtype=torch.float64, device="meta")
    assert _probes._zero_if_none(None, like).device.type == "meta"

