"""Correct Functions that are easy to flag falsely.

Each one is correct, and each is here because a naive version of some check would flag it: the
comment ``naive <check>:`` names the check and what it would get wrong. Every default check
must pass, skip with a reason, or meet an ``expect:`` the spec declares, on each of them:
never fail, never error (tests/trust_test.py). Several mirror Functions from published
packages (a gradient-reversal layer, the GAT sparse matmul, LSS's QuickCumsum, spiking
surrogate gradients, superpixel pooling).
"""
from __future__ import annotations

import numpy as np
import torch
from torch.autograd import Function
from torch.autograd.function import once_differentiable


def one_case(**args):
    return {"cases": [{"name": "c", "args": args}]}


def factory_case(factory, **extra):
    return {"cases": [{"name": "c", "factory": f"zoo_correct:{factory}", **extra}]}


# ============================================================================ view outputs


class IdentityView(Function):
    """An identity layer that returns a view of its input (the gradient-reversal idiom with
    lambda = -1). naive saved_tensors: changing the output in place raises autograd's
    view+inplace error at backward, which is protection, not an unprotected read."""

    SPEC = one_case(x={"shape": [3, 4]})

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad


class GradientReversal(Function):
    """pytorch-revgrad / DANN: identity forward, -alpha * grad backward. Wrong by design, so the
    spec declares gradcheck's failure. naive saved_tensors: the output is a view of the input."""

    SPEC = {**one_case(x={"shape": [2, 5]}, alpha=0.5),
            "expect": {"gradcheck": "reverses and scales the gradient on purpose"}}

    @staticmethod
    def forward(ctx, x, alpha):
        ctx.alpha = alpha
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return -ctx.alpha * grad, None


class InputReturnedAsIs(Function):
    """Returns its input object itself. naive mutation/saved_tensors: the output *is* the input,
    so changing one changes the other; autograd refuses the in-place change."""

    SPEC = one_case(x={"shape": [4]})

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class SqueezedOutput(Function):
    """Returns ``out.squeeze(-1)``: a view of an intermediate. naive saved_tensors: the
    view+inplace error at backward."""

    SPEC = one_case(x={"shape": [3, 2]})

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x * x).unsqueeze(-1).squeeze(-1)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


class ReshapeAliasesInput(Function):
    """``reshape`` of a contiguous input aliases it. naive mutation: the output shares the
    input's storage, which is not an in-place write to the input."""

    SPEC = one_case(x={"shape": [2, 6]})

    @staticmethod
    def forward(ctx, x):
        return x.reshape(3, 4)

    @staticmethod
    def backward(ctx, grad):
        return grad.reshape(2, 6)


class TransposedOutput(Function):
    """A non-contiguous view output. naive layout/saved_tensors: the output's strides."""

    SPEC = one_case(x={"shape": [2, 3]})

    @staticmethod
    def forward(ctx, x):
        return x.t()

    @staticmethod
    def backward(ctx, grad):
        return grad.t()


class EinsumBilinear(Function):
    """``torch.einsum`` may return a view of its bmm result. naive saved_tensors: view+inplace."""

    SPEC = one_case(a={"shape": [2, 3]}, b={"shape": [3, 4]})

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

    SPEC = one_case(x={"shape": [3, 5]})

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

    SPEC = one_case(x={"shape": [2, 3]})

    @staticmethod
    def forward(ctx, x):
        return (x * 3).unbind(0)

    @staticmethod
    def backward(ctx, grad_a, grad_b):
        return torch.stack([grad_a, grad_b]) * 3


class ExpandedOutput(Function):
    """An expanded (stride 0) output. naive saved_tensors: an in-place write to overlapping memory
    is refused by torch for a reason that has nothing to do with backward."""

    SPEC = one_case(x={"shape": [4]})

    @staticmethod
    def forward(ctx, x):
        return x.expand(3, 4)

    @staticmethod
    def backward(ctx, grad):
        return grad.sum(0)


# ============================================================================ sparse


