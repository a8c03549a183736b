"""Confirms with bare torch that each planted bug is real: on inputs that expose it,
``torch.autograd.gradcheck`` (float64) fails with ``SIGKIT_BUGS=1`` and passes with
``SIGKIT_BUGS=0``; every other target passes either way (and gradgradcheck, where backward is
twice differentiable, passes on the correct code).

    python confirm.py            # both settings, each in its own process
    SIGKIT_BUGS=1 python confirm.py   # one setting
"""
import os
import subprocess
import sys

PLANTED = {  # target: the bug (and what exposes it)
    "StftMag": "(a) .view on the incoming gradient: a transposed output downstream",
    "Frame": "(b) overlap-add with = instead of +=: hop < window",
    "CombReverb": "(c) feedback path dropped: delay < T",
    "RmsEnvelope": "(d) the multichannel branch: x [B, C, T]",
    "FilterbankMatmul": "(e) the batch summed before the product: B > 1",
    "Filterbank": "(e) inherited from FilterbankMatmul: B > 1",
    "SoftClip": "(f) the drive forgotten: drive != 1",
}


def cases():
    import sigkit
    import torch
    from torch.func import functional_call

    torch.manual_seed(0)
    d = dict(dtype=torch.float64)

    def rnd(*shape):
        return torch.randn(*shape, **d).requires_grad_()

    fb = sigkit.Filterbank(5, 4).double()
    return {
        # name: (fn, inputs, twice differentiable)
        "StftMag": (lambda fr: sigkit.StftMag.apply(fr).transpose(1, 2).contiguous(),
                    (rnd(2, 3, 8),), False),
        "Frame": (lambda x, w: sigkit.Frame.apply(x, w, 4), (rnd(2, 20), rnd(8)), True),
        "CombReverb": (lambda x, g: sigkit.CombReverb.apply(x, g, 3),
                       (rnd(2, 12), torch.tensor(0.5, **d, requires_grad=True)), False),
        "RmsEnvelope": (lambda x: sigkit.RmsEnvelope.apply(x, 4), (rnd(2, 2, 12),), True),
        "FilterbankMatmul": (sigkit.FilterbankMatmul.apply, (rnd(3, 4, 5), rnd(4, 5)), True),
        "Filterbank": (lambda s, w: functional_call(fb, {"weight": w}, (s,)),
                       (rnd(3, 4, 5), rnd(4, 5)), True),
        "SoftClip": (lambda x: sigkit.SoftClip.apply(x, 2.0), (rnd(3, 5),), True),
        "OnePole": (sigkit.OnePole.apply,
                    (rnd(2, 10), torch.tensor(0.6, **d, requires_grad=True)), False),
        "PreEmphasis": (lambda x: sigkit.PreEmphasis.apply(x, 0.97), (rnd(2, 10),), True),
        "GainMix": (lambda a, b, m: sigkit.GainMix.apply(a, b, m, 1.5),
                    (rnd(3, 6), rnd(3, 6), torch.rand(3, 1, **d).requires_grad_()), True),
        "fractional_delay": (sigkit.fractional_delay,
                             (rnd(3, 10), torch.tensor([1.3, 2.7, 0.4], **d,
                                                       requires_grad=True)), True),
        # the correct code also passes on the default-ish inputs that hide each bug
        "StftMag/contiguous": (sigkit.StftMag.apply, (rnd(2, 3, 8),), False),
        "Frame/no-overlap": (lambda x, w: sigkit.Frame.apply(x, w, 8), (rnd(2, 16), rnd(8)),
                             True),
        "CombReverb/delay>=T": (lambda x, g: sigkit.CombReverb.apply(x, g, 12),
                                (rnd(2, 12), torch.tensor(0.5, **d, requires_grad=True)),
                                False),
        "RmsEnvelope/mono": (lambda x: sigkit.RmsEnvelope.apply(x, 4), (rnd(2, 12),), True),
        "FilterbankMatmul/B=1": (sigkit.FilterbankMatmul.apply, (rnd(1, 4, 5), rnd(4, 5)),
                                 True),
        "SoftClip/drive=1": (lambda x: sigkit.SoftClip.apply(x, 1.0), (rnd(3, 5),), True),
    }


def run_one_setting():
    import torch

    planted = os.environ.get("SIGKIT_BUGS") == "1"
    bad = 0
    for name, (fn, inputs, twice) in cases().items():
        try:
            ok = torch.autograd.gradcheck(fn, inputs, raise_exception=True)
            why = ""
        except Exception as e:  # noqa: BLE001 -- a wrong Jacobian, or backward raising
            ok, why = False, f"{type(e).__name__}: {str(e).splitlines()[0][:90]}"
        if ok and twice and not planted:
            try:
                torch.autograd.gradgradcheck(fn, inputs, raise_exception=True)
            except Exception as e:  # noqa: BLE001 -- any failure is the answer
                ok, why = False, f"gradgradcheck {type(e).__name__}: {str(e)[:80]}"
        expect_fail = planted and name in PLANTED
        verdict = "ok  " if ok != expect_fail else "BAD "
        bad += ok == expect_fail
        print(f"{verdict} SIGKIT_BUGS={int(planted)} {name:22s} gradcheck "
              f"{'PASS' if ok else 'FAIL'}  {PLANTED.get(name, '') if expect_fail else ''}"
              f"{'  <- ' + why if why else ''}")
    return bad


if __name__ == "__main__":
    if "SIGKIT_BUGS" in os.environ:
        sys.exit(1 if run_one_setting() else 0)
    codes = [subprocess.call([sys.executable, __file__], env={**os.environ, "SIGKIT_BUGS": f})
             for f in ("0", "1")]
    print("confirmed" if not any(codes) else "NOT confirmed")
    sys.exit(max(codes))
