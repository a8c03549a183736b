"""Targets and factories for the gradverify specs of torch's OpInfo databases
(torch.testing._internal.autograd_function_db, custom_op_db, hop_db).

Each wrapper reproduces an OpInfo whose ``op`` (or ``gradcheck_wrapper``) is a lambda; each
factory reproduces a ``sample_inputs_func`` whose inputs need structure (indices, block masks).
Factories take ``generator`` and ``dtype`` (float64 for the gradient checks) as gradverify passes
them, and draw like ``make_tensor`` does: uniform in [low, high), default [-9, 9).
"""
from __future__ import annotations

import torch
from torch.testing._internal import autograd_function_db as afdb


def _uniform(shape, generator, dtype, low=-9.0, high=9.0, requires_grad=True):
    t = torch.rand(shape, generator=generator, dtype=dtype) * (high - low) + low
    return t.requires_grad_(requires_grad)


# --- autograd_function_db -------------------------------------------------------------------

def numpy_exp_mark_dirty(x):
    """NumpyExpMarkDirtyAutogradFunction: op=lambda x: NumpyExp_.apply(x.clone())."""
    return afdb.NumpyExp_.apply(x.clone())


def numpy_cube_not_composable(x):
    """NumpyCubeNotComposableAutogradFunction: op=lambda x: NumpyCubeNotComposable.apply(x)[0]."""
    return afdb.NumpyCubeNotComposable.apply(x)[0]


def numpy_take_inputs(generator, dtype):
    """sample_inputs_numpy_take: x = make_tensor(3, 5); ind, ind_inv from NumpySort(x, 1)."""
    x = _uniform((3, 5), generator, dtype)
    with torch.no_grad():
        _, ind, ind_inv = afdb.NumpySort.apply(x, 1)
    return {"x": x, "ind": ind, "ind_inv": ind_inv, "dim": 1}


def take_gen_vmap_inputs(generator, dtype):
    """The same inputs, for TakeGenVmap (not an OpInfo of its own: SortGenVmap's backward)."""
    return numpy_take_inputs(generator, dtype)


# --- custom_op_db ---------------------------------------------------------------------------

def numpy_nonzero_inputs(generator, dtype):
    """sample_inputs_numpy_nonzero: make_tensor(10, low=0.9, high=2) times a 0/1 mask."""
    x = _uniform((10,), generator, dtype, 0.9, 2.0, requires_grad=False)
    mask = torch.randint(0, 2, (10,), generator=generator)
    return {"x": (x * mask).requires_grad_()}


def numpy_nms_inputs(generator, dtype):
    """sample_inputs_numpy_nms: 64 boxes (x, y in [0, 28), w, h in [0, 4)), scores in [0, 1),
    an iou_threshold in [0, 1) (a Python float)."""
    n = 64
    xs = _uniform((n,), generator, dtype, 0, 28, requires_grad=False)
    dx = _uniform((n,), generator, dtype, 0, 4, requires_grad=False)
    ys = _uniform((n,), generator, dtype, 0, 28, requires_grad=False)
    dy = _uniform((n,), generator, dtype, 0, 4, requires_grad=False)
    boxes = torch.stack([xs, ys, xs + dx, ys + dy], dim=1).requires_grad_()
    scores = _uniform((n,), generator, dtype, 0, 1)
    iou = float(torch.rand((), generator=generator, dtype=torch.float64))
    return {"boxes": boxes, "scores": scores, "iou_threshold": iou}


def numpy_split_copy_with_int_first(x, splits, dim):
    """NumpySplitCopyWithIntCustomOp's gradcheck_wrapper: op(*args)[0], the list of pieces."""
    return tuple(torch.ops._torch_testing.numpy_split_copy_with_int(x, splits, dim)[0])


# --- hop_db ---------------------------------------------------------------------------------

def _score_mod_plus_h(score, b, h, m, n):
    return score + h


def _score_mod_identity(score, b, h, m, n):
    return score


