"""Fast-mode gradcheck + gradgradcheck of a 1e6-element elementwise Function, by hand."""
import sys

import torch

from ops import Softplus

DEVICE = sys.argv[1] if len(sys.argv) > 1 else "cpu"  # gpu/gpu.py passes cuda
x = torch.randn(1000, 1000, dtype=torch.float64, device=DEVICE, requires_grad=True)
assert torch.autograd.gradcheck(Softplus.apply, (x,), fast_mode=True, check_undefined_grad=False)
assert torch.autograd.gradgradcheck(Softplus.apply, (x,), fast_mode=True)
