"""Sample Functions shared by the tests that run gradverify on a project of their own (the CLI,
the plugin, pre-commit, signals, global state): each is module source that a test writes into
its project. ``tests/zoo/`` is different: the catalogue, one file per check, of the bugs that the
checks must catch and of the correct Functions they must not flag. They are written in
setup_context style, which torch.func can run (an old-style Function is a func warning,
GV363)."""
from __future__ import annotations

HEADER = "import torch\nfrom torch.autograd import Function\n"


def module(*functions: str, header: str = HEADER) -> str:
    """A module's source: the imports, then each Function."""
    return "\n".join([header, *functions])


def square(name: str = "Square", gradient: str = "2 * x * grad") -> str:
    """x * x; its backward returns ``gradient`` (correct by default)."""
    return f'''
class {name}(Function):
    @staticmethod
    def forward(x):
        return x * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return {gradient}
'''


def square_missing_factor(name: str = "Bad") -> str:
    """x * x whose backward forgets the factor 2: gradcheck fails."""
    return square(name, gradient="x * grad")


def scale(name: str, factor: int) -> str:
    """x * factor, correct, nothing saved."""
    return f'''
class {name}(Function):
    @staticmethod
    def forward(x):
        return x * {factor}

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return grad * {factor}
'''


def leaky(name: str = "Leaky", seconds: int = 3) -> str:
    """x * 2, correct, whose forward sets torch's thread count and starts a thread it never
    joins: no check fails, but the case changes global state (GV012) and leaves a thread
    running (GV015)."""
    return f'''
import threading, time


class {name}(Function):
    @staticmethod
    def forward(x):
        torch.set_num_threads(2)  # the suite runs torch on one (conftest.ONE_THREAD)
        threading.Thread(target=time.sleep, args=({seconds},), daemon=True).start()
        return x * 2

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return grad * 2
'''


def frames(name: str = "Frames") -> str:
    """Frames of x [B, T] (a window of w, every ``hop``) times the window; backward adds the
    frames' gradients back where they overlap (overlap-add)."""
    return f'''
class {name}(Function):
    @staticmethod
    def forward(ctx, x, window, hop):
        ctx.save_for_backward(x, window)
        ctx.hop = hop
        return x.unfold(-1, window.shape[0], hop) * window

    @staticmethod
    def backward(ctx, g):
        x, window = ctx.saved_tensors
        w = window.shape[0]
        gx = torch.zeros_like(x)
        for i in range(g.shape[-2]):
            gx[..., i * ctx.hop:i * ctx.hop + w] += g[..., i, :] * window
        return gx, (g * x.unfold(-1, w, ctx.hop)).sum(dim=(0, 1)), None
'''


SEGFAULTS = "ctypes.string_at(0)  # reads address 0: SIGSEGV, like a bad kernel"
"""A statement that ends the process as a crashing kernel does (``import ctypes`` first)."""
HANGS = "time.sleep(600)"
"""A statement that never ends within a test (``import time`` first)."""


def one_input(name: str, forward: str = "return x * 2", backward: str = "return grad * 2"
              ) -> str:
    """``name(x)``, a Function of one input whose forward and backward run these statements
    (lines of their own, joined by ``\\n``): a crash or a hang (``SEGFAULTS``, ``HANGS``) where
    the test wants it, x * 2 elsewhere."""
    def body(statements: str) -> str:
        return "\n".join(f"        {line}" for line in statements.split("\n"))

    return f'''
class {name}(Function):
    @staticmethod
    def forward(x):
{body(forward)}

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
{body(backward)}
'''
