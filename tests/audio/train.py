"""Fit a small effects chain (pre-emphasis, one-pole smoothing, comb reverb, wet/dry mix, soft
clipping, a per-example alignment delay) and a learnable filterbank to a target rendered with
hidden settings: a waveform loss, a log filterbank-spectrum loss and an RMS-envelope loss."""
import math

import torch
from sigkit import (
    CombReverb,
    Filterbank,
    Frame,
    GainMix,
    OnePole,
    PreEmphasis,
    RmsEnvelope,
    SoftClip,
    StftMag,
    fractional_delay,
)

torch.manual_seed(0)
B, T = 8, 256  # 8 clips of 256 samples
WIN, HOP = 32, 16  # 15 overlapping frames per clip
COMB_DELAY = 40  # samples; the comb's echoes repeat 6 times within a clip
ENV_BLOCK = 16

t = torch.arange(T) / 8000.0
freqs = 200 + 1800 * torch.rand(B, 3)
clips = (torch.sin(2 * math.pi * freqs[..., None] * t).sum(1) / 3
         + 0.05 * torch.randn(B, T))


def chain(x, a, feedback, mix, delay):
    y = PreEmphasis.apply(x, 0.95)
    y = OnePole.apply(y, a)
    wet = CombReverb.apply(y, feedback, COMB_DELAY)
    y = GainMix.apply(y, wet, mix, 0.8)
    y = SoftClip.apply(y, 2.0)
    return fractional_delay(y, delay)


def features(y, window, bank):
    frames = Frame.apply(y, window, HOP)  # [B, 15, 32]
    mag = StftMag.apply(frames)  # [B, 15, 17]
    bands = bank(mag)  # [B, 15, n_bands]
    return torch.log(bands.clamp(min=1e-4)), RmsEnvelope.apply(y, ENV_BLOCK)


hann = torch.hann_window(WIN, periodic=False)
with torch.no_grad():  # the target, rendered with the settings to recover
    true_delay = 2 + 3 * torch.rand(B)
    target = chain(clips, torch.tensor(0.3), torch.tensor(0.45), torch.tensor(0.35), true_delay)
    target_bands, target_env = features(target, hann, Filterbank(WIN // 2 + 1, 6))

a_logit = torch.tensor(0.0, requires_grad=True)
feedback = torch.tensor(0.2, requires_grad=True)
mix_logit = torch.tensor(0.0, requires_grad=True)
delay = torch.full((B,), 3.5, requires_grad=True)
window = hann.clone().requires_grad_()
bank = Filterbank(WIN // 2 + 1, 6)
opt = torch.optim.Adam([a_logit, feedback, mix_logit, delay, window, *bank.parameters()],
                       lr=0.02)

for step in range(200):
    out = chain(clips, torch.sigmoid(a_logit), feedback, torch.sigmoid(mix_logit), delay)
    bands, env = features(out, window, bank)
    loss = (torch.nn.functional.mse_loss(out, target)
            + 0.1 * torch.nn.functional.mse_loss(bands, target_bands)
            + torch.nn.functional.mse_loss(env, target_env))
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 50 == 0 or step == 199:
        print(f"step {step:3d} loss {loss.item():.5f} a {torch.sigmoid(a_logit).item():.3f} "
              f"feedback {feedback.item():.3f} mix {torch.sigmoid(mix_logit).item():.3f}")