class SpecialSpmm(Function):
    """The GAT idiom: a sparse COO matrix built in forward from (indices, values) and saved, times
    a dense matrix. backward uses ``.t()`` of a sparse tensor and numpy-free ops, but the saved
    sparse matrix carries no graph to ``values``, so the Function is honestly
    @once_differentiable. naive saved_tensors/mutation: ``untyped_storage()`` and ``torch.equal``
    raise on sparse tensors; the sparse tensor aliases ``values`` without sharing its version
    counter (a note, not a failure)."""

    SPEC = one_case(indices={"values": [[0, 1, 2, 2], [1, 2, 0, 1]], "dtype": "int64"},
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


class FixedSparseAdjacency(Function):
    """A graph convolution with a constant sparse adjacency saved for backward: twice
    differentiable, since backward is a sparse matmul of the incoming gradient. naive
    gradgradcheck/saved_tensors: sparse saved tensors."""

    SPEC = one_case(indices={"values": [[0, 1, 2, 2], [1, 2, 0, 1]], "dtype": "int64"},
                    x={"shape": [3, 2]})

    @staticmethod
    def forward(ctx, indices, x):
        adjacency = torch.sparse_coo_tensor(indices, torch.ones(indices.shape[1], dtype=x.dtype),
                                            (x.shape[0], x.shape[0])).coalesce()
        ctx.save_for_backward(adjacency)
        return torch.sparse.mm(adjacency, x)

    @staticmethod
    def backward(ctx, grad):
        (adjacency,) = ctx.saved_tensors
        return None, torch.sparse.mm(adjacency.t(), grad)


def make_sparse_coo(generator, dtype):
    indices = torch.tensor([[0, 1, 1, 2], [2, 0, 1, 2]])
    values = torch.randn(4, generator=generator, dtype=torch.float64).to(dtype)
    matrix = torch.sparse_coo_tensor(indices, values, (3, 3)).coalesce()
    dense = torch.randn(3, 2, generator=generator, dtype=torch.float64).to(dtype)
    return {"matrix": matrix, "x": dense.requires_grad_()}


class SparseInputMatmul(Function):
    """A sparse COO *input* (not requiring grad) times a dense input. naive checks: clones,
    equality, storage bytes and non-contiguous copies of a sparse input."""

    SPEC = factory_case("make_sparse_coo")

    @staticmethod
    def forward(ctx, matrix, x):
        ctx.save_for_backward(matrix)
        return torch.sparse.mm(matrix, x)

    @staticmethod
    def backward(ctx, grad):
        (matrix,) = ctx.saved_tensors
        return None, torch.sparse.mm(matrix.t(), grad)


def make_sparse_csr(generator, dtype):
    inputs = make_sparse_coo(generator, dtype)
    inputs["matrix"] = inputs["matrix"].to_sparse_csr()
    return inputs


class SparseCsrInputMatmul(Function):
    """A sparse CSR input, which has no ``_indices()`` and no storage of its own. naive
    saved_tensors/mutation: storage and equality on CSR."""

    SPEC = factory_case("make_sparse_csr")

    @staticmethod
    def forward(ctx, matrix, x):
        ctx.save_for_backward(matrix)
        return matrix @ x

    @staticmethod
    def backward(ctx, grad):
        (matrix,) = ctx.saved_tensors
        return None, matrix.to_dense().t() @ grad


# ============================================================================ integer and bool


class CountsAndMask(Function):
    """Returns a float, a bool mask and an integer count. naive contract: gradients for integer
    outputs; naive undefined_grad: three outputs, two of them not differentiable."""

    SPEC = one_case(x={"shape": [6]})

    @staticmethod
    def forward(ctx, x):
        mask = x > 0
        count = mask.sum()
        ctx.mark_non_differentiable(mask, count)
        ctx.save_for_backward(mask)
        return x * mask, mask, count

    @staticmethod
    def backward(ctx, grad, grad_mask, grad_count):
        (mask,) = ctx.saved_tensors
        return grad * mask


class IntegerIndexInput(Function):
    """An int64 index input kept on ctx by save_for_backward, changed in place by the check:
    autograd raises the version error. naive saved_tensors: rolling an integer tensor's values."""

    SPEC = one_case(x={"shape": [5]}, index={"values": [4, 0, 2], "dtype": "int64"})

    @staticmethod
    def forward(ctx, x, index):
        ctx.save_for_backward(index)
        ctx.n = x.shape[0]
        return x[index] * 2

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        return grad.new_zeros(ctx.n).index_add(0, index, grad * 2), None


# ============================================================================ once_differentiable


class NumpyOnceDifferentiable(Function):
    """backward computes with numpy and says so with @once_differentiable. naive gradgradcheck:
    the graph break; naive lint: numpy in backward."""

    SPEC = one_case(x={"shape": [4]})

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return torch.from_numpy(np.cos(x.numpy()) * grad.numpy())


# ============================================================================ mark_dirty


class InplaceAddScalar(Function):
    """In-place on the input, declared with mark_dirty. naive mutation: the input changes."""

    SPEC = one_case(x={"shape": [4]})

    @staticmethod
    def forward(ctx, x):
        x.add_(1.0)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class InplaceSigmoidSavesOutput(Function):
    """In-place sigmoid that saves its (dirty) output for backward. naive mutation and
    saved_tensors: the saved tensor is the caller's input."""

    SPEC = one_case(x={"shape": [5]})

    @staticmethod
    def forward(ctx, x):
        x.sigmoid_()
        ctx.mark_dirty(x)
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * y * (1 - y)


# ============================================================================ complex


class ComplexAbsSquared(Function):
    """|z|^2: a real output of a complex input. naive gradcheck/precision: complex Jacobians."""

    SPEC = one_case(z={"shape": [3], "dtype": "complex64"})

    @staticmethod
    def forward(ctx, z):
        ctx.save_for_backward(z)
        return (z * z.conj()).real

    @staticmethod
    def backward(ctx, grad):
        (z,) = ctx.saved_tensors
        return 2 * grad * z


class ComplexExp(Function):
    """A holomorphic map: backward is grad * conj(exp(z)). naive checks: complex outputs."""

    SPEC = one_case(z={"shape": [2, 3], "dtype": "complex64"})

    @staticmethod
    def forward(ctx, z):
        out = z.exp()
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * out.conj()


# ============================================================================ setup_context, vmap, jvp


class SetupContextTanh(Function):
    """setup_context style with jvp and generate_vmap_rule. naive forward_ad/vmap: ctx comes from
    setup_context, not forward."""

    generate_vmap_rule = True
    SPEC = one_case(x={"shape": [2, 3]})

    @staticmethod
    def forward(x):
        return x.tanh()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)
        ctx.save_for_forward(output)

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * (1 - out * out)

    @staticmethod
    def jvp(ctx, tangent):
        (out,) = ctx.saved_tensors
        return tangent * (1 - out * out)


