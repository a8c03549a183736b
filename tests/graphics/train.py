"""A small render-and-simulate loop over every Function of raykit, as a user's script is."""
import torch
from raykit import EdgeDirections, Integrate, MaskedMean, RaySphere, Saturate, WeightedBlend

torch.manual_seed(0)
N, E = 16, 15
for _ in range(2):
    # a camera looking down -z at a unit sphere: every ray hits it
    pixels = torch.stack(torch.meshgrid(torch.linspace(-0.3, 0.3, 4),
                                        torch.linspace(-0.3, 0.3, 4), indexing="ij"), -1)
    origins = torch.zeros(N, 3)
    origins[:, 2] = 3.0
    directions = torch.cat([pixels.reshape(N, 2), -torch.ones(N, 1)], -1).requires_grad_()
    center = torch.zeros(3, requires_grad=True)
    depth = RaySphere.apply(origins, directions, center, 1.0)
    shade = Saturate.apply(depth, 0.0, 10.0)  # depths are all inside: nothing clamped here
    far = depth[:, None] > 5.0  # the far pixels: none in this scene
    mean = MaskedMean.apply(shade[:, None].expand(N, 4), far)
    albedo = torch.rand(4, requires_grad=True)
    blended = WeightedBlend.apply(mean, albedo, torch.ones(4), 1.0)
    # a chain of mass points: edges i -> i + 1
    pos = torch.randn(N, 3, requires_grad=True)
    chain = torch.stack([torch.arange(E), torch.arange(1, E + 1)])
    springs = EdgeDirections.apply(pos, chain)
    moved = Integrate.apply(pos, torch.randn(N, 3), 0.1, 1)
    loss = blended.sum() + springs.sum() + moved.sum()
    loss.backward()
print("loss", float(loss.detach()))
