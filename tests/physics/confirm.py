"""Confirms simkit's planted bugs with bare torch: for each planted target, gradcheck in float64
on inputs that expose it fails with SIMKIT_BUGS=1 and passes with SIMKIT_BUGS=0; on the inputs
that hide it, it passes either way; every other target passes gradcheck.

    python confirm.py            # runs both settings in child processes and compares
    SIMKIT_BUGS=1 python confirm.py --one   # one setting, printed
"""
import json
import os
import subprocess
import sys

import torch

D64 = torch.float64


def _spd(B, D, g):
    M = torch.randn(B, D, D, generator=g, dtype=D64)
    return M @ M.mT + D * torch.eye(D, dtype=D64)


def _cases():
    """(target, label, planted bug exposed?, fn, inputs)."""
    from simkit import (
        AdjointEuler,
        CholeskyQuadForm,
        GridLaplacian,
        KineticEnergy,
        LennardJones,
        LJPotential,
        RigidRotate,
        SphereContact,
        SpringEnergy,
        TanhField,
        coulomb_friction,
    )

    g = torch.Generator().manual_seed(0)

    def rnd(*shape, scale=1.0):
        return (scale * torch.randn(*shape, generator=g, dtype=D64)).requires_grad_()

    W = rnd(4, 4, scale=0.5)
    Wsym = (0.5 * (W + W.T)).detach().requires_grad_()
    chain = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])        # no node twice in a row
    star = torch.tensor([[0, 0, 0, 1, 2], [1, 2, 3, 2, 3]])   # node 0 the source of 3 edges
    pos5 = rnd(5, 3)
    rest_c = (torch.rand(4, generator=g, dtype=D64) + 0.5).requires_grad_()
    rest_s = (torch.rand(5, generator=g, dtype=D64) + 0.5).requires_grad_()
    center = torch.zeros(3, dtype=D64, requires_grad=True)
    near = (torch.tensor([[0.1, 0.2, -0.1], [0.3, -0.1, 0.0], [2.0, 1.0, 0.5]], dtype=D64)
            ).requires_grad_()                                  # two particles inside r = 0.5
    far = (torch.tensor([[1.0, 0.5, -0.2], [-0.9, 1.1, 0.3], [2.0, 1.0, 0.5]], dtype=D64)
           ).requires_grad_()                                   # none inside
    lj_pos = (torch.tensor([[0.0, 0.0, 0.0], [1.1, 0.0, 0.0], [0.0, 1.2, 0.1],
                            [1.0, 1.0, 0.9]], dtype=D64)).requires_grad_()
    sigma = torch.tensor(1.0, dtype=D64, requires_grad=True)
    eps = torch.tensor(0.7, dtype=D64, requires_grad=True)
    slow = torch.tensor([0.05, 0.05, 1.0, 1.0, 1.0, 1.0], dtype=D64)[:, None]
    v = (torch.randn(6, 3, generator=g, dtype=D64) * slow).requires_grad_()  # 2 rows stop
    fn = (torch.rand(6, generator=g, dtype=D64) * 2 + 0.5).requires_grad_()
    M = _spd(1, 4, g)[0] + 0.3 * torch.randn(4, 4, generator=g, dtype=D64)  # not symmetric
    module = LJPotential(1.0, 0.7).double()

    return [
        ("AdjointEuler", "B=3, n_steps=4", True,
         lambda x, W, b: AdjointEuler.apply(x, W, b, 0.1, 4), (rnd(3, 4), W, rnd(4))),
        ("AdjointEuler", "n_steps=1 (hides it)", False,
         lambda x, W, b: AdjointEuler.apply(x, W, b, 0.1, 1), (rnd(3, 4), W, rnd(4))),
        ("TanhField", "W not symmetric", True, TanhField.apply, (rnd(3, 4), W, rnd(4))),
        ("TanhField", "W symmetric (hides it)", False, TanhField.apply, (rnd(3, 4), Wsym, rnd(4))),
        ("SpringEnergy", "star: node 0 in 3 edges", True,
         lambda p, r: SpringEnergy.apply(p, star, r, 2.0), (pos5, rest_s)),
        ("SpringEnergy", "chain (hides it)", False,
         lambda p, r: SpringEnergy.apply(p, chain, r, 2.0), (pos5, rest_c)),
        ("SphereContact", "particles inside", True,
         lambda p, c: SphereContact.apply(p, c, 0.5, 100.0), (near, center)),
        ("SphereContact", "none inside (hides it)", False,
         lambda p, c: SphereContact.apply(p, c, 0.5, 100.0), (far, center)),
        ("CholeskyQuadForm", "B=3", True, CholeskyQuadForm.apply,
         (_spd(3, 4, g).requires_grad_(), rnd(3, 4))),
        ("CholeskyQuadForm", "B=1 (hides it)", False, CholeskyQuadForm.apply,
         (_spd(1, 4, g).requires_grad_(), rnd(1, 4))),
        ("GridLaplacian", "dx=0.5, dy=2.0", True,
         lambda u: GridLaplacian.apply(u, 0.5, 2.0), (rnd(5, 6),)),
        ("GridLaplacian", "default spacing (hides it)", False,
         GridLaplacian.apply, (rnd(5, 6),)),
        ("RigidRotate", "", None, RigidRotate.apply, (rnd(5, 3), rnd(3))),
        ("KineticEnergy", "", None, KineticEnergy.apply, (rnd(3, 4), M.requires_grad_())),
        ("LennardJones", "", None, LennardJones.apply, (lj_pos, sigma, eps)),
        ("coulomb_friction", "some sliding, some stopped", None,
         lambda v, f: coulomb_friction(v, f, 0.4, 0.5), (v, fn)),
        ("LJPotential", "module", None, module, (lj_pos,)),
    ]


def _one():
    out = []
    for target, label, exposes, fn, inputs in _cases():
        try:
            ok = torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-4)
        except Exception as e:  # noqa: BLE001 -- gradcheck raises on a mismatch
            ok = False
            why = str(e).splitlines()[0][:80]
        else:
            why = ""
        out.append({"target": target, "label": label, "exposes": exposes, "pass": ok,
                    "why": why})
    return out


def main():
    if "--one" in sys.argv:
        results = _one()
        if "--json" in sys.argv:
            print(json.dumps(results))
        else:
            for r in results:
                print(f"{r['target']:18} {r['label']:28} {'pass' if r['pass'] else 'FAIL'} "
                      f"{r['why']}")
        return 0
    runs = {}
    for flag in ("0", "1"):
        env = {**os.environ, "SIMKIT_BUGS": flag}
        done = subprocess.run([sys.executable, __file__, "--one", "--json"], env=env,
                              capture_output=True, text=True, check=True,
                              cwd=os.path.dirname(os.path.abspath(__file__)))
        runs[flag] = json.loads(done.stdout)
    bad = 0
    print(f"{'target':18} {'inputs':28} {'BUGS=0':7} {'BUGS=1':7} expected")
    for good, bugged in zip(runs["0"], runs["1"]):
        want_bugged = good["exposes"] is not True  # fails only where the bug is exposed
        fine = good["pass"] and bugged["pass"] == want_bugged
        bad += not fine
        print(f"{good['target']:18} {good['label']:28} "
              f"{'pass' if good['pass'] else 'FAIL':7} {'pass' if bugged['pass'] else 'FAIL':7} "
              f"{'ok' if fine else 'UNEXPECTED'}")
    planted = {r["target"] for r in runs["1"] if r["exposes"] and not r["pass"]}
    print(f"planted bugs confirmed: {len(planted)} ({', '.join(sorted(planted))})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
