"""Mutation score (``--mutate``): mutants of a target's backward run against its spec's cases,
to measure how much the spec proves. ``plan`` makes a target's mutants (``operators`` over
backward's source, ``values`` for every kind), ``install`` puts one in place, ``engine`` runs a
case against them (``jacobians``: the finite differences shared by a case's mutants), and
``merge`` turns the cases' verdicts into a ``MutationScore`` with each survivor's reason.

``gradverify.run.scoring.score(target, spec, options)`` does it all in this process, for code
(``init``, ``record``) that wants a spec's strength without a run. (Not to be confused with
the ``mutation`` check, which is about in-place writes.)"""
