"""The state every form of RFA shares: ``[batch, heads, F, dv + 1]``, S with z as its last
column, and the floored readout ``φ(q)·S / φ(q)·z``.

Decoding keeps its states column-major (each head's ``[F, dv + 1]`` stored as its transpose,
:func:`column_major_state`): a step reads a state with a few queries (one token, or the beams of
a sentence), and the product ``[S, z]ᵀ φ(q)ᵀ`` runs about twice as fast on a CPU as
``φ(q) [S, z]`` for these shapes (MKL, fp32: 8 x 512 x 65 per source, 4 beams). The values
are the same; only the memory order differs, and :func:`state_readout` takes either."""

from typing import Optional, Tuple

import torch
from torch import Tensor

# Smallest value of the normaliser φ(q)·z. In kernel units (φ(x)·φ(y) ≈ kernel ≤ 1) one
# key contributes at least exp(-2/τ²) ≈ 0.135 at τ = 1: a normaliser below 0.1 is estimator
# noise, and dividing by it would blow the output up (Peng et al. floor it too).
NORMALISER_FLOOR = 0.1


def normalised(numerator_and_mass: Tensor) -> Tensor:
    """[..., dv + 1] (last column: φ(q)·z) → [..., dv], with the documented floor. In training, on
    the devices of :data:`.features.FUSED_FEATURE_DEVICES`, through one Triton kernel each way
    (:func:`.fused_features.fused_normalised`) where they run."""
    if torch.is_grad_enabled() and numerator_and_mass.requires_grad:
        from .features import FUSED_FEATURE_DEVICES

        if numerator_and_mass.device.type in FUSED_FEATURE_DEVICES and numerator_and_mass.dim() >= 3 \
                and numerator_and_mass.dtype == torch.float32:
            from .fused_features import fused_normalise_work, fused_normalised

            if fused_normalise_work(numerator_and_mass.device):
                return fused_normalised(numerator_and_mass)
        return _Normalised.apply(numerator_and_mass)
    numerator, mass = numerator_and_mass[..., :-1], numerator_and_mass[..., -1:]
    return numerator / mass.clamp_min(NORMALISER_FLOOR)


class _Normalised(torch.autograd.Function):
    """:func:`normalised` with a backward of seven operations that writes the input's gradient at
    once: ``g / m`` for the numerator, ``-Σ (g / m) · n / m`` for the mass m (0 where the floor
    holds it). Autograd's division, clamp and two slices take about twice as many, each a kernel
    on a GPU, where RFA's training step is bound by launching them. Saves its input, which
    autograd's form keeps alive as well, and the floored mass."""

    @staticmethod
    def forward(ctx, numerator_and_mass: Tensor) -> Tensor:
        numerator, mass = numerator_and_mass[..., :-1], numerator_and_mass[..., -1:]
        floored = mass.clamp_min(NORMALISER_FLOOR)
        ctx.save_for_backward(numerator_and_mass, floored, mass < NORMALISER_FLOOR)
        return numerator / floored

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor) -> Tensor:
        numerator_and_mass, floored, below = ctx.saved_tensors
        grad_numerator = grad / floored
        grad_mass = (grad_numerator * numerator_and_mass[..., :-1]).sum(-1, keepdim=True).div_(floored).neg_()
        return torch.cat([grad_numerator, grad_mass.masked_fill_(below, 0.0)], -1)


def with_ones(v: Tensor, filled: int = 0) -> Tensor:
    """[..., time, dv] → [..., time + filled, dv + 1]: the extra column of ones accumulates z next
    to S; ``filled`` rows of ones after the last (for keys of zero, which add nothing whatever
    their values), in the same operation."""
    return torch.nn.functional.pad(v, (0, 1, 0, filled), value=1.0)


def split_state(state: Tensor) -> Tuple[Tensor, Tensor]:
    """[batch, heads, F, dv + 1] → S [batch, heads, F, dv], z [batch, heads, F]."""
    return state[..., :-1], state[..., -1]



def join_state(S: Tensor, z: Tensor) -> Tensor:
    """S [batch, heads, F, dv], z [batch, heads, F] → [batch, heads, F, dv + 1]."""
    return torch.cat([S, z.unsqueeze(-1)], dim=-1)


def is_column_major(state: Tensor) -> bool:
    """Whether each ``[F, dv + 1]`` matrix of ``state`` is stored as its (contiguous) transpose."""
    return not state.is_contiguous() and state.transpose(-1, -2).is_contiguous()


def column_major_state(transposed: Tensor) -> Tensor:
    """``[..., dv + 1, F]`` contiguous → the state ``[..., F, dv + 1]`` it stores, column-major (a view)."""
    return transposed.transpose(-1, -2)


def state_readout(phi_q: Tensor, state: Tensor) -> Tensor:
    """``φ(q)·[S, z]``: phi_q [..., n, F], state [..., F, dv + 1] with the same leading dimensions
    → [..., n, dv + 1] (before the normalisation), in the product order that suits the state's
    layout."""
    phi_q = phi_q.float()
    if not is_column_major(state):
        return phi_q @ state
    *lead, n, features = phi_q.shape
    columns = state.size(-1)
    stored = state.transpose(-1, -2).reshape(-1, columns, features)  # a view: the stored layout
    out = torch.bmm(stored, phi_q.reshape(-1, n, features).transpose(1, 2))  # [*, dv + 1, n]
    return out.transpose(1, 2).reshape(*lead, n, columns)


def select_rows(state: Tensor, rows: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """``state.index_select(0, rows)`` that keeps a column-major state column-major (``out``:
    a buffer of the same layout to write into)."""
    if not is_column_major(state):
        return torch.index_select(state, 0, rows, out=out) if out is not None else state.index_select(0, rows)
    stored = state.transpose(-1, -2)
    if out is not None:
        return column_major_state(torch.index_select(stored, 0, rows, out=out.transpose(-1, -2)))
    return column_major_state(stored.index_select(0, rows))
