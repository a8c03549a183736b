"""A small rendering and simulation package: six Functions whose planted bugs
(``RAYKIT_BUGS=1``) hide behind inputs that make every gradient zero or trivial, or forward
non-finite: rays that all miss, values that are all clamped, a mask that selects nothing, a weight
of ones, self-loop edges (0/0 in forward), a loop that runs once."""
from raykit.geometry import EdgeDirections, RaySphere
from raykit.shading import MaskedMean, Saturate, WeightedBlend
from raykit.simulate import Integrate

__all__ = ["EdgeDirections", "Integrate", "MaskedMean", "RaySphere", "Saturate",
           "WeightedBlend"]