def _mask_mod_causal(b, h, m, n):
    return m >= n


def flex_attention_inputs(generator, dtype):
    """sample_inputs_flex_attention: q, k, v = make_tensor(2, 2, 128, 8, low=0.1, high=2),
    score_mod = score + h, an empty block mask. (The OpInfo is CUDA-only.)"""
    from torch.nn.attention.flex_attention import _create_empty_block_mask

    q, k, v = (_uniform((2, 2, 128, 8), generator, dtype, 0.1, 2.0) for _ in range(3))
    return {"query": q, "key": k, "value": v, "score_mod": _score_mod_plus_h,
            "block_mask": _create_empty_block_mask(q, k)}


def _flex_backward_inputs(generator, dtype, mask_mod):
    from torch._higher_order_ops.flex_attention import flex_attention as flex_attention_hop
    from torch.nn.attention.flex_attention import create_block_mask

    q, k, v = (_uniform((2, 2, 128, 16), generator, dtype, 0.1, 2.0, requires_grad=False)
               for _ in range(3))
    block_mask = create_block_mask(mask_mod, B=2, H=2, Q_LEN=128, KV_LEN=128, device="cpu")
    scale = 1.0 / q.size(-1) ** 0.5
    out, logsumexp, _ = flex_attention_hop(q, k, v, _score_mod_identity, block_mask.as_tuple(),
                                           scale, {})
    grad_out = torch.rand(out.shape, generator=generator, dtype=out.dtype)
    # The OpInfo's sample has nothing requiring grad; a factory cannot say so (gradverify then
    # makes every floating tensor differentiable), so only query requires grad here.
    q.requires_grad_()
    return [q, k, v, out.detach(), logsumexp.detach(), grad_out, None, _score_mod_identity,
            None, block_mask.as_tuple(), scale, {}, (), ()]


def flex_attention_backward_inputs(generator, dtype):
    """sample_inputs_flex_attention_backward: q, k, v = make_tensor(2, 2, 128, 16, low=0.1,
    high=2, requires_grad=False), a causal block mask, out/logsumexp from the flex_attention
    HOP, grad_out = rand_like(out), then the OpInfo's positional arguments. (CUDA-only.)"""
    return _flex_backward_inputs(generator, dtype, _mask_mod_causal)


_MASK_OFFSET = None


def _mask_mod_offset(b, h, m, n):
    return m + _MASK_OFFSET >= n


def flex_attention_backward_explicit_buffers_inputs(generator, dtype):
    """sample_inputs_flex_attention_backward_explicit_buffers: the same with a mask_mod that
    closes over a tensor (mask_offset = 128, int32). (CUDA-only.)"""
    global _MASK_OFFSET
    _MASK_OFFSET = torch.full((), 128, dtype=torch.int32)
    return _flex_backward_inputs(generator, dtype, _mask_mod_offset)


# Flat views of targets that take or return lists of tensors (xs as inputs of their own, the list
# output as a tuple): gradverify spreads such lists itself, and must give the same verdict on both.

def numpy_split_copy_tuple(x, splits, dim):
    """_torch_testing::numpy_split_copy's pieces as a tuple."""
    import torch.testing._internal.custom_op_db
    return tuple(torch.ops._torch_testing.numpy_split_copy(x, splits, dim))


def _flat_map(fn):
    def flat(x0, x1, y0, y1):
        return tuple(fn([x0, x1], y0, y1))
    flat.__name__ = flat.__qualname__ = fn.__name__ + "_flat"
    flat.__doc__ = f"hop_db.{fn.__name__}([x0, x1], y0, y1), its list output as a tuple."
    return flat


def _hop():
    from torch.testing._internal import hop_db
    return hop_db


simple_map_flat = _flat_map(_hop().simple_map)
nested_map_flat = _flat_map(_hop().nested_map)
triple_nested_map_flat = _flat_map(_hop().triple_nested_map)
