"""A newcomer's package of fused kernels: 13 targets in 8 submodules, re-exported
here as a user's package does. FASTOPS_BUGS=1 plants five bugs, each seen only where a spec keeps
the meaning of its values (a weight that is not ones, a sequence longer than its block, an 8-bit
quantizer checked at 8 bits, fewer experts chosen than there are, more tokens than a chunk)."""
from fastops.attention import OnlineSoftmaxAttention
from fastops.losses import ChunkedCrossEntropy
from fastops.mlp import RecomputeMLP
from fastops.modules import ScaledResidual, softclip
from fastops.norms import FusedLayerNorm
from fastops.ops import add_rms_norm, scaled_gelu, swiglu
from fastops.quant import StraightThroughQuantize
from fastops.rotary import RotaryInplace
from fastops.router import TopKRouter
from fastops.segment import SegmentSum

__all__ = ["ChunkedCrossEntropy", "FusedLayerNorm", "OnlineSoftmaxAttention", "RecomputeMLP",
           "RotaryInplace", "ScaledResidual", "SegmentSum", "StraightThroughQuantize",
           "TopKRouter", "add_rms_norm", "scaled_gelu", "softclip", "swiglu"]
