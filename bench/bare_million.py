"""Fast-mode gradcheck + gradgradcheck of a 1e6-element elementwise Function, by hand."""
import torch

from ops import Softplus

x = torch.randn(1000, 1000, dtype=torch.float64, requires_grad=True)
assert torch.autograd.gradcheck(Softplus.apply, (x,), fast_mode=True, check_undefined_grad=False)
assert torch.autograd.gradgradcheck(Softplus.apply, (x,), fast_mode=True)