class ExplicitVmapScale(Function):
    """An explicit vmap staticmethod and a non-tensor argument. naive vmap: the in_dims of
    non-tensor arguments are None."""

    SPEC = one_case(x={"shape": [4]}, factor=3.0)

    @staticmethod
    def forward(x, factor):
        return x * factor

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.factor = inputs[1]

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.factor, None

    @staticmethod
    def vmap(info, in_dims, x, factor):
        return ExplicitVmapScale.apply(x, factor), in_dims[0]


# ============================================================================ fast mode, kinks


class LargeSoftsign(Function):
    """Large enough for fast mode (360,000 Jacobian entries). naive gradcheck: the slow-mode
    full Jacobian would take minutes."""

    SPEC = one_case(x={"shape": [20, 30]})

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x / (1 + x.abs())

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad / (1 + x.abs()) ** 2


class AbsAtRandomPoints(Function):
    """|x| at random points: piecewise linear, second derivative zero. naive gradgradcheck: the
    zero Hessian; the incoming-gradient probe must see d(grad)/d(grad_output) = sign(x)."""

    SPEC = one_case(x={"shape": [6]})

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.abs()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.sign()


class MaxPool1d(Function):
    """Max over windows of 2 with a gather in backward: piecewise linear. naive gradgradcheck: a
    constant gradient with respect to x."""

    SPEC = one_case(x={"shape": [2, 6]})

    @staticmethod
    def forward(ctx, x):
        values, arg = x.reshape(x.shape[0], -1, 2).max(-1)
        index = arg + 2 * torch.arange(values.shape[1])
        ctx.save_for_backward(index)
        ctx.shape = x.shape
        return values

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        return grad.new_zeros(ctx.shape).scatter(1, index, grad)


