"""saved_tensors: what forward keeps for backward, and whether it is protected.

Broken Functions the check must catch, then correct Functions that a naive saved_tensors check
would flag (view, sparse, integer and empty outputs or saved tensors).
"""
from __future__ import annotations

import threading

import torch
from torch.autograd import Function
from torch.autograd.function import once_differentiable

from zoo import VEC, spec_for

# ============================================================================ broken


class OutputOnCtx(Function):
    EXPECT = ("saved_tensors", "GV211", None)
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.y = y
        return y

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.y


class InputOnCtx(Function):
    EXPECT = ("saved_tensors", "GV213", "x")
    SPEC = spec_for(x={"shape": [4]}, w={"shape": [4]})

    @staticmethod
    def forward(ctx, x, w):
        ctx.x = x
        ctx.save_for_backward(w)
        return x * w

    @staticmethod
    def backward(ctx, grad):
        (w,) = ctx.saved_tensors
        return grad * w, grad * ctx.x


class DataAliasSaved(Function):
    """Saving `.data` drops the version counter: in-place changes go unnoticed."""

    EXPECT = ("saved_tensors", "GV213", "x")
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x.data)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


class IntermediateOnCtx(Function):
    EXPECT = ("saved_tensors", "GV212", None)
    SEVERITY = "warning"
    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        ctx.cos = x.cos()
        return x.sin()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        return grad * ctx.cos


# ============================================================================ correct


class IdentityView(Function):
    """An identity layer that returns a view of its input (the gradient-reversal idiom with
    lambda = -1). naive saved_tensors: changing the output in place raises autograd's
    view+inplace error at backward, which is protection, not an unprotected read."""

    SPEC = spec_for(x={"shape": [3, 4]})

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad


class InputReturnedAsIs(Function):
    """Returns its input object itself. naive mutation/saved_tensors: the output *is* the input,
    so changing one changes the other; autograd refuses the in-place change."""

    SPEC = spec_for(x={"shape": [4]})

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class SqueezedOutput(Function):
    """Returns ``out.squeeze(-1)``: a view of an intermediate. naive saved_tensors: the
    view+inplace error at backward."""

    SPEC = spec_for(x={"shape": [3, 2]})

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x * x).unsqueeze(-1).squeeze(-1)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


class EinsumBilinear(Function):
    """``torch.einsum`` may return a view of its bmm result. naive saved_tensors: view+inplace."""

    SPEC = spec_for(a={"shape": [2, 3]}, b={"shape": [3, 4]})

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return torch.einsum("ij,jk->ik", a, b)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        grad_a = torch.einsum("ik,jk->ij", grad, b) if ctx.needs_input_grad[0] else None
        grad_b = torch.einsum("ij,ik->jk", a, grad) if ctx.needs_input_grad[1] else None
        return grad_a, grad_b


class MaxValuesReshaped(Function):
    """``max(dim)`` values reshaped into a view, with the indices (int64, non-differentiable).
    naive saved_tensors: view output; naive contract: an integer output."""

    SPEC = spec_for(x={"shape": [3, 5]})

    @staticmethod
    def forward(ctx, x):
        values, indices = x.max(dim=1)
        ctx.mark_non_differentiable(indices)
        ctx.save_for_backward(indices)
        ctx.shape = x.shape
        return values.view(-1, 1), indices

    @staticmethod
    def backward(ctx, grad_values, grad_indices):
        (indices,) = ctx.saved_tensors
        grad = grad_values.new_zeros(ctx.shape)
        return grad.scatter(1, indices.unsqueeze(1), grad_values)


class UnbindViews(Function):
    """Returns several views of one base (``unbind``). naive saved_tensors: torch refuses in-place
    changes of multi-view outputs at the op itself."""

    SPEC = spec_for(x={"shape": [2, 3]})

    @staticmethod
    def forward(ctx, x):
        return (x * 3).unbind(0)

    @staticmethod
    def backward(ctx, grad_a, grad_b):
        return torch.stack([grad_a, grad_b]) * 3


