"""The suite's own Triton kernels, correct and planted-buggy, run under Triton's interpreter.

Each kernel is wrapped in a ``torch.autograd.Function`` (or a ``torch.library.triton_op``) and
computes in float32 inside the kernel whatever dtype it is handed: it loads, converts to
float32, computes, and stores back in the output pointer's dtype. ``kernels`` holds the correct
ones, ``references`` their plain-PyTorch references, ``buggy`` copies with one planted bug each,
and ``check_zoo`` a standalone script that shows the correct kernels agree with the references
to float32 accuracy and every planted bug shows at some size.

Set ``TRITON_INTERPRET=1`` in the environment before triton is imported so the kernels run on
CPU tensors, e.g. ``TRITON_INTERPRET=1 python tests/triton_zoo/check_zoo.py``.
"""
