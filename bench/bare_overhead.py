"""What a user writes by hand: gradcheck + gradgradcheck on the same inputs as overhead.yaml,
with the flags gradverify uses (first order leaves undefined gradients to its own check)."""
import torch

from ops import Bilinear

x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
w = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
assert torch.autograd.gradcheck(Bilinear.apply, (x, w), check_undefined_grad=False)
assert torch.autograd.gradgradcheck(Bilinear.apply, (x, w))
