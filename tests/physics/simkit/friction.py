"""Coulomb friction as a custom op: each velocity loses mu * dt * normal force of speed,
and stops (is clamped to zero) rather than reversing."""
import torch
from torch import Tensor


@torch.library.custom_op("simkit::coulomb_friction", mutates_args=())
def coulomb_friction(velocity: Tensor, normal_force: Tensor, mu: float, dt: float) -> Tensor:
    speed = velocity.norm(dim=-1, keepdim=True)
    scale = (1 - mu * dt * normal_force[:, None] / speed).clamp(min=0)
    return velocity * scale


@coulomb_friction.register_fake
def _(velocity, normal_force, mu, dt):
    return torch.empty_like(velocity)


def _setup_context(ctx, inputs, output):
    velocity, normal_force, mu, dt = inputs
    ctx.save_for_backward(velocity, normal_force)
    ctx.mu, ctx.dt = mu, dt


def _backward(ctx, grad):
    velocity, normal_force = ctx.saved_tensors
    c = ctx.mu * ctx.dt
    speed = velocity.norm(dim=-1, keepdim=True)
    a = c * normal_force[:, None]
    scale = 1 - a / speed
    sliding = scale > 0
    gv = (grad * velocity).sum(-1, keepdim=True)
    d_velocity = torch.where(sliding, grad * scale + gv * a * velocity / speed**3,
                             torch.zeros_like(grad))
    d_normal = torch.where(sliding, -gv * c / speed, torch.zeros_like(gv)).squeeze(-1)
    return d_velocity, d_normal, None, None


coulomb_friction.register_autograd(_backward, setup_context=_setup_context)
