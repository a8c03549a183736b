"""sigkit: differentiable audio building blocks (filters, framing and spectra, dynamics, a
fractional delay), each with a hand-written backward. ``SIGKIT_BUGS=1`` plants six bugs in
backward code: a ``.view`` on the incoming gradient, an overlap-add that overwrites, a feedback
path dropped, a multichannel branch, a batch summed too early, a drive forgotten."""
from sigkit.delay import fractional_delay
from sigkit.dynamics import GainMix, RmsEnvelope, SoftClip
from sigkit.filters import CombReverb, OnePole, PreEmphasis
from sigkit.spectral import Filterbank, FilterbankMatmul, Frame, StftMag

__all__ = ["CombReverb", "Filterbank", "FilterbankMatmul", "Frame", "GainMix", "OnePole",
           "PreEmphasis", "RmsEnvelope", "SoftClip", "StftMag", "fractional_delay"]
