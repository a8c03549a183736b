"""Fits a small differentiable-physics model with every part of simkit: a neural ODE identified
from trajectories, a cloth draped over a sphere, a rigid alignment, friction, a Lennard-Jones
fit, Gaussian likelihoods with learned covariances and an inverse Poisson problem."""
import torch
from simkit import (
    AdjointEuler,
    CholeskyQuadForm,
    GridLaplacian,
    KineticEnergy,
    LJPotential,
    RigidRotate,
    SphereContact,
    SpringEnergy,
    TanhField,
    coulomb_friction,
)

torch.manual_seed(0)
STEPS = 300

# --- neural ODE system identification: x' = tanh(x @ W.T + b) ---
B, D, DT, N_STEPS = 32, 6, 0.05, 20
W_true = 0.6 * torch.randn(D, D)
b_true = 0.1 * torch.randn(D)
x0 = torch.randn(B, D)
with torch.no_grad():
    xT = x0.clone()
    for _ in range(N_STEPS):
        xT = xT + DT * torch.tanh(xT @ W_true.T + b_true)
    samples = torch.randn(4 * B, D)
    field_true = torch.tanh(samples @ W_true.T + b_true)
W = torch.nn.Parameter(0.1 * torch.randn(D, D))
b = torch.nn.Parameter(torch.zeros(D))

# --- a learned (non-symmetric factor) mass matrix from observed kinetic energies ---
M_true = torch.randn(D, D)
M_true = M_true @ M_true.T / D + torch.eye(D)
vel_obs = torch.randn(64, D)
E_obs = 0.5 * ((vel_obs @ M_true) * vel_obs).sum(-1)
M_fac = torch.nn.Parameter(torch.eye(D) + 0.05 * torch.randn(D, D))

# --- cloth: a 7 x 7 grid of nodes, structural and shear springs, over a sphere ---
G = 7
ii, jj = torch.meshgrid(torch.arange(G), torch.arange(G), indexing="ij")
node = ii * G + jj
edges = torch.cat([
    torch.stack([node[:, :-1].reshape(-1), node[:, 1:].reshape(-1)]),     # along x
    torch.stack([node[:-1, :].reshape(-1), node[1:, :].reshape(-1)]),     # along y
    torch.stack([node[:-1, :-1].reshape(-1), node[1:, 1:].reshape(-1)]),  # shear
    torch.stack([node[:-1, 1:].reshape(-1), node[1:, :-1].reshape(-1)]),  # shear
], dim=1)
grid = torch.stack([jj.reshape(-1), ii.reshape(-1)], -1).float() / (G - 1) * 2.4 - 1.2
rest0 = torch.cat([grid, torch.zeros(G * G, 1)], -1)
rest = (rest0[edges[1]] - rest0[edges[0]]).norm(dim=-1)
cloth = torch.nn.Parameter(rest0 + torch.tensor([0.0, 0.0, 0.7]))
sphere = torch.zeros(3)

# --- rigid alignment of a point cloud ---
cloud = torch.randn(40, 3)
target_rot = torch.tensor([0.3, -0.5, 0.8])
with torch.no_grad():
    cloud_target = RigidRotate.apply(cloud, target_rot)
axis_angle = torch.nn.Parameter(torch.tensor([0.01, 0.02, 0.01]))

# --- friction: find launch velocities that end at given velocities after a step ---
vel0 = torch.nn.Parameter(torch.randn(24, 3))
normal_force = 1.0 + torch.rand(24)
vel_target = 0.6 * torch.randn(24, 3)

# --- Lennard-Jones: fit sigma and epsilon to reference cluster energies ---
lj = LJPotential(sigma=0.9, epsilon=0.5)
lattice = torch.stack(torch.meshgrid(torch.arange(2.0), torch.arange(2.0), torch.arange(3.0),
                                     indexing="ij"), -1).reshape(-1, 3)
clusters = [lattice * s + 0.05 * torch.randn(12, 3) for s in (1.0, 1.1, 1.2, 1.35)]
ref = LJPotential(sigma=1.0, epsilon=1.2)
with torch.no_grad():
    E_ref = torch.stack([ref(c) for c in clusters])

# --- Gaussian likelihood with learned per-group covariances (Cholesky quadratic form) ---
NG, DG = 8, 3
data = torch.randn(NG, 50, DG) * torch.tensor([1.0, 0.5, 2.0])
cov_fac = torch.nn.Parameter(torch.eye(DG).repeat(NG, 1, 1))
mean = torch.nn.Parameter(torch.zeros(NG, DG))

# --- inverse Poisson: a source field whose Laplacian matches a target (anisotropic grid) ---
H, Wd = 16, 20
src = torch.nn.Parameter(torch.zeros(H, Wd))
yy, xx = torch.meshgrid(torch.linspace(0, 1, H), torch.linspace(0, 1, Wd), indexing="ij")
lap_target = torch.sin(3.1 * xx) * torch.cos(2.0 * yy)

params = [W, b, M_fac, cloth, axis_angle, vel0, mean, cov_fac, src, *lj.parameters()]
opt = torch.optim.Adam(params, lr=1e-2)
for step in range(STEPS):
    opt.zero_grad()
    xT_pred = AdjointEuler.apply(x0, W, b, DT, N_STEPS)
    loss_ode = ((xT_pred - xT) ** 2).mean()
    loss_field = ((TanhField.apply(samples, W, b) - field_true) ** 2).mean()

    M = M_fac @ M_fac.T
    loss_mass = ((KineticEnergy.apply(vel_obs, M) - E_obs) ** 2).mean()

    e_spring = SpringEnergy.apply(cloth, edges, rest, 50.0).sum()
    e_contact = SphereContact.apply(cloth, sphere, 1.0, 500.0).sum()
    loss_cloth = e_spring + e_contact + 0.5 * cloth[:, 2].sum()

    loss_rigid = ((RigidRotate.apply(cloud, axis_angle) - cloud_target) ** 2).mean()

    vel1 = coulomb_friction(vel0, normal_force, 0.3, 0.1)
    loss_fric = ((vel1 - vel_target) ** 2).mean()

    E_fit = torch.stack([lj(c) for c in clusters])
    loss_lj = ((E_fit - E_ref) / (E_ref.abs() + 1)).pow(2).mean()

    cov = cov_fac @ cov_fac.mT + 1e-3 * torch.eye(DG)
    resid = data - mean[:, None]
    quad = CholeskyQuadForm.apply(cov.repeat_interleave(50, 0), resid.reshape(-1, DG))
    loss_nll = 0.5 * quad.mean() + 0.5 * torch.logdet(cov).mean()

    lap = GridLaplacian.apply(src, 1.0 / (Wd - 1), 1.0 / (H - 1))
    loss_poisson = ((lap * 1e-3 - lap_target) ** 2).mean()

    loss = (loss_ode + loss_field + loss_mass + 0.01 * loss_cloth + loss_rigid + loss_fric
            + loss_lj + 0.1 * loss_nll + loss_poisson)
    loss.backward()
    opt.step()
    if step % 100 == 0 or step == STEPS - 1:
        print(f"step {step:3d}  loss {loss.item():.4f}  ode {loss_ode.item():.4f}  "
              f"cloth {loss_cloth.item():.3f}  rigid {loss_rigid.item():.4f}  "
              f"lj {loss_lj.item():.4f}  nll {loss_nll.item():.3f}")
