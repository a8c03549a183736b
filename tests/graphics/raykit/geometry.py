import torch
from torch.autograd.function import once_differentiable

from raykit._bugs import PLANTED


class RaySphere(torch.autograd.Function):
    """The distance along each ray to the sphere it hits first (0 where it misses)."""

    @staticmethod
    def forward(ctx, origins, directions, center, radius: float):
        oc = origins - center
        a = (directions * directions).sum(-1)
        b = (oc * directions).sum(-1)
        c = (oc * oc).sum(-1) - radius * radius
        disc = b * b - a * c
        hit = (disc > 0) & (b < 0)
        root = disc.clamp(min=0).sqrt()
        t = torch.where(hit, (-b - root) / a, torch.zeros_like(b))
        ctx.save_for_backward(origins, directions, center, t, hit)
        ctx.radius = radius
        return t

    @staticmethod
    def backward(ctx, grad):
        origins, directions, center, t, hit = ctx.saved_tensors
        # on the sphere: |o + t d - c| = r, so dt/dp = -n / (n . d) with n = o + t d - c
        n = origins + t[..., None] * directions - center
        nd = (n * directions).sum(-1, keepdim=True)
        g = torch.where(hit, grad, torch.zeros_like(grad))[..., None] / nd
        d_origins = -g * n
        d_directions = -g * n * t[..., None]
        d_center = g * n
        if PLANTED:
            d_center = -d_center  # planted: the centre's gradient with its sign flipped
        lead = tuple(range(d_center.dim() - center.dim()))
        return d_origins, d_directions, d_center.sum(lead) if lead else d_center, None


class EdgeDirections(torch.autograd.Function):
    """The unit vector along each edge (src -> dst) of a graph."""

    @staticmethod
    def forward(ctx, pos, edge_index):
        vec = pos[edge_index[1]] - pos[edge_index[0]]
        length = vec.norm(dim=-1, keepdim=True)
        unit = vec / length  # a self-loop is 0/0
        ctx.save_for_backward(unit, length, edge_index)
        ctx.n = pos.shape[0]
        return unit

    @staticmethod
    @once_differentiable  # saves intermediates: not twice differentiable
    def backward(ctx, grad):
        unit, length, edge_index = ctx.saved_tensors
        if PLANTED:  # planted: the projection term forgotten
            g = grad / length
        else:
            g = (grad - (grad * unit).sum(-1, keepdim=True) * unit) / length
        d_pos = grad.new_zeros(ctx.n, unit.shape[-1])
        d_pos.index_add_(0, edge_index[1], g)
        d_pos.index_add_(0, edge_index[0], -g)
        return d_pos, None
