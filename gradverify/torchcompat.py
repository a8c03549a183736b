"""Every private torch API gradverify uses, each behind a feature test with a fallback.

gradverify supports torch 2.1 to the newest release (custom ops from 2.4). What changes between
those releases is private: ``torch._C``, ``torch._library``, ``torch._ops``, ``torch._dynamo``,
``torch._functorch``. Nothing else in gradverify touches them (``tests/architecture_test.py``
enforces it); each function here asks torch whether the thing exists or behaves as needed
(never a version string) and says what happens when it does not. Nothing here imports torch at
module level: ``--help`` and spec validation never pay for it. Long because every such seam
lives here, grouped in sections, so that a new torch release is checked in one file.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gradverify.specmodel import version_tuple

CUSTOM_OPS_TORCH = (2, 4)
"""The first torch with ``torch.library.custom_op``, ``register_fake`` and opcheck."""


def _torch() -> Any:
    import torch

    return torch


def version() -> str:
    """torch's version, without a local build tag (``2.1.2``, not ``2.1.2+cu121``)."""
    return str(_torch().__version__).split("+")[0]


def too_old(required: tuple[int, ...]) -> str | None:
    """What is missing when this torch is older than ``required`` (``(2, 4)``): "torch >= 2.4
    (this is torch 2.1.2)", to follow "needs"; None when it is not older."""
    if version_tuple(version()) >= required:
        return None
    return f"torch >= {'.'.join(map(str, required))} (this is torch {version()})"


def missing_api_note(exc: BaseException) -> str:
    """"; custom ops ... need torch >= 2.4 (this is torch 2.1.2)" when ``exc`` is a user
    module's import failing on ``torch.library.custom_op`` and the like on a torch that lacks
    them (the code is fine, the torch is too old for it); else ""."""
    if isinstance(exc, AttributeError) and "torch.library" in str(exc) \
            and not custom_ops_supported():
        return ("; custom ops (torch.library.custom_op, register_fake, opcheck) need "
                f"{too_old(CUSTOM_OPS_TORCH)}")
    return ""


def torch_dir() -> str:
    """The folder torch is installed in: frames there are torch's, not the user's."""
    return str(Path(_torch().__file__).resolve().parent)


# ----------------------------------------------------------------------------- custom ops


def custom_ops_supported() -> bool:
    """Whether this torch has custom ops as gradverify checks them (``torch.library.custom_op``,
    ``torch.library.opcheck``): torch >= 2.4."""
    torch = _torch()
    return all(hasattr(torch.library, name) for name in ("custom_op", "opcheck")) \
        and custom_op_def_type() is not None


def custom_op_def_type() -> Any:
    """The class of ``@torch.library.custom_op`` objects, or None where torch has none."""
    try:
        from torch._library.custom_ops import CustomOpDef
    except ImportError:
        return None
    return CustomOpDef


def custom_op_def(qualified_name: str) -> Any:
    """The ``CustomOpDef`` registered under ``ns::op``, or None (an op defined otherwise, or a
    torch without custom ops)."""
    try:
        from torch._library.custom_ops import OPDEFS
    except ImportError:
        return None
    return OPDEFS.get(qualified_name)


def triton_op_function(opdef: Any) -> Any:
    """The user's function behind a ``torch.library.triton_op`` op (torch's own wrapper, the
    registered implementation, holds it in its closure); None for any other op."""
    wrapper = getattr(opdef, "_init_fn", None)
    if not str(getattr(wrapper, "__module__", "")).startswith("torch._library.triton"):
        return None
    found = [c.cell_contents for c in getattr(wrapper, "__closure__", None) or ()
             if "cell_contents" in dir(c) and inspect.isfunction(c.cell_contents)
             and not str(c.cell_contents.__module__).startswith("torch.")]
    return found[0] if found else None