class ExpandedOutput(Function):
    """An expanded (stride 0) output. naive saved_tensors: an in-place write to overlapping memory
    is refused by torch for a reason that has nothing to do with backward."""

    SPEC = spec_for(x={"shape": [4]})

    @staticmethod
    def forward(ctx, x):
        return x.expand(3, 4)

    @staticmethod
    def backward(ctx, grad):
        return grad.sum(0)


class SpecialSpmm(Function):
    """The GAT idiom: a sparse COO matrix built in forward from (indices, values) and saved, times
    a dense matrix. backward uses ``.t()`` of a sparse tensor and numpy-free ops, but the saved
    sparse matrix carries no graph to ``values``, so the Function is honestly
    @once_differentiable. naive saved_tensors/mutation: ``untyped_storage()`` and ``torch.equal``
    raise on sparse tensors; the sparse tensor aliases ``values`` without sharing its version
    counter (a note, not a failure)."""

    SPEC = spec_for(indices={"values": [[0, 1, 2, 2], [1, 2, 0, 1]], "dtype": "int64"},
                    values={"shape": [4]}, shape={"tuple": [3, 3]}, b={"shape": [3, 2]})

    @staticmethod
    def forward(ctx, indices, values, shape, b):
        a = torch.sparse_coo_tensor(indices, values, shape)
        ctx.save_for_backward(a, b)
        ctx.n = shape[0]
        return torch.matmul(a, b)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output):
        a, b = ctx.saved_tensors
        grad_values = grad_b = None
        if ctx.needs_input_grad[1]:
            grad_a_dense = grad_output.matmul(b.t())
            edge = a._indices()[0, :] * ctx.n + a._indices()[1, :]
            grad_values = grad_a_dense.reshape(-1)[edge]
        if ctx.needs_input_grad[3]:
            grad_b = a.t().matmul(grad_output)
        return None, grad_values, None, grad_b


class IntegerIndexInput(Function):
    """An int64 index input kept on ctx by save_for_backward, changed in place by the check:
    autograd raises the version error. naive saved_tensors: rolling an integer tensor's values."""

    SPEC = spec_for(x={"shape": [5]}, index={"values": [4, 0, 2], "dtype": "int64"})

    @staticmethod
    def forward(ctx, x, index):
        ctx.save_for_backward(index)
        ctx.n = x.shape[0]
        return x[index] * 2

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        return grad.new_zeros(ctx.n).index_add(0, index, grad * 2), None


class ZeroSizeBatch(Function):
    """An empty batch. naive saved_tensors: nothing to change in place; naive gradcheck: an
    empty Jacobian."""

    SPEC = spec_for(x={"shape": [0, 3]})

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


class OutputHeldByPendingWork(Function):
    """Hands its output to background work that holds it for a moment (as torch.jit.fork
    futures do). naive cycle check: the output is still referenced right after the caller
    drops it, so "kept on ctx" fires; it is let go without the garbage collector, so it is
    not a cycle."""

    SPEC = VEC

    @staticmethod
    def forward(ctx, x):
        out = x * 2
        threading.Timer(0.05, lambda held: None, args=(out,)).start()
        return out

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


class SavedReshapedInput(Function):
    """Saves ``x.reshape(-1, n).contiguous()`` (a kernel's pattern): a view of the input made
    in forward's no_grad mode. After the input is changed in place, autograd refuses in
    backward with "A view was created in no_grad mode and its base ... has been modified
    inplace". naive saved_tensors: "backward raised instead of autograd's version-counter
    error" (GV213); that refusal is autograd's protection."""

    SPEC = spec_for(x={"shape": [2, 3, 4]}, w={"shape": [4]})

    @staticmethod
    def forward(ctx, x, w):
        rows = x.reshape(-1, x.shape[-1]).contiguous()
        ctx.save_for_backward(rows, w)
        return (rows * w).reshape(x.shape)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        rows, w = ctx.saved_tensors
        flat = grad.reshape(-1, grad.shape[-1])
        return (flat * w).reshape(grad.shape), (flat * rows).sum(0)
