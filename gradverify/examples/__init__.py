"""Correct custom autograd Functions shipped with gradverify, each with a spec under specs/.

They double as templates: each shows one idiom done right (needs_input_grad, optional inputs,
non-tensor arguments, non-differentiable outputs, mark_dirty, setup_context with jvp and vmap).
"""