def registered_autograd(generated: type) -> Any:
    """What holds the backward of an op whose autograd was registered by name
    (``torch.library.register_autograd("ns::op", backward)``, no ``CustomOpDef``): the object
    whose ``_backward_fn`` the autograd.Function torch generated (``generated``) reads at each
    call, found in its backward's closure; None where torch builds it otherwise."""
    backward = vars(generated).get("backward")
    function = getattr(backward, "__func__", backward)
    for cell in getattr(function, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if callable(getattr(value, "_backward_fn", None)):
            return value
    return None


def op_overload_types() -> tuple[Any, Any]:
    """(OpOverload, OpOverloadPacket): an op name's single overload and its packet."""
    torch = _torch()
    return torch._ops.OpOverload, torch._ops.OpOverloadPacket


def has_dispatch_kernel(qualified_name: str, key: str) -> bool:
    """Whether the op has a kernel registered for the dispatch key (``Autograd``,
    ``FuncTorchBatched``); False where torch cannot say."""
    probe = getattr(_torch()._C, "_dispatch_has_kernel_for_dispatch_key", None)
    if probe is None:
        return False
    try:
        return bool(probe(qualified_name, key))
    except RuntimeError:
        return False


def is_tensor_list_type(schema_type: Any) -> bool:
    """Whether a schema argument's type is ``Tensor[]`` or ``Tensor?[]``."""
    try:
        from torch._library.utils import is_tensorlist_like_type
    except ImportError:
        text = str(schema_type)
        return text in ("Tensor[]", "Tensor?[]", "List[Tensor]", "List[Optional[Tensor]]")
    return bool(is_tensorlist_like_type(schema_type))


def fake_kernel_source(qualified_name: str) -> str | None:
    """``file:line`` torch's registry recorded for an op's fake (abstract) kernel, read without
    adding an entry for the name; None where it has none or torch keeps no such registry."""
    try:
        from torch._library.simple_registry import singleton
    except ImportError:
        return None
    entry = getattr(singleton, "_data", {}).get(qualified_name)
    for field in ("fake_impl", "abstract_impl"):  # renamed in torch 2.4
        kernel = getattr(getattr(entry, field, None), "kernel", None)
        source = getattr(kernel, "source", None)
        if source:
            return str(source)
    return None


# ----------------------------------------------------------------------------- autograd


def undefined_grad() -> Callable[[Any], Any] | None:
    """A function that makes a tensor's gradient undefined (as an unused output's), or None."""
    maker = getattr(getattr(_torch()._C, "_functions", None), "UndefinedGrad", None)
    return None if maker is None else maker()


def setup_context_defined(setup_context: Any) -> bool:
    """Whether a Function class's ``setup_context`` is its own (not torch's placeholder)."""
    try:
        from torch.autograd.function import _is_setup_context_defined
    except ImportError:  # torch < 2.0 had no setup_context at all
        return False
    return bool(_is_setup_context_defined(setup_context))


@functools.cache
def function_machinery() -> frozenset[type]:
    """The classes torch defines for ``torch.autograd.Function`` itself: ``Function`` and its
    bases and mixins (``_SingleLevelFunction``, ``_C._FunctionBase``, ``FunctionCtx``...), and
    the abstract ``InplaceFunction`` and ``NestedIOFunction``. A class is torch's machinery by
    identity, never by its module's name: Functions that torch's own test databases define
    (``torch.testing._internal.autograd_function_db``) are Functions like any user's."""
    import inspect

    from torch.autograd import function

    found = {obj for obj in vars(function).values()
             if inspect.isclass(obj) and obj.__module__ == function.__name__}
    found |= set(function.Function.__mro__)
    return frozenset(found)


def torch_internal(cls: type) -> bool:
    """A Function class torch uses inside its own machinery (activation checkpointing, the
    higher-order ops cond, map, scan): defined in torch's own files, and not in its test
    databases (``torch.testing``), whose Functions stand for a user's."""
    import inspect

    try:
        file = str(Path(inspect.getfile(cls)).resolve())
    except (TypeError, OSError):
        return False
    base = torch_dir()
    return file.startswith(base) and not file.startswith(str(Path(base) / "testing"))


def builtin(name: str) -> Any:
    """torch's C implementation of ``torch.<name>`` (allclose, isclose, equal), or None."""
    functions = _torch()._C._VariableFunctions
    return getattr(functions, name, None)


class _HookMirror(threading.local):
    """The saved-tensor hooks pushed through ``torch._C._autograd`` since gradverify wrapped
    it, per thread (torch keeps its stack per thread too)."""

    def __init__(self) -> None:
        self.stack: list[tuple[Any, Any]] = []


_MIRROR = _HookMirror()
_MIRROR_LOCK = threading.Lock()


def watch_saved_tensor_hooks() -> None:
    """Before torch 2.8 the stack of default saved-tensor hooks cannot be read. Wrap its push
    and pop (``saved_tensors_hooks`` looks them up at each use) so that the hooks pushed from
    now on, by user code, can be. Call it before user code runs; hooks pushed before are not
    seen (a caller of ``verify()`` inside ``saved_tensors_hooks`` keeps them for the run)."""
    autograd = _torch()._C._autograd
    with _MIRROR_LOCK:
        if hasattr(autograd, "_top_saved_tensors_default_hooks") \
                or getattr(autograd, "_gradverify_watched", False):
            return
        push, pop = autograd._push_saved_tensors_default_hooks, \
            autograd._pop_saved_tensors_default_hooks

        def watched_push(pack: Any, unpack: Any) -> None:
            push(pack, unpack)
            _MIRROR.stack.append((pack, unpack))

        def watched_pop() -> None:
            pop()
            if _MIRROR.stack:
                _MIRROR.stack.pop()

        autograd._push_saved_tensors_default_hooks = watched_push
        autograd._pop_saved_tensors_default_hooks = watched_pop
        autograd._gradverify_watched = True


def top_saved_tensor_hooks() -> tuple[Any, Any] | None:
    """The innermost default saved-tensor hooks (pack, unpack) of this thread, or None."""
    autograd = _torch()._C._autograd
    top = getattr(autograd, "_top_saved_tensors_default_hooks", None)
    if top is not None:
        found = top(False)
        return None if found is None else (found[0], found[1])
    return _MIRROR.stack[-1] if _MIRROR.stack else None


def push_saved_tensor_hooks(pack: Any, unpack: Any) -> None:
    _torch()._C._autograd._push_saved_tensors_default_hooks(pack, unpack)


def pop_saved_tensor_hooks() -> None:
    _torch()._C._autograd._pop_saved_tensors_default_hooks()


# ----------------------------------------------------------------------------- torch-function modes


def take_function_modes() -> list[Any]:
    """Pop the caller's torch-function modes (``with torch.device("meta")``, a
    ``TorchFunctionMode`` it entered) and return them bottom first, to be put back with
    ``put_function_modes``: a verification runs without them. A default device set with
    ``torch.set_default_device`` is a mode too, at the bottom; it stays, and the default-device
    setting (``default_device_accessors``) clears it for the run and sets it back."""
    try:
        from torch.overrides import TorchFunctionMode, _get_current_function_mode_stack, _pop_mode
    except ImportError:  # an older torch without these: modes are left as they are
        return []
    # the global default device's mode: the context itself (torch < 2.3), or held by a
    # thread-local (newer torch)
    held = getattr(_torch(), "_GLOBAL_DEVICE_CONTEXT", None)
    context = held if isinstance(held, TorchFunctionMode) else \
        getattr(held, "device_context", None)
    taken = []
    while (stack := _get_current_function_mode_stack()) and stack[-1] is not context:
        if context is not None and len(stack) == 1:
            break  # a `with torch.device(...)` that holds the global one as its previous mode
        taken.append(_pop_mode())
    return taken[::-1]


def put_function_modes(modes: list[Any]) -> None:
    """Push back what ``take_function_modes`` took, bottom first."""
    if not modes:
        return
    from torch.overrides import _push_mode

    for mode in modes:
        _push_mode(mode)


# ----------------------------------------------------------------------------- the default device


def default_device_accessors() -> tuple[Callable[[], str], Callable[[str], None]] | None:
    """(get, set) of torch's default device as a string, or None where torch has none. Setting
    "cpu" clears it (``set_default_device(None)``): a set device installs a torch-function mode
    on every op. Before torch 2.3 there is no ``get_default_device``: the device mode's own
    record is read. Where ``get_default_device`` fails once cleared (torch 2.8), a cleared
    device reads as "cpu"."""
    torch = _torch()
    if not hasattr(torch, "set_default_device"):
        return None

    def get() -> str:
        if not hasattr(torch, "get_default_device"):  # torch < 2.3
            from torch.utils import _device

            current = getattr(_device, "CURRENT_DEVICE", None)
            return "cpu" if current is None else str(current)
        try:
            return str(torch.get_default_device())
        except AttributeError:  # torch 2.8, after set_default_device(None)
            return "cpu"

    def set_(value: str) -> None:
        torch.set_default_device(None if value == "cpu" else value)

    return get, set_


# ----------------------------------------------------------------------------- the compiler


def is_compiling() -> Callable[[], bool]:
    """torch's "is torch.compile tracing this call?" (``torch.compiler.is_compiling`` from
    torch 2.3; before it, ``torch._utils.is_compiling``)."""
    torch = _torch()
    found = getattr(torch.compiler, "is_compiling", None)
    if found is None:
        found = getattr(torch._utils, "is_compiling", None)
    return found if found is not None else (lambda: False)


def dynamo_reset() -> None:
    """Forget what torch.compile compiled (its caches key on the code object)."""
    _torch()._dynamo.reset()


def is_graph_break(exc: BaseException) -> bool:
    """Whether torch.compile(fullgraph=True) raised because it cannot trace (Dynamo's
    ``Unsupported``, or its ``UserError`` for a guard on a data-dependent value)."""
    return type(exc).__module__ == "torch._dynamo.exc" and \
        type(exc).__name__ in ("Unsupported", "UserError")


def aot_without_cse() -> contextlib.AbstractContextManager[Any]:
    """AOTAutograd's config with its common-subexpression pass off, where it has one."""
    try:
        from torch._functorch import config
    except ImportError:
        return contextlib.nullcontext()
    return config.patch(cse=False) if hasattr(config, "cse") else contextlib.nullcontext()


def inductor_in_process() -> contextlib.AbstractContextManager[Any]:
    """inductor compiling in the calling thread (``compile_threads = 1``), where its config
    has the key: on a cold cache it would otherwise start a pool of compile threads, running
    Python's own executor code, that outlives the case (GV015, which counts torch's own code
    only as torch's)."""
    try:
        from torch._inductor import config
    except ImportError:
        return contextlib.nullcontext()
    return (config.patch(compile_threads=1) if hasattr(config, "compile_threads")
            else contextlib.nullcontext())


def compiled_graph_count() -> int:
    """Graphs torch.compile has compiled in this process so far (0 if it was never used)."""
    dynamo = sys.modules.get("torch._dynamo.utils")
    if dynamo is None:
        return 0
    try:
        return int(dynamo.counters["stats"]["unique_graphs"])
    except Exception:  # noqa: BLE001 -- a counter torch renamed reads as none
        return 0


# ----------------------------------------------------------------------------- placement


def dispatch_mode_base() -> type:
    """``TorchDispatchMode``, the base of a mode that sees every aten call (factory calls
    included, and backward's calls: the engine carries dispatch modes to its threads)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    return TorchDispatchMode


def function_mode_base() -> type:
    """``TorchFunctionMode``, the base of a mode that sees the calls of the ``torch`` namespace
    on its own thread, before they reach aten (``torch.tensor(data, device=...)`` included)."""
    from torch.overrides import TorchFunctionMode

    return TorchFunctionMode


def no_torch_function() -> Any:
    """The ``__torch_function__`` that turns a tensor subclass's function-level handling off, so
    only its ``__torch_dispatch__`` sees calls."""
    return _torch()._C._disabled_torch_function_impl


def wrapper_tensor(cls: type, real: Any, device: str) -> Any:
    """A tensor of subclass ``cls`` with ``real``'s shape, strides, dtype and grad flag that
    says it lives on ``device`` and has no storage of its own."""
    return _torch().Tensor._make_wrapper_subclass(
        cls, real.shape, strides=real.stride(), storage_offset=real.storage_offset(),
        dtype=real.dtype, layout=real.layout, device=device,
        requires_grad=real.requires_grad)


def index_ops() -> frozenset[str]:
    """The aten ops that take CPU index tensors with a device tensor (``x[cpu_index]``,
    ``x[cpu_index] = v``), by overload-packet name; their indices are their second
    argument."""
    return frozenset({"index", "index_put", "index_put_", "_index_put_impl_", "_unsafe_index",
                      "_unsafe_index_put"})


def host_argument_ops() -> frozenset[str]:
    """The aten ops that take integer CPU tensors (lengths) with device tensors on every
    device: packed sequences and CTC loss, by overload-packet name."""
    return frozenset({"_pack_padded_sequence", "_pad_packed_sequence", "ctc_loss", "_ctc_loss",
                      "_use_cudnn_ctc_loss", "_cudnn_ctc_loss"})


def any_device_kernel(op: Any) -> Any:
    """The Python function a ``torch.library.custom_op`` runs on every device (registered
    without ``device_types``), for ``op`` (an ``OpOverload``); None for an aten op, an op with
    a kernel of its own per device, or an op defined otherwise."""
    if op.namespace in ("aten", "prims", "prim"):
        return None
    opdef = custom_op_def(op._schema.name)
    kernels = getattr(opdef, "_backend_fns", None)
    if not isinstance(kernels, dict) or set(kernels) != {None}:
        return None
    return getattr(opdef, "_init_fn", None)