class ScatterSegmentSum(Function):
    """Segment sums over an integer segment id tied to the output's first dim. naive checks:
    integer input, scatter_add in forward (deterministic on CPU)."""

    SPEC = one_case(values={"shape": [6, 2]},
                    segments={"values": [0, 0, 1, 2, 2, 2], "dtype": "int64"}, n=3)

    @staticmethod
    def forward(ctx, values, segments, n):
        ctx.save_for_backward(segments)
        return values.new_zeros(n, values.shape[1]).index_add(0, segments, values)

    @staticmethod
    def backward(ctx, grad):
        (segments,) = ctx.saved_tensors
        return grad.index_select(0, segments), None, None


# ============================================================================ multi-output


class SplitPartlyUsed(Function):
    """Two outputs, gradients not materialized, None handled. naive undefined_grad: None in."""

    SPEC = one_case(x={"shape": [4]})

    @staticmethod
    def forward(ctx, x):
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x)
        return x * 2, x * x

    @staticmethod
    def backward(ctx, grad_double, grad_square):
        (x,) = ctx.saved_tensors
        if grad_double is None and grad_square is None:
            return None
        grad = torch.zeros_like(x)
        if grad_double is not None:
            grad = grad + 2 * grad_double
        if grad_square is not None:
            grad = grad + 2 * x * grad_square
        return grad


# ============================================================================ non-tensor arguments


def make_non_tensor_args(generator, dtype):
    x = torch.randn(2, 3, generator=generator, dtype=torch.float64).to(dtype).requires_grad_()
    return {"x": x, "n": 2, "scale": 0.5, "dims": (0, 1), "bias": None, "fn": torch.tanh}


class NonTensorArguments(Function):
    """ints, floats, tuples, None and a callable among the arguments. naive contract: a gradient
    slot for each; naive layout/saved_tensors: only tensors are changed."""

    SPEC = factory_case("make_non_tensor_args")

    @staticmethod
    def forward(ctx, x, n, scale, dims, bias, fn):
        ctx.save_for_backward(x)
        ctx.n, ctx.scale = n, scale
        out = (fn(x) * scale).pow(n)
        return out if bias is None else out + bias

    @staticmethod
    def backward(ctx, grad):
        # Recomputed from the saved input, not saved from forward (an intermediate computed
        # in forward carries no graph, and double backward through it would be wrong).
        (x,) = ctx.saved_tensors
        t = torch.tanh(x)
        dy = ctx.n * (t * ctx.scale).pow(ctx.n - 1) * grad
        return dy * ctx.scale * (1 - t * t), None, None, None, None, None


# ============================================================================ seed idioms


class QuickCumsum(Function):
    """LSS/BEVFusion's voxel pooling trick: a cumsum, then differences at the ends of runs of
    equal sorted ranks (a boolean keep mask saved for backward); the geometry passes through,
    marked non-differentiable. naive contract: the integer pass-through output."""

    SPEC = one_case(x={"shape": [8, 2]},
                    geom={"values": [[0, 0], [0, 0], [1, 0], [1, 0], [1, 0], [2, 1], [3, 1],
                                     [3, 1]], "dtype": "int64"},
                    ranks={"values": [0, 0, 1, 1, 1, 2, 3, 3], "dtype": "int64"})

    @staticmethod
    def forward(ctx, x, geom, ranks):
        x = x.cumsum(0)
        kept = torch.ones(x.shape[0], device=x.device, dtype=torch.bool)
        kept[:-1] = ranks[1:] != ranks[:-1]
        x, geom = x[kept], geom[kept]
        x = torch.cat((x[:1], x[1:] - x[:-1]))
        ctx.save_for_backward(kept)
        ctx.mark_non_differentiable(geom)
        return x, geom

    @staticmethod
    def backward(ctx, grad_x, grad_geom):
        (kept,) = ctx.saved_tensors
        back = torch.cumsum(kept, 0)
        back[kept] -= 1
        return grad_x[back], None, None


