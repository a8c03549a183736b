"""Level and saturation: a tanh soft clipper, a wet/dry mix with make-up gain, an RMS envelope."""
import torch

from sigkit._bugs import PLANTED


class SoftClip(torch.autograd.Function):
    """``tanh(drive * x)``: a soft clipper whose ``drive`` sets how hard it saturates."""

    @staticmethod
    def forward(x, drive: float = 1.0):
        return torch.tanh(drive * x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, drive = inputs
        ctx.save_for_backward(output)
        ctx.drive = drive

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        if PLANTED:  # planted: the drive's factor forgotten (hidden at the default of 1)
            return grad * (1 - y * y), None
        return grad * ctx.drive * (1 - y * y), None


class GainMix(torch.autograd.Function):
    """``gain * ((1 - mix) * dry + mix * wet)``: ``mix`` a tensor broadcast against the signals
    (a 0-dim wet/dry amount, or one per example ``[B, 1]``)."""

    @staticmethod
    def forward(dry, wet, mix, gain: float = 1.0):
        return gain * ((1 - mix) * dry + mix * wet)

    @staticmethod
    def setup_context(ctx, inputs, output):
        dry, wet, mix, gain = inputs
        ctx.save_for_backward(dry, wet, mix)
        ctx.gain = gain

    @staticmethod
    def backward(ctx, grad):
        dry, wet, mix = ctx.saved_tensors
        g = grad * ctx.gain
        d_mix = (g * (wet - dry)).sum_to_size(mix.shape)
        return g * (1 - mix), g * mix, d_mix, None


class RmsEnvelope(torch.autograd.Function):
    """The RMS level of each ``frame``-sample block of ``x [B, T]`` -> ``[B, T // frame]``.
    Multichannel ``x [B, C, T]`` gets one linked envelope (the RMS over channels and block), as
    a stereo compressor's detector does."""

    @staticmethod
    def forward(ctx, x, frame: int, eps: float = 1e-8):
        n = x.shape[-1] // frame
        xf = x[..., :n * frame].reshape(*x.shape[:-1], n, frame)
        if x.dim() == 3:
            ms = (xf * xf).mean(dim=(1, 3))
        else:
            ms = (xf * xf).mean(dim=-1)
        rms = torch.sqrt(ms + eps)
        ctx.save_for_backward(x, rms)
        ctx.frame = frame
        return rms

    @staticmethod
    def backward(ctx, grad):
        x, rms = ctx.saved_tensors
        frame = ctx.frame
        n = rms.shape[-1]
        xf = x[..., :n * frame].reshape(*x.shape[:-1], n, frame)
        if x.dim() == 3:
            C = x.shape[1]
            scale = frame if PLANTED else C * frame  # planted: the mean over channels forgotten
            dxf = (grad / (scale * rms))[:, None, :, None] * xf
        else:
            dxf = (grad / (frame * rms))[..., None] * xf
        dx = torch.zeros_like(x)
        dx[..., :n * frame] = dxf.reshape(*x.shape[:-1], n * frame)
        return dx, None, None
