"""A spec's case turned into what a check runs: the case matched to forward's parameters
(``binding``), its concrete, seeded arguments (``inputs``) and their dtype conversions
(``convert``), what a check's ``run`` gets (``context``), and the spec of a target no spec file
names (``infer``). Below the checks, above the targets and the spec model; imports nothing
here.
"""