class SuperpixelMeanPool(Function):
    """Mean of [C, N] features over an integer label map of N pixels into K segments. naive
    needs_input_grad: the label map is an integer input."""

    SPEC = one_case(features={"shape": [2, 7]},
                    labels={"values": [0, 1, 1, 2, 0, 2, 2], "dtype": "int64"}, k=3)

    @staticmethod
    def forward(ctx, features, labels, k):
        sums = features.new_zeros(features.shape[0], k).index_add(1, labels, features)
        counts = torch.bincount(labels, minlength=k).clamp(min=1).to(features.dtype)
        ctx.save_for_backward(labels, counts)
        return sums / counts

    @staticmethod
    def backward(ctx, grad):
        labels, counts = ctx.saved_tensors
        return (grad / counts).index_select(1, labels), None, None


class GlobalMaxPoolIndices(Function):
    """Max over the last dim of [N, C, L] with argmax indices. naive undefined_grad: the indices'
    gradient slot."""

    SPEC = one_case(x={"shape": [2, 3, 4]})

    @staticmethod
    def forward(ctx, x):
        values, indices = x.max(-1)
        ctx.mark_non_differentiable(indices)
        ctx.save_for_backward(indices)
        ctx.shape = x.shape
        return values, indices

    @staticmethod
    def backward(ctx, grad, grad_indices):
        (indices,) = ctx.saved_tensors
        return grad.new_zeros(ctx.shape).scatter(-1, indices.unsqueeze(-1), grad.unsqueeze(-1))


class SpikeSurrogate(Function):
    """A spiking neuron's Heaviside step with a fast-sigmoid surrogate gradient (snntorch,
    spikingjelly): the gradient is wrong on purpose, declared under expect. naive gradcheck:
    a FAIL on a Function that does what its author intends."""

    SPEC = {**one_case(membrane={"shape": [6]}),
            "expect": {"gradcheck": "surrogate gradient by design"}}

    @staticmethod
    def forward(ctx, membrane):
        ctx.save_for_backward(membrane)
        return (membrane > 0).to(membrane.dtype)

    @staticmethod
    def backward(ctx, grad):
        (membrane,) = ctx.saved_tensors
        return grad / (1 + 10 * membrane.abs()) ** 2


# ============================================================================ unusual shapes


class ZeroDimScale(Function):
    """A 0-dim scale times a vector. naive layout/mutation: a 0-dim tensor has no strides to
    change and a single element to roll."""

    SPEC = one_case(x={"shape": [3]}, scale={"shape": []})

    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x, scale)
        return x * scale

    @staticmethod
    def backward(ctx, grad):
        x, scale = ctx.saved_tensors
        grad_x = grad * scale if ctx.needs_input_grad[0] else None
        grad_scale = (grad * x).sum() if ctx.needs_input_grad[1] else None
        return grad_x, grad_scale


class ZeroSizeBatch(Function):
    """An empty batch. naive saved_tensors: nothing to change in place; naive gradcheck: an
    empty Jacobian."""

    SPEC = one_case(x={"shape": [0, 3]})

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


class FloatOutputMarkedConstant(Function):
    """A norm used as a stop-gradient scale: the second output is float but marked
    non-differentiable on purpose. naive gradcheck: its numerical derivative is not zero. The
    contract's GV111 warning (that gradient path is silently zero) is the documented answer."""

    WARNS = {"contract": "GV111"}
    SPEC = one_case(x={"shape": [4]})

    @staticmethod
    def forward(ctx, x):
        norm = x.norm()
        ctx.mark_non_differentiable(norm)
        return x * 2, norm

    @staticmethod
    def backward(ctx, grad, grad_norm):
        return grad * 2


