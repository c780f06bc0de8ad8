"""Reference forms of RFA: quadratic and masked, written from the formulas for clarity; the
training and incremental forms are tested against them.

Every form of causal RFA takes ``(phi_q, phi_k, v, log_forget, key_weight, initial_state)`` and
returns ``(out, final_state)``; every form of cross RFA takes ``(phi_q, phi_k, v, key_weight)``
and returns ``(out, state)``. States are ``[batch, heads, F, dv + 1]`` (:mod:`.state`). A causal
``log_forget`` is one gate per head, ``[batch, heads, time]``, or one per feature,
``[batch, heads, time, F]`` (GLA's gate, :func:`.gates.feature_gates`).
"""

from typing import Optional, Tuple

import torch
from torch import Tensor

from .state import NORMALISER_FLOOR, join_state, split_state


def reference_causal_rfa(phi_q: Tensor, phi_k: Tensor, v: Tensor, log_forget: Optional[Tensor] = None,
                         key_weight: Optional[Tensor] = None,
                         initial_state: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """Causal RFA: out [batch, heads, time, dv] and the state after the last token.

    The weight of key i for query t ≥ i is ``φ(q_t)·φ(k_i) · Π_{i<j≤t} f_j · c_i``; the initial
    state (S₀, z₀), what came before the first token, reaches query t decayed by ``Π_{j≤t} f_j``.

    Args:
        phi_q, phi_k: [batch, heads, time, F]; v: [batch, heads, time, dv]
        log_forget: [batch, heads, time] (log f_t ≤ 0) or None (f = 1); [batch, heads, time, F]: a
            gate per feature (:func:`reference_per_feature_causal_rfa`)
        key_weight: [batch, heads, time] (c_t ≥ 0) or None (c = 1)
        initial_state: [batch, heads, F, dv + 1] or None (nothing before)
    """
    if log_forget is not None and log_forget.dim() == 4:
        return reference_per_feature_causal_rfa(phi_q, phi_k, v, log_forget, key_weight, initial_state)
    batch, heads, time, _ = phi_q.shape
    phi_q, phi_k, v = phi_q.float(), phi_k.float(), v.float()
    if log_forget is None:
        log_forget = phi_q.new_zeros(batch, heads, time)
    if key_weight is None:
        key_weight = phi_q.new_ones(batch, heads, time)
    cumulative = log_forget.float().cumsum(-1)  # C_t = log Π_{j≤t} f_j
    causal = torch.ones(time, time, dtype=torch.bool, device=phi_q.device).tril()
    # log Π_{i<j≤t} f_j = C_t - C_i, only for i ≤ t
    log_decay = (cumulative.unsqueeze(-1) - cumulative.unsqueeze(-2)).masked_fill(~causal, float("-inf"))
    weights = (phi_q @ phi_k.transpose(-1, -2)) * log_decay.exp() * key_weight.float().unsqueeze(-2)
    numerator, mass = weights @ v, weights.sum(-1, keepdim=True)
    # final state: weights of the last query without φ(q)
    final_weights = (log_decay[..., -1, :].exp() * key_weight.float()).unsqueeze(-1)  # [batch, heads, time, 1]
    S = (phi_k * final_weights).transpose(-1, -2) @ v
    z = (phi_k * final_weights).sum(-2)
    if initial_state is not None:
        S0, z0 = split_state(initial_state.float())
        carried = phi_q * cumulative.exp().unsqueeze(-1)  # φ(q_t) Π_{j≤t} f_j
        numerator, mass = numerator + carried @ S0, mass + carried @ z0.unsqueeze(-1)
        total = cumulative[..., -1].exp()  # Π_{j≤T} f_j: [batch, heads]
        S, z = S + total[..., None, None] * S0, z + total[..., None] * z0
    return numerator / mass.clamp_min(NORMALISER_FLOOR), join_state(S, z)


def reference_per_feature_causal_rfa(phi_q: Tensor, phi_k: Tensor, v: Tensor, log_forget: Tensor,
                                     key_weight: Optional[Tensor] = None,
                                     initial_state: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """Causal RFA with a decay per feature, ``S_t = Diag(f_t) S_{t-1} + c_t φ(k_t) [v_t, 1]ᵀ``
    (GLA, Yang et al. 2024 §4.1, on the random-feature state): the weight of key i for query t ≥ i
    is ``Σ_f φ(q_t)_f φ(k_i)_f Π_{i<j≤t} f_{j,f} · c_i``, a [time, time, F] tensor per head here.

    Args: as :func:`reference_causal_rfa`, with log_forget [batch, heads, time, F] (≤ 0).
    """
    batch, heads, time, _ = phi_q.shape
    phi_q, phi_k, v = phi_q.float(), phi_k.float(), v.float()
    if key_weight is None:
        key_weight = phi_q.new_ones(batch, heads, time)
    key_weight = key_weight.float()
    cumulative = log_forget.float().cumsum(-2)  # C_{t,f} = log Π_{j≤t} f_{j,f}
    causal = torch.ones(time, time, dtype=torch.bool, device=phi_q.device).tril()
    # log Π_{i<j≤t} f_j = C_t - C_i per feature, only for i ≤ t: [batch, heads, t, i, F]
    log_decay = (cumulative.unsqueeze(-2) - cumulative.unsqueeze(-3)).masked_fill(~causal.unsqueeze(-1),
                                                                                  float("-inf"))
    weights = (phi_q.unsqueeze(-2) * phi_k.unsqueeze(-3) * log_decay.exp()).sum(-1) * key_weight.unsqueeze(-2)
    numerator, mass = weights @ v, weights.sum(-1, keepdim=True)
    # final state: the keys decayed to the last token, without φ(q)
    final_keys = phi_k * log_decay[..., -1, :, :].exp() * key_weight.unsqueeze(-1)  # [batch, heads, time, F]
    S, z = final_keys.transpose(-1, -2) @ v, final_keys.sum(-2)
    if initial_state is not None:
        S0, z0 = split_state(initial_state.float())
        carried = phi_q * cumulative.exp()  # φ(q_t) ⊙ Π_{j≤t} f_j
        numerator, mass = numerator + carried @ S0, mass + carried @ z0.unsqueeze(-1)
        total = cumulative[..., -1, :].exp()  # Π_{j≤T} f_j: [batch, heads, F], decays the rows
        S, z = S + total.unsqueeze(-1) * S0, z + total * z0
    return numerator / mass.clamp_min(NORMALISER_FLOOR), join_state(S, z)


def reference_cross_rfa(phi_q: Tensor, phi_k: Tensor, v: Tensor,
                        key_weight: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """Cross RFA: out [batch, heads, time, dv] = Σ_i w_ti v_i / Σ_i w_ti with
    ``w_ti = φ(q_t)·φ(k_i) · c_i``, and the source summary (S, z) with ``S = Σ_i c_i φ(k_i) v_iᵀ``.

    Args:
        phi_q: [batch, heads, time, F]; phi_k: [batch, heads, source, F]; v: [batch, heads, source, dv]
        key_weight: [batch, heads, source] (0 at padding) or None (c = 1)
    """
    phi_q, phi_k, v = phi_q.float(), phi_k.float(), v.float()
    weights = phi_q @ phi_k.transpose(-1, -2)
    weighted_keys = phi_k
    if key_weight is not None:
        weights = weights * key_weight.float().unsqueeze(-2)
        weighted_keys = phi_k * key_weight.float().unsqueeze(-1)
    out = (weights @ v) / weights.sum(-1, keepdim=True).clamp_min(NORMALISER_FLOOR)
    return out, join_state(weighted_keys.transpose(-1, -2) @ v, weighted_keys.sum(-2))
