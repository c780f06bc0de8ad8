"""Incremental form of causal RFA: one token and constant work per step, for beam search.

:func:`incremental_causal_rfa` runs the step over a sequence with the signature of the other
forms (:mod:`.reference`); cross RFA's incremental form is the module's cached source
summary (:func:`.training.cross_rfa_summary`), read at every step (:func:`.training.cross_rfa_read`).
"""

from typing import Optional, Tuple

import torch
from torch import Tensor

from .state import normalised, with_ones


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