def logsumexp_reference(x):
    return torch.logsumexp(x, dim=-1)


class StableLogSumExp(Function):
    """The max-shifted log-sum-exp against its plain-PyTorch reference. naive reference: an exact
    or float64-tolerance comparison of a float32 run would flag round-off."""

    SPEC = {**one_case(x={"shape": [3, 5], "init": "normal", "std": 30.0}),
            "reference": "zoo_correct:logsumexp_reference"}

    @staticmethod
    def forward(ctx, x):
        top = x.max(dim=-1, keepdim=True).values
        out = top.squeeze(-1) + (x - top).exp().sum(-1).log()
        ctx.save_for_backward(x, out)
        return out

    @staticmethod
    def backward(ctx, grad):
        x, out = ctx.saved_tensors
        return grad.unsqueeze(-1) * (x - out.unsqueeze(-1)).exp()


class EmptyThenFilled(Function):
    """Allocates with torch.empty and writes every element. naive determinism: flagging
    torch.empty itself; the check fills freed memory with NaN, so only unwritten reads show."""

    SPEC = one_case(x={"shape": [4, 3]})

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        out = torch.empty_like(x)
        out[:] = x * x
        return out

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        result = torch.empty_like(grad)
        result.copy_(2 * x * grad)
        return result


class Tagged(torch.Tensor):
    """A tensor subclass that adds nothing (as units or named-tensor libraries do)."""


def make_subclass_input(generator, dtype):
    x = torch.randn(2, 3, generator=generator, dtype=torch.float64).to(dtype)
    return {"x": x.as_subclass(Tagged).requires_grad_(), "w": torch.nn.Parameter(
        torch.randn(3, generator=generator, dtype=torch.float64).to(dtype))}


class SubclassInputs(Function):
    """A tensor-subclass input and an nn.Parameter. naive checks: storage, equality and
    in-place changes on a subclass."""

    SPEC = factory_case("make_subclass_input")

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        grad_x = grad * w if ctx.needs_input_grad[0] else None
        grad_w = (grad * x).sum(0) if ctx.needs_input_grad[1] else None
        return grad_x, grad_w


# ============================================================================ factories


def make_float32_sparse(generator):
    """Takes no dtype and returns float32, as most hand-written factories do."""
    rows = torch.tensor([0, 0, 2, 3, 4, 5, 5])
    cols = torch.tensor([1, 3, 0, 2, 4, 1, 0])
    values = torch.randn(7, generator=generator)
    dense = torch.randn(5, 3, generator=generator)
    return torch.stack([rows, cols]), values, 6, dense


class FactoryWithoutDtype(Function):
    """A sparse-dense matmul whose factory takes only ``generator`` and returns float32.
    naive gradcheck: using the factory's tensors as returned runs gradcheck in float32, which
    invents GV121 ("only rows ... wrong") and GV113 on a correct Function."""

    SPEC = factory_case("make_float32_sparse")

    @staticmethod
    def forward(ctx, indices, values, n_rows, dense):
        rows, cols = indices
        ctx.save_for_backward(indices, values, dense)
        out = dense.new_zeros(n_rows, dense.shape[1])
        return out.index_add(0, rows, values.unsqueeze(1) * dense.index_select(0, cols))

    @staticmethod
    def backward(ctx, grad):
        indices, values, dense = ctx.saved_tensors
        rows, cols = indices
        g_rows = grad.index_select(0, rows)
        grad_values = (g_rows * dense.index_select(0, cols)).sum(1) \
            if ctx.needs_input_grad[1] else None
        grad_dense = torch.zeros_like(dense).index_add(0, cols, values.unsqueeze(1) * g_rows) \
            if ctx.needs_input_grad[3] else None
        return None, grad_values, None, grad_dense


def make_in_dtype(generator, dtype):
    """Honours dtype, drawing straight in it: torch.randn draws other values in float32 than
    in float64 from 16 elements up."""
    return (torch.randn(6, 5, generator=generator, dtype=dtype),)


