"""checks/_tensors.py: every primitive on every tensor kind a Function may take, save or return."""
from __future__ import annotations

import warnings

import pytest
import torch

from gradverify.checks import _tensors as tk

warnings.filterwarnings("ignore", message="Sparse")


class Tagged(torch.Tensor):
    pass


class SortedIndex(torch.Tensor):
    """Like torch_geometric's EdgeIndex: every op but clone returns a plain tensor."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs or {})
        if func is torch.Tensor.clone or not isinstance(out, SortedIndex):
            return out
        return out.as_subclass(torch.Tensor)


def _coo():
    return torch.sparse_coo_tensor([[0, 1, 2], [2, 0, 1]], [1.0, -2.0, 3.0], (3, 3),
                                   dtype=torch.float64).coalesce()


KINDS = {
    "float": lambda: torch.randn(3, 4, dtype=torch.float64),
    "complex": lambda: torch.randn(5, dtype=torch.complex128),
    "int": lambda: torch.arange(6).reshape(2, 3),
    "bool": lambda: torch.tensor([True, False, True]),
    "0-dim": lambda: torch.tensor(2.5, dtype=torch.float64),
    "0-dim int": lambda: torch.tensor(3),
    "sparse_coo": _coo,
    "sparse_csr": lambda: _coo().to_sparse_csr(),
    "sparse_csc": lambda: _coo().to_sparse_csc(),
    "subclass": lambda: torch.randn(4, dtype=torch.float64).as_subclass(Tagged),
    "parameter": lambda: torch.nn.Parameter(torch.randn(4, dtype=torch.float64)),
    "index subclass": lambda: torch.arange(6).reshape(2, 3).as_subclass(SortedIndex),
    "transposed": lambda: torch.randn(3, 4, dtype=torch.float64).t(),
}
CHANGEABLE = list(KINDS)


@pytest.mark.parametrize("name", KINDS)
def test_copy_and_compare(name):
    t = KINDS[name]()
    snapshot = tk.Snapshot.of([t])
    assert snapshot.changed() == []
    assert tk.same_values(t, tk.copy(t))
    assert tk.storages(t) and all(n >= 0 for n in tk.storages(t).values())
    assert isinstance(tk.kind(t), str)


@pytest.mark.parametrize("name", CHANGEABLE)
def test_modify_in_place_changes_values_and_is_seen(name):
    t = KINDS[name]()
    snapshot = tk.Snapshot.of([t])
    before = tk.copy(t)
    tk.modify_in_place(t)
    assert not tk.same_values(t, before)
    assert snapshot.changed() == [0]


@pytest.mark.parametrize("t, why", [
    (torch.zeros(0, 3), "no elements"),
    (torch.randn(4).expand(3, 4), "share memory"),
    (torch.sparse_coo_tensor([[0], [1]], [1], (2, 2)), "no in-place arithmetic"),
])
def test_kinds_without_an_in_place_change_say_why(t, why):
    with pytest.raises(tk.Unsupported, match=why):
        tk.modify_in_place(t)


def test_nan_equals_nan_and_layouts_differ():
    a = torch.tensor([1.0, float("nan")])
    assert tk.same_values(a, a.clone())
    assert not tk.same_values(_coo(), _coo().to_dense())


def test_sparse_storages_count_indices_and_values():
    t = _coo()
    assert sum(tk.storages(t).values()) == 2 * 3 * 8 + 3 * 8
    assert not tk.same_storage(t, t)  # sparse tensors have no single storage to share


def test_same_storage_of_views():
    base = torch.randn(4, 3)
    assert tk.same_storage(base, base.t())
    assert not tk.same_storage(base, base.clone())
    assert tk.classify(base.view(12), {"x": base}, {}, same_shape=False) == ("input", "x")
    assert tk.classify(base.clone(), {"x": base}, {}) == ("intermediate", None)


def test_noncontiguous_skips_kinds_without_strides():
    assert tk.noncontiguous(_coo(), "transposed") is None
    out = tk.noncontiguous(torch.randn(3, 4), "strided")
    assert out is not None and not out.is_contiguous()


@pytest.mark.parametrize("make, message", [
    # a view created inside a custom Function, changed in place
    ("view", "is a view and its base"),
    # a leaf requiring grad, changed in place with grad mode on
    ("leaf", "leaf Variable that requires grad"),
])
def test_autograd_refusals_are_protection(make, message):
    class View(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad):
            return grad

    x = torch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match=message) as info:
        if make == "view":
            y = View.apply(x)
            with torch.no_grad():
                y.mul_(2)
            y.sum().backward()
        else:
            x.mul_(2)
    assert tk.is_protection(info.value)
    assert not tk.is_protection(RuntimeError("shape mismatch"))
    assert not tk.is_protection(ValueError("modified by an inplace operation"))


@pytest.mark.parametrize("name", KINDS)
def test_fresh_leaves_keep_the_class(name):
    from gradverify.case.inputs import fresh_leaf

    t = KINDS[name]()
    grad = t.is_floating_point() or t.is_complex()
    copy = fresh_leaf(t, grad)
    assert type(copy) is type(t) and copy.requires_grad == grad and copy.is_leaf
    assert tk.same_values(copy, t)


def _view_made_in_no_grad() -> None:
    x = torch.randn(3, requires_grad=True).clone()
    with torch.no_grad():
        view = x[:2]
    view.mul_(2)


def _view_made_in_inference_mode() -> None:
    base = torch.randn(3, requires_grad=True).clone()
    with torch.inference_mode():
        view = base.view(3)
    view.mul_(2)


def _inference_tensor_changed() -> None:
    with torch.inference_mode():
        made = torch.ones(3)
    made.mul_(2)


def _one_of_several_views() -> None:
    first, _ = torch.randn(2, 3, requires_grad=True).clone().unbind(0)
    first.mul_(2)


@pytest.mark.parametrize("refused", [_view_made_in_no_grad, _view_made_in_inference_mode,
                                     _inference_tensor_changed, _one_of_several_views],
                         ids=lambda f: f.__name__)
def test_every_in_place_refusal_of_autograd_is_protection(refused):
    """autograd refuses an in-place change with more than the version-counter message: each is
    protection, not a defect (a false GV213 before)."""
    with pytest.raises(RuntimeError) as info:
        refused()
    assert tk.is_protection(info.value), str(info.value)
