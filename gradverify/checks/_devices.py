"""What the checks say of a tensor on the wrong device: the hint, and whether an exception is
torch's complaint about two devices. Light: imports nothing of torch."""
from __future__ import annotations

import re

HINT = ("make it on the inputs' device: `x.new_zeros(n)`, `torch.zeros_like(x)`, "
        "`torch.arange(n, device=x.device)`, or `.to(x.device)` for a constant (a 0-dim "
        "constant may stay on the CPU: PyTorch moves it)")
"""How to make a tensor where the inputs live."""

_TWO_DEVICES = re.compile(r"Expected all tensors to be on the same device|"
                          r"found at least two devices|expected device \S+ but got|"
                          r"is on (?:cpu|CPU), but expected (?:it|them) to be on|"
                          r"Expected tensor to have \S+ Device, but got tensor with \S+ Device")


def two_devices(exc: BaseException) -> bool:
    """torch refused to mix tensors of two devices (the GPU's and the CPU's)."""
    return bool(_TWO_DEVICES.search(str(exc)))
