"""The state every form of RFA shares: ``[batch, heads, F, dv + 1]``, S with z as its last
column, and the floored readout ``φ(q)·S / φ(q)·z``."""

from typing import Tuple

import torch
from torch import Tensor

# Smallest value of the normaliser φ(q)·z. In kernel units (φ(x)·φ(y) ≈ kernel ≤ 1) one
# key contributes at least exp(-2/τ²) ≈ 0.135 at τ = 1: a normaliser below 0.1 is estimator
# noise, and dividing by it would blow the output up (Peng et al. floor it too).
NORMALISER_FLOOR = 0.1


def normalised(numerator_and_mass: Tensor) -> Tensor:
    """[..., dv + 1] (last column: φ(q)·z) → [..., dv], with the documented floor."""
    numerator, mass = numerator_and_mass[..., :-1], numerator_and_mass[..., -1:]
    return numerator / mass.clamp_min(NORMALISER_FLOOR)


def with_ones(v: Tensor) -> Tensor:
    """[..., dv] → [..., dv + 1]: the extra column of ones accumulates z next to S."""
    return torch.cat([v, v.new_ones(v.shape[:-1] + (1,))], dim=-1)


def split_state(state: Tensor) -> Tuple[Tensor, Tensor]:
    """[batch, heads, F, dv + 1] → S [batch, heads, F, dv], z [batch, heads, F]."""
    return state[..., :-1], state[..., -1]



def join_state(S: Tensor, z: Tensor) -> Tensor:
    """S [batch, heads, F, dv], z [batch, heads, F] → [batch, heads, F, dv + 1]."""
    return torch.cat([S, z.unsqueeze(-1)], dim=-1)
