"""Incremental form of causal RFA: one token and constant work per step, for beam search.

:func:`incremental_causal_rfa` runs the step over a sequence with the signature of the other
forms (:mod:`.reference`); cross RFA's incremental form is the module's cached source
summary (:func:`cross_rfa_summary`), read at every step (:func:`cross_rfa_read`).
"""

from typing import Dict, Optional, Tuple

import torch
from torch import Tensor

from .state import normalised, with_ones
from .training import cross_rfa_readout, cross_rfa_state, weighted_values


def causal_rfa_step(phi_q: Tensor, phi_k: Tensor, v: Tensor, state: Optional[Tensor],
                    forget: Optional[Tensor] = None, key_weight: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """Incremental form: one token, constant work. Returns out [batch, heads, dv], new state.

    Args:
        phi_q, phi_k: [batch, heads, F]; v: [batch, heads, dv]
        state: [batch, heads, F, dv + 1] or None (empty prefix)
        forget: [batch, heads] f_t (None: 1); key_weight: [batch, heads] c_t (None: 1)
    """
    batch, heads, features = phi_q.shape
    values = with_ones(v.float())
    phi_k = phi_k.float()
    if key_weight is not None:
        phi_k = phi_k * key_weight.float().unsqueeze(-1)
    # decoding (no autograd) updates the state in place: it is the step's largest tensor, and
    # copying it would cost as much as the update itself
    in_place = state is not None and state.is_contiguous() and not (torch.is_grad_enabled() and (
        state.requires_grad or phi_k.requires_grad or values.requires_grad or
        (forget is not None and forget.requires_grad)))
    if state is None:
        state = values.new_zeros(batch, heads, features, values.size(-1))
    elif forget is not None:
        gate = forget.float().view(batch, heads, 1, 1)
        state = state.mul_(gate) if in_place else state * gate
    # S_t = f_t S_{t-1} + c_t φ(k_t) [v_t, 1]ᵀ, as one batched outer product
    flat_state = state.reshape(batch * heads, features, -1)
    outer = (phi_k.reshape(batch * heads, features, 1), values.reshape(batch * heads, 1, -1))
    flat_state = flat_state.baddbmm_(*outer) if in_place else torch.baddbmm(flat_state, *outer)
    out = torch.bmm(phi_q.float().reshape(batch * heads, 1, features), flat_state)
    return normalised(out.view(batch, heads, -1)), flat_state.view(batch, heads, features, -1)


def incremental_causal_rfa(phi_q: Tensor, phi_k: Tensor, v: Tensor, log_forget: Optional[Tensor] = None,
                           key_weight: Optional[Tensor] = None,
                           initial_state: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """:func:`causal_rfa_step` over a whole sequence (what beam search does, one call per token);
    the arguments and results of :func:`.reference.reference_causal_rfa`."""
    # the step updates a state in place when nothing needs its gradient: never the caller's
    state, outputs = (None if initial_state is None else initial_state.clone()), []
    for t in range(phi_q.size(2)):
        forget = None if log_forget is None else log_forget[:, :, t].exp()
        weight = None if key_weight is None else key_weight[:, :, t]
        out, state = causal_rfa_step(phi_q[:, :, t], phi_k[:, :, t], v[:, :, t], state, forget, weight)
        outputs.append(out)
    return torch.stack(outputs, dim=2), state


def cross_rfa_summary(phi_k: Tensor, v: Tensor, key_weight: Optional[Tensor] = None) -> Dict[str, Tensor]:
    """What decoding keeps of the source for cross RFA, in whichever of two exact forms is smaller.

    A step reads ``φ(q)·[S, z]`` with ``[S, z] = φ(K)ᵀ [w v, w]``: either through the state
    (``{"state"}``, ``F × (dv + 1)`` per head, :func:`.training.cross_rfa_state`) or, re-associated,
    through the source's features and weighted values (``{"keys", "values"}``, ``T × (F + dv + 1)``
    per head), ``(φ(q)·φ(K)ᵀ)·[w v, w]``. Both compute the same sums in another order; a step reads
    (and multiplies) every number of the summary once, so the smaller one is the cheaper one: the
    keys while the source is shorter than ``F (dv + 1) / (F + dv + 1)`` tokens (57 at the paper's
    512 features and 64-wide heads), the state beyond.

    Args: as :func:`.training.cross_rfa_state`.
    """
    source, features, columns = phi_k.size(-2), phi_k.size(-1), v.size(-1) + 1
    if source * (features + columns) < features * columns:
        return {"keys": phi_k.float().contiguous(), "values": weighted_values(v, key_weight).contiguous()}
    return {"state": cross_rfa_state(phi_k, v, key_weight)}


def cross_rfa_read(phi_q: Tensor, summary: Dict[str, Tensor]) -> Tensor:
    """φ(q)·S / φ(q)·z from a :func:`cross_rfa_summary`: phi_q [batch, heads, time, F] →
    [batch, heads, time, dv]."""
    if "state" in summary:
        return cross_rfa_readout(phi_q, summary["state"])
    return normalised((phi_q.float() @ summary["keys"].transpose(-1, -2)) @ summary["values"])