class FactoryWithDtype(Function):
    """exp on factory inputs drawn in the requested dtype. naive precision: calling the factory
    once per dtype compares float32 and float64 results on different numbers ("off by 5.76")."""

    SPEC = factory_case("make_in_dtype")

    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * y


class SortedIndex(torch.Tensor):
    """An int64 index that knows it is sorted (torch_geometric's EdgeIndex): every op but
    clone returns a plain tensor, so detach() or a transpose drops the class and its flag."""

    is_sorted = True

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs or {})
        if func is torch.Tensor.clone:
            return out
        return torch._C._disabled_torch_function_impl(func, types, args, kwargs or {}) \
            if isinstance(out, SortedIndex) else out


def make_sorted_index(generator):
    index = torch.sort(torch.randint(0, 4, (7,), generator=generator)).values
    return index.as_subclass(SortedIndex), torch.randn(7, 3, generator=generator), 4


class SegmentSumSortedIndex(Function):
    """A segment sum that needs its index's sort flag. naive saved_tensors/layout/mutation:
    copying the index through detach() or a transpose loses the subclass, and forward raises
    AttributeError ('Tensor' object has no attribute 'is_sorted'), every check an error."""

    SPEC = factory_case("make_sorted_index")

    @staticmethod
    def forward(ctx, index, src, size):
        if not index.is_sorted:
            raise ValueError("index must be sorted")
        ctx.save_for_backward(index)
        return src.new_zeros(size, src.shape[1]).index_add(0, index.as_subclass(torch.Tensor),
                                                           src)

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        return None, grad.index_select(0, index.as_subclass(torch.Tensor)), None


# ============================================================================ pass-through


class InplaceAddReturnsIncoming(Function):
    """x += y in place with mark_dirty; backward returns the incoming gradient for both.
    naive needs_input_grad: a gradient returned for an input that needs none is "wasted work",
    but handing back the incoming gradient itself costs nothing."""

    SPEC = one_case(x={"shape": [5]}, y={"shape": [5]})

    @staticmethod
    def forward(ctx, x, y):
        ctx.mark_dirty(x)
        return x.add_(y)

    @staticmethod
    def backward(ctx, grad):
        return grad, grad


# ============================================================================ precision and linearity


class NearlyEqualDifference(Function):
    """a - b of nearly equal float32 inputs (mean 1e4, std 0.01): exact in float32 (Sterbenz).
    naive precision: a float64 reference on the unrounded inputs, or a tolerance scaled by
    max(1, |x|), blames input rounding on the formula."""

    SPEC = one_case(a={"shape": [20], "init": "normal", "mean": 1e4, "std": 0.01},
                    b={"shape": [20], "init": "normal", "mean": 1e4, "std": 0.01})

    @staticmethod
    def forward(ctx, a, b):
        return a - b

    @staticmethod
    def backward(ctx, grad):
        return grad, -grad if ctx.needs_input_grad[1] else None


class Float32BackwardArithmetic(Function):
    """Multiplies the incoming gradient in float32 inside a once-differentiable backward (a
    float32 kernel). naive gradcheck linearity: backward(c g) against c backward(g) at float64
    precision, with a scale c that is not a power of two, sees float32 round-off as
    non-linearity."""

    SPEC = one_case(x={"shape": [6]})

    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        return (grad.float() * 3).to(grad.dtype)


class SumOfMany(Function):
    """forward(ctx, *xs): the inputs are named xs[0], xs[1], ... naive inference: a *args
    forward has no required parameter, so nothing would be checked."""

    SPEC = one_case(xs=[{"shape": [3]}, {"shape": [3]}, {"shape": [3]}])

    @staticmethod
    def forward(ctx, *xs):
        ctx.count = len(xs)
        return torch.stack(xs).sum(0)

    @staticmethod
    def backward(ctx, grad):
        return tuple(grad for _ in range(ctx.count))


HARD = [obj for obj in list(globals().values())
        if isinstance(obj, type) and issubclass(obj, Function) and obj is not Function]
"""Every correct Function above, in definition order."""
