"""Correct Functions on inputs that naive checks mishandle: sparse tensors, tensor subclasses,
factory-made arguments.

Each must pass every check (no single check is concerned).
"""
from __future__ import annotations

import torch
from torch.autograd import Function

from zoo import factory_case

# ============================================================================ correct


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


class QuantWeight(torch.Tensor):
    """A frozen weight kept in bfloat16 (as quantization libraries keep theirs): dtype
    conversions hand it back unchanged; the kernel dequantizes it itself."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.Tensor.to, torch.Tensor.double, torch.Tensor.float):
            return args[0]
        return super().__torch_function__(func, types, args, kwargs or {})


def make_quantized_weight(generator, dtype):
    x = torch.randn(2, 3, generator=generator, dtype=dtype)
    weight = torch.randn(3, generator=generator).to(torch.bfloat16).as_subclass(QuantWeight)
    return x.requires_grad_(), weight


class QuantizedScale(Function):
    """x * a frozen bfloat16 weight that cannot become float64. naive: a factory that takes
    dtype and returns another dtype is refused (GV006); bare gradcheck passes. The weight is
    a constant of the case: verified around, with a note (GV128)."""

    SPEC = factory_case("make_quantized_weight")

    @staticmethod
    def forward(ctx, x, weight):
        scale = weight.as_subclass(torch.Tensor).to(x.dtype)
        ctx.save_for_backward(scale)
        return x * scale

    @staticmethod
    def backward(ctx, grad):
        (scale,) = ctx.saved_tensors
        return grad * scale, None


class DequantizingWeight(torch.Tensor):
    """A frozen weight kept in bfloat16 with a per-row scale set on the instance (as
    quantization libraries keep theirs): ``to`` dequantizes it into a plain tensor, which has
    no scale, so the kernel cannot use the converted value."""

    @staticmethod
    def __new__(cls, data, scale):
        weight = torch.Tensor._make_subclass(cls, data, False)
        weight.scale = scale
        return weight

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs or {})
        source = next((a for a in args if isinstance(a, DequantizingWeight)), None)
        if isinstance(out, DequantizingWeight) and source is not None \
                and "scale" not in out.__dict__:
            out.scale = source.scale
        return out

    def to(self, *args, **kwargs):
        plain = self.as_subclass(torch.Tensor) * self.scale
        return torch.Tensor.to(plain, *args, **kwargs)


def make_dequantizing_weight(generator, dtype):
    x = torch.randn(3, 4, generator=generator, dtype=dtype, requires_grad=True)
    data = torch.randn(5, 4, generator=generator).to(torch.bfloat16)
    scale = (torch.rand(5, 1, generator=generator) + 0.5).to(torch.bfloat16)
    return {"x": x, "weight": DequantizingWeight(data, scale)}


class QuantizedLinear(Function):
    """x @ w.T with a frozen quantized weight from a factory that takes ``dtype``; converting
    the weight to float64 succeeds but loses its type (a plain tensor, no scale). naive: "it
    converts, so the factory disobeyed dtype" refuses it (GV006); bare gradcheck passes. The
    weight is a constant of the case (GV128), kept as it is in every check."""

    SPEC = factory_case("make_dequantizing_weight")

    @staticmethod
    def forward(ctx, x, weight):
        w = (weight.as_subclass(torch.Tensor) * weight.scale).to(x.dtype)
        ctx.save_for_backward(w)
        return x @ w.t()

    @staticmethod
    def backward(ctx, grad):
        (w,) = ctx.saved_tensors
        return grad @ w, None


def make_quantized_weight_unmarked(generator, dtype):
    x, weight = make_quantized_weight(generator, dtype)
    return x.detach(), weight


class QuantizedScaleUnmarked(Function):
    """QuantizedScale whose factory marks nothing as requiring grad. naive: "users forget
    requires_grad, so every floating tensor is differentiable" makes the constant one too."""

    SPEC = factory_case("make_quantized_weight_unmarked")
    forward = QuantizedScale.forward
    backward = QuantizedScale.backward


class BlockQuantWeight(torch.Tensor):
    """A frozen weight quantized in blocks, as torchao's NF4Tensor keeps one: a wrapper
    subclass whose own dispatch runs what a linear kernel needs (detach, dequantizing ``to``
    a dtype, metadata) and nothing else: no indexing, no permute, no in-place arithmetic, and
    a clone that refuses (NF4's re-quantizes, and raises for block sizes it was not made
    with)."""

    @staticmethod
    def __new__(cls, codes, scale, dtype):
        return torch.Tensor._make_wrapper_subclass(cls, codes.shape, dtype=dtype,
                                                   device=codes.device, requires_grad=False)

    def __init__(self, codes, scale, dtype):
        self.codes, self.scale = codes, scale

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        weight, kwargs = args[0], kwargs or {}
        if func is torch.ops.aten.detach.default:
            return BlockQuantWeight(weight.codes, weight.scale, weight.dtype)
        if func is torch.ops.aten._to_copy.default:
            dequantized = weight.codes.to(torch.float32) * weight.scale
            return dequantized.to(kwargs.get("dtype") or weight.dtype)
        raise NotImplementedError(f"BlockQuantWeight dispatch: attempting to run {func}")


def make_block_quant_weight(generator, dtype):
    x = torch.randn(3, 8, generator=generator, dtype=dtype, requires_grad=True)
    codes = torch.randint(-7, 8, (5, 8), generator=generator, dtype=torch.int8)
    scale = torch.rand(5, 1, generator=generator) + 0.5
    return {"x": x, "weight": BlockQuantWeight(codes, scale, torch.bfloat16)}


class BlockQuantLinear(Function):
    """x @ w.T with a frozen block-quantized weight (torchao's LinearNF4 on an NF4Tensor):
    forward dequantizes it to x's dtype. naive checks: a constant input is read entry by
    entry, laid out non-contiguously, cloned, and written in place to see whether backward
    protects it; each of those raises in the subclass's own dispatch, which is gradverify's
    work failing, not the Function. Bare gradcheck on x passes."""

    SPEC = factory_case("make_block_quant_weight")

    @staticmethod
    def forward(ctx, x, weight):
        w = weight.to(x.dtype)
        ctx.save_for_backward(w)
        return x @ w.t()

    backward = QuantizedLinear.backward
