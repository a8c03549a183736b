"""One module per check: its ``CHECK`` (name, default, options, ``run``) and its ``CODES``.

The helpers they share are the private modules: ``_calls`` (applying a Function, backward
calls), ``_jacobian`` (Jacobian rows and columns, sampling, the diagnosis of mismatches),
``_compare`` (comparing gradients and runs) and ``_tensors`` (tensor-kind-aware primitives). The
registry that lists the checks is ``gradverify.registry``, outside this package, so that importing
a helper never imports every check.
"""
