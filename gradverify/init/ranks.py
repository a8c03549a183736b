"""The rank forward's source gives a parameter by how it uses it, read with ``ast``: a matrix
(``x @ W.T``, ``u.T @ x``, ``torch.mm``, ``F.linear``'s weight), a batch of matrices
(``torch.bmm``), the operands of ``einsum`` (one dim per letter of its subscripts), the dims a
reduction names (``sum(dim=(0, 2))``: at least three), the indices of a subscript
(``x[:, 0]``: at least two), a flattening of leading dims (``x.reshape(-1, W)``: two of them at
least, so that the flattening merges some). A local that only renames a parameter (``x = x0``, then
``x = x + dt * f(x)`` in a loop) counts as that parameter (``aliases``)."""
from __future__ import annotations

import ast
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gradverify.init.source import Hints

_TRANSPOSED = {"T": 2, "mT": 2, "H": 2, "mH": 2}
"""``x.T`` (deprecated on any rank but 2, a matrix), ``x.mT`` (at least a matrix)."""
_MATRIX_CALLS = {"mm": (2, 2), "bmm": (3, 3), "baddbmm": (0, 3, 3), "addmm": (0, 2, 2)}
"""torch's functions (or methods, less the first) whose operands have these exact ranks (0:
any, a bias that broadcasts)."""
_SAME_RANK = {"clone", "detach", "contiguous", "float", "double", "to", "type_as",
              "requires_grad_", "detach_"}
"""Methods whose result has their tensor's rank: ``x = x0.clone()`` renames x0."""
_REDUCTIONS = {"sum", "mean", "amax", "amin", "prod", "std", "var", "norm", "logsumexp",
               "softmax", "log_softmax", "cumsum", "cumprod", "flip", "squeeze", "unsqueeze",
               "argmax", "argmin", "max", "min", "all", "any", "nansum", "count_nonzero"}
"""Methods whose first argument (or ``dim=``) names dims of their tensor."""


