"""Training forms of RFA: linear in time and memory, differentiable (same signatures as
:mod:`.reference`)."""

from typing import Optional, Tuple

import torch
from torch import Tensor

from .state import normalised, with_ones

# Training-form chunk length: quadratic work inside a chunk, recurrent state between chunks.
CHUNK_SIZE = 64


def chunked_causal_rfa(phi_q: Tensor, phi_k: Tensor, v: Tensor, log_forget: Optional[Tensor] = None,
                       key_weight: Optional[Tensor] = None, initial_state: Optional[Tensor] = None,
                       chunk_size: int = CHUNK_SIZE) -> Tuple[Tensor, Tensor]:
    """Training form, linear in time and memory: out [batch, heads, time, dv], final state.

    The state is ``[batch, heads, F, dv + 1]`` (S with z as its last column, see
    :func:`.state.split_state`). Inside a chunk the quadratic form runs with decays relative to the
    chunk start; the state carries everything before it (same arguments as
    :func:`.reference.reference_causal_rfa`).
    """
    batch, heads, time, features = phi_q.shape
    phi_q, phi_k = phi_q.float(), phi_k.float()
    values = with_ones(v.float())
    if key_weight is not None:
        phi_k = phi_k * key_weight.float().unsqueeze(-1)
    state = initial_state if initial_state is not None else values.new_zeros(batch, heads, features, values.size(-1))
    outputs = []
    for start in range(0, time, chunk_size):
        end = min(start + chunk_size, time)
        q, k, val = phi_q[:, :, start:end], phi_k[:, :, start:end], values[:, :, start:end]
        causal = torch.ones(end - start, end - start, dtype=torch.bool, device=q.device).tril()
        if log_forget is None:
            scores = (q @ k.transpose(-1, -2)).masked_fill(~causal, 0.0)
            outputs.append(scores @ val + q @ state)
            state = state + k.transpose(-1, -2) @ val
        else:
            cumulative = log_forget[:, :, start:end].float().cumsum(-1)  # log Π f from the chunk start
            log_decay = (cumulative.unsqueeze(-1) - cumulative.unsqueeze(-2)).masked_fill(~causal, float("-inf"))
            scores = (q @ k.transpose(-1, -2)) * log_decay.exp()
            outputs.append(scores @ val + (q * cumulative.exp().unsqueeze(-1)) @ state)
            total = cumulative[..., -1:]  # [batch, heads, 1]
            decayed_keys = k * (total - cumulative).exp().unsqueeze(-1)
            state = state * total.exp().unsqueeze(-1) + decayed_keys.transpose(-1, -2) @ val
    return normalised(torch.cat(outputs, dim=2)), state


def cross_rfa_state(phi_k: Tensor, v: Tensor, key_weight: Optional[Tensor] = None) -> Tensor:
    """[batch, heads, F, dv + 1]: S = Σ_i w_i φ(k_i) v_iᵀ with z as the last column.

    Args:
        phi_k: [batch, heads, source, F]; v: [batch, heads, source, dv]
        key_weight: [batch, heads, source] (0 at padding; gate decays when cross-gated)
    """
    return phi_k.float().transpose(-1, -2) @ weighted_values(v, key_weight)


def weighted_values(v: Tensor, key_weight: Optional[Tensor]) -> Tensor:
    """[batch, heads, source, dv + 1]: ``w_i [v_i, 1]``, the columns every source key contributes
    (Σ_i φ(k_i) (w_i [v_i, 1])ᵀ: weighting the dv + 1 columns is cheaper than the F features)."""
    values = with_ones(v.float())
    return values if key_weight is None else values * key_weight.float().unsqueeze(-1)


def cross_rfa_readout(phi_q: Tensor, state: Tensor) -> Tensor:
    """φ(q)·S / φ(q)·z: phi_q [batch, heads, time, F], state [batch, heads, F, dv + 1]
    → [batch, heads, time, dv]."""
    return normalised(phi_q.float() @ state)


def cross_rfa(phi_q: Tensor, phi_k: Tensor, v: Tensor, key_weight: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """Cross RFA through the source summary: the state once (:func:`cross_rfa_state`), then every
    query reads it (:func:`cross_rfa_readout`). Same arguments and results as
    :func:`.reference.reference_cross_rfa`."""
    state = cross_rfa_state(phi_k, v, key_weight)
    return cross_rfa_readout(phi_q, state), state
