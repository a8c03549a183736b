"""An op schema with an argument of each type ``init`` reads (defined, never implemented:
only its guesses are looked at)."""
from __future__ import annotations

import torch

LIB = torch.library.Library("initzoo_types", "DEF")
LIB.define("every(Tensor x, Tensor[] xs, float[] weights, int[] dims, SymInt[] size, "
           "int[2] stride, bool flag, float alpha, Scalar value, int dim, int num_groups, "
           "Tensor? other, str mode, ScalarType? dtype, Tensor[]? extra, *, float eps=1e-06, "
           "int[] keep=[]) -> Tensor")