def aliases(tree: ast.AST, params: set[str]) -> dict[str, str]:
    """Locals that only rename a parameter: first bound to it (or to a copy of it) and
    afterwards only to elementwise arithmetic on themselves. Each maps to the parameter."""
    bound: dict[str, list[ast.AST]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            bound.setdefault(node.targets[0].id, []).append(node.value)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            bound.setdefault(node.target.id, []).append(node)
    found = {}
    for local, values in bound.items():
        if local in params:
            continue
        origin = _renamed(values[0], params)
        if origin and all(_keeps_rank(v, local) for v in values[1:]):
            found[local] = origin
    return found


def _renamed(node: ast.AST, params: set[str]) -> str:
    """The parameter a value is, or a same-rank copy of (``x0``, ``x0.clone()``), else ""."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr in _SAME_RANK:
        node = node.func.value
    return node.id if isinstance(node, ast.Name) and node.id in params else ""


def _keeps_rank(node: ast.AST, local: str) -> bool:
    """``x = x + dt * f(x)``, ``x -= g``, ``x = x.clone()``: the local keeps its rank."""
    if isinstance(node, ast.AugAssign):
        return isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div))
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult,
                                                            ast.Div)):
        return _renamed(node.left, {local}) == local
    return _renamed(node, {local}) == local


def saved_as(forward: ast.AST, backward: ast.AST) -> dict[str, str]:
    """The names backward gives forward's saved parameters: ``ctx.save_for_backward(spec, w)``
    in forward and ``s, weight = ctx.saved_tensors`` in backward map ``s`` to ``spec`` and
    ``weight`` to ``w`` (up to a starred name, whose count is unknown)."""
    saved: list[str] = []
    for node in ast.walk(forward):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "save_for_backward":
            saved = [_name(a) if not isinstance(a, ast.Starred) else "*" for a in node.args]
            break
    found: dict[str, str] = {}
    for node in ast.walk(backward):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Tuple) \
                and isinstance(node.value, ast.Attribute) and node.value.attr == "saved_tensors":
            for target, param in zip(node.targets[0].elts, saved):
                if isinstance(target, ast.Starred) or param == "*":
                    break
                if _name(target) and param:
                    found[_name(target)] = param
    return found


def read_backward(forward: ast.AST, backward: ast.AST, hints: dict[str, Hints]) -> None:
    """What backward (``backward``) does with the parameters of forward (``forward``) it was
    saved (``saved_as``): ``spec, w = ctx.saved_tensors`` then ``einsum("bfn,bfk->nk", g,
    spec)`` makes spec of rank 3."""
    saved = {local: hints[param] for local, param in saved_as(forward, backward).items()
             if param in hints}
    for node in ast.walk(backward):
        read_ranks(node, saved)


def read_ranks(node: ast.AST, hints: dict[str, Hints]) -> None:
    """What one node says of the ranks of the parameters (and their aliases) in ``hints``."""
    if isinstance(node, ast.Attribute) and node.attr in _TRANSPOSED \
            and _name(node.value) in hints:
        hint = hints[_name(node.value)]
        hint.matrix = hint.tensor = True
        if node.attr in ("T", "H"):
            _exactly(hint, 2)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
        for side in (node.left, node.right):
            owner = _transposed_name(side)
            if owner in hints:
                hints[owner].matrix = hints[owner].tensor = True
    if isinstance(node, ast.Call):
        _call_ranks(node, hints)
    if isinstance(node, ast.Subscript) and _name(node.value) in hints:
        _subscript_rank(node, hints[_name(node.value)])
    if isinstance(node, ast.Compare) and len(node.ops) == 1 \
            and isinstance(node.ops[0], (ast.Eq, ast.NotEq)) \
            and isinstance(node.comparators[0], ast.Constant) \
            and type(node.comparators[0].value) is int and _rank_of(node.left) in hints:
        branches = hints[_rank_of(node.left)].branches
        if node.comparators[0].value not in branches:
            branches.append(node.comparators[0].value)


def _rank_of(node: ast.AST) -> str:
    """The parameter whose rank ``node`` reads (``x.dim()``, ``x.ndim``, ``len(x.shape)``),
    else ""."""
    if isinstance(node, ast.Call) and not node.args and isinstance(node.func, ast.Attribute) \
            and node.func.attr in ("dim", "ndimension"):
        return _name(node.func.value)
    if isinstance(node, ast.Attribute) and node.attr == "ndim":
        return _name(node.value)
    if isinstance(node, ast.Call) and _name(node.func) == "len" and len(node.args) == 1 \
            and isinstance(node.args[0], ast.Attribute) and node.args[0].attr == "shape":
        return _name(node.args[0].value)
    return ""


def _transposed_name(node: ast.AST) -> str:
    """``W``, ``W.T``, ``W.t()``, ``W.transpose(0, 1)``: the name W."""
    if isinstance(node, ast.Attribute) and node.attr in _TRANSPOSED:
        return _name(node.value)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr in ("t", "transpose", "contiguous"):
        return _name(node.func.value)
    return _name(node)


def _call_ranks(node: ast.Call, hints: dict[str, Hints]) -> None:
    func = node.func
    attr = func.attr if isinstance(func, ast.Attribute) else _name(func)
    # a method of a parameter (``x.mm(W)``), else a function (``torch.mm``, ``F.linear``)
    owner = func.value if isinstance(func, ast.Attribute) else None
    method = owner is not None and _name(owner) in hints
    operands = [owner, *node.args] if owner is not None and method else list(node.args)
    if attr in _MATRIX_CALLS:
        for operand, rank in zip(operands, _MATRIX_CALLS[attr]):
            name = _transposed_name(operand)
            if rank and name in hints:
                hints[name].matrix = hints[name].tensor = True
                _exactly(hints[name], rank)
    elif attr == "matmul":
        for operand in operands[:2]:
            if _transposed_name(operand) in hints:
                hints[_transposed_name(operand)].matrix = True
    elif attr == "linear" and len(operands) >= 2:
        if _name(operands[1]) in hints:
            _exactly(hints[_name(operands[1])], 2)
            hints[_name(operands[1])].matrix = True
        if len(operands) > 2 and _name(operands[2]) in hints:
            _exactly(hints[_name(operands[2])], 1)
    elif attr == "einsum" and operands and isinstance(operands[0], ast.Constant) \
            and isinstance(operands[0].value, str):
        _einsum_ranks(operands[0].value, operands[1:], hints)
    elif attr in _REDUCTIONS and owner is not None and method:
        _dims_named(node, hints[_name(owner)])
    elif attr in ("reshape", "view") and owner is not None and method and len(node.args) == 2 \
            and _is_minus_one(node.args[0]):
        # ``x.reshape(-1, W)``: code for any number of leading dims, which a draft of two
        # exercises (one leading dim merges nothing: a ``.view`` there cannot fail)
        hint = hints[_name(owner)]
        hint.rank_at_least = max(hint.rank_at_least, 3)


def _is_minus_one(node: ast.AST) -> bool:
    return isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) \
        and isinstance(node.operand, ast.Constant) and node.operand.value == 1


def _einsum_ranks(equation: str, operands: list[ast.expr], hints: dict[str, Hints]) -> None:
    """``einsum("bij,bjk->bik", a, b)``: a and b of rank 3 (at least, with ``...``)."""
    inputs = equation.replace(" ", "").split("->")[0].split(",")
    for subscripts, operand in zip(inputs, operands):
        if _name(operand) not in hints:
            continue
        hint = hints[_name(operand)]
        letters = sum(c.isalpha() for c in subscripts)
        hint.tensor = True
        if "..." in subscripts:
            hint.rank_at_least = max(hint.rank_at_least, letters)
        else:
            _exactly(hint, letters)


def _dims_named(node: ast.Call, hint: Hints) -> None:
    """``x.sum(dim=(0, 2))``, ``x.mean(2)``: x has at least 3 dims."""
    given = [k.value for k in node.keywords if k.arg == "dim"] or node.args[:1]
    for value in given:
        items = value.elts if isinstance(value, (ast.Tuple, ast.List)) else [value]
        for item in items:
            if isinstance(item, ast.Constant) and isinstance(item.value, int) \
                    and not isinstance(item.value, bool) and item.value >= 0:
                hint.rank_at_least = max(hint.rank_at_least, item.value + 1)


def _subscript_rank(node: ast.Subscript, hint: Hints) -> None:
    """``x[:, t]``, ``x[0, :, 1:]``: each index of the tuple is one dim of x (at least), where
    none adds or spans dims (``None``, ``...``, ``*rest``); ``w[:, None]``, ``w[None, :, :]``:
    as many dims as full slices, exactly."""
    if not isinstance(node.slice, ast.Tuple):
        return
    elements = node.slice.elts
    new = [e for e in elements if isinstance(e, ast.Constant) and e.value is None]
    if len(elements) == 2 and isinstance(elements[0], ast.Constant) \
            and elements[0].value is Ellipsis and new == elements[1:]:
        hint.per_row = True  # ``delay[..., None]``: broadcast against rows of another
    if new and all(isinstance(e, ast.Slice) and e.lower is e.upper is e.step is None
                   for e in elements if e not in new):
        _exactly(hint, len(elements) - len(new))  # ``w[:, None]``: w is a vector
        return
    if any(isinstance(e, ast.Starred) or (isinstance(e, ast.Constant)
                                          and e.value in (None, Ellipsis)) for e in elements):
        return
    hint.rank_at_least = max(hint.rank_at_least, len(elements))


def _exactly(hint: Hints, rank: int) -> None:
    """A rank the code allows only: the first one read stands (unpacking outranks it)."""
    if hint.rank is None:
        hint.rank = rank


def _name(node: ast.AST) -> str:
    return node.id if isinstance(node, ast.Name) else ""
