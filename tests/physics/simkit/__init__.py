"""simkit: differentiable physics building blocks with hand-written backward passes."""
from simkit.dynamics import AdjointEuler, TanhField
from simkit.fields import GridLaplacian
from simkit.friction import coulomb_friction
from simkit.linalg import CholeskyQuadForm
from simkit.mechanics import KineticEnergy, RigidRotate, SphereContact, SpringEnergy
from simkit.potentials import LennardJones, LJPotential

__all__ = ["AdjointEuler", "CholeskyQuadForm", "GridLaplacian", "KineticEnergy",
           "LJPotential", "LennardJones", "RigidRotate", "SphereContact", "SpringEnergy",
           "TanhField", "coulomb_friction"]
