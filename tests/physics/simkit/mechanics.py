"""Mass-spring systems, contact with an obstacle, rigid motion and kinetic energy."""
import torch
from torch.autograd.function import once_differentiable

from simkit._bugs import PLANTED


class SpringEnergy(torch.autograd.Function):
    """Hooke energy 0.5 * k * (|x_dst - x_src| - rest)^2 of each edge of ``edge_index [2, E]``
    over node positions ``pos [N, 3]``."""

    @staticmethod
    def forward(ctx, pos, edge_index, rest, stiffness: float = 1.0):
        src, dst = edge_index[0], edge_index[1]
        vec = pos[dst] - pos[src]
        length = vec.norm(dim=-1)
        stretch = length - rest
        ctx.save_for_backward(edge_index, vec, length, stretch)
        ctx.stiffness = stiffness
        ctx.n_nodes = pos.shape[0]
        return 0.5 * stiffness * stretch * stretch

    @staticmethod
    @once_differentiable  # saves intermediates: not twice differentiable
    def backward(ctx, grad):
        edge_index, vec, length, stretch = ctx.saved_tensors
        k = ctx.stiffness
        coef = grad * k * stretch
        g_vec = (coef / length)[:, None] * vec
        d_pos = torch.zeros(ctx.n_nodes, vec.shape[1], dtype=vec.dtype, device=vec.device)
        if PLANTED:  # planted: indexed += instead of index_add_ (repeated nodes keep one edge)
            d_pos[edge_index[1]] += g_vec
            d_pos[edge_index[0]] -= g_vec
        else:
            d_pos.index_add_(0, edge_index[1], g_vec)
            d_pos.index_add_(0, edge_index[0], -g_vec)
        return d_pos, None, -coef, None


class SphereContact(torch.autograd.Function):
    """Penalty energy 0.5 * k * max(0, radius - |p - center|)^2 of each particle against a
    spherical obstacle."""

    @staticmethod
    def forward(ctx, pos, center, radius: float = 0.5, stiffness: float = 1000.0):
        d = pos - center
        dist = d.norm(dim=-1)
        pen = torch.relu(radius - dist)
        ctx.save_for_backward(d, dist, pen)
        ctx.stiffness = stiffness
        return 0.5 * stiffness * pen * pen

    @staticmethod
    @once_differentiable  # saves intermediates: not twice differentiable
    def backward(ctx, grad):
        d, dist, pen = ctx.saved_tensors
        k = ctx.stiffness
        d_pos = torch.zeros_like(d)
        inside = pen > 0
        if inside.any():
            normal = d[inside] / dist[inside, None]
            if PLANTED:  # planted: the contact normal left unnormalised
                normal = d[inside]
            d_pos[inside] = -(grad[inside] * k * pen[inside])[:, None] * normal
        return d_pos, -d_pos.sum(dim=0), None, None


def _skew(w):
    z = torch.zeros_like(w[0])
    return torch.stack([
        torch.stack([z, -w[2], w[1]]),
        torch.stack([w[2], z, -w[0]]),
        torch.stack([-w[1], w[0], z]),
    ])


def _rodrigues(axis_angle):
    theta = axis_angle.norm()
    K = _skew(axis_angle / theta)
    eye = torch.eye(3, dtype=axis_angle.dtype, device=axis_angle.device)
    return eye + torch.sin(theta) * K + (1 - torch.cos(theta)) * (K @ K)


class RigidRotate(torch.autograd.Function):
    """Points ``[N, 3]`` rotated by the axis-angle vector ``[3]``: points @ R.T."""

    @staticmethod
    def forward(ctx, points, axis_angle):
        ctx.save_for_backward(points, axis_angle)
        return points @ _rodrigues(axis_angle).T

    @staticmethod
    def backward(ctx, grad):
        points, w = ctx.saved_tensors
        R = _rodrigues(w)  # rebuilt, so that double backward sees its graph
        d_points = grad @ R
        d_R = grad.T @ points
        # dR/dw_i = (w_i [w]x + [w x (I - R) e_i]x) R / |w|^2  (Gallego and Yezzi, 2015)
        eye = torch.eye(3, dtype=w.dtype, device=w.device)
        Kw = _skew(w)
        theta2 = (w * w).sum()
        d_w = []
        for i in range(3):
            col = torch.linalg.cross(w, (eye - R)[:, i])
            dR_i = (w[i] * Kw + _skew(col)) @ R / theta2
            d_w.append((d_R * dR_i).sum())
        return d_points, torch.stack(d_w)


class KineticEnergy(torch.autograd.Function):
    """0.5 * v^T M v for each velocity of a batch ``v [B, D]``, with mass matrix ``M [D, D]``."""

    @staticmethod
    def forward(ctx, v, M):
        ctx.save_for_backward(v, M)
        return 0.5 * ((v @ M) * v).sum(dim=-1)

    @staticmethod
    def backward(ctx, grad):
        v, M = ctx.saved_tensors
        gv = grad[:, None] * v
        d_v = 0.5 * (gv @ M.T + gv @ M)
        d_M = 0.5 * gv.T @ v
        return d_v, d_M
