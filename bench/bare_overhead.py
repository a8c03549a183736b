"""What a user writes by hand: gradcheck + gradgradcheck on the same inputs as overhead.yaml,
with the flags gradverify uses (first order leaves undefined gradients to its own check)."""
import sys

import torch

from ops import Bilinear

DEVICE = sys.argv[1] if len(sys.argv) > 1 else "cpu"  # gpu/gpu.py passes cuda
x = torch.randn(4, 3, dtype=torch.float64, device=DEVICE, requires_grad=True)
w = torch.randn(3, 5, dtype=torch.float64, device=DEVICE, requires_grad=True)
assert torch.autograd.gradcheck(Bilinear.apply, (x, w), check_undefined_grad=False)
assert torch.autograd.gradgradcheck(Bilinear.apply, (x, w))
