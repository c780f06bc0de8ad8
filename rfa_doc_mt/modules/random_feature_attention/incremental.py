"""Incremental form of causal RFA: one token and constant work per step, for beam search.

:func:`incremental_causal_rfa` runs the step over a sequence with the signature of the other
forms (:mod:`.reference`); cross RFA's incremental form is the module's cached source
summary (:func:`.training.cross_rfa_summary`), read at every step (:func:`.training.cross_rfa_read`).
"""

from typing import Optional, Tuple

import torch
from torch import Tensor

from .state import column_major_state, is_column_major, normalised, state_readout, with_ones


def causal_rfa_step(phi_q: Tensor, phi_k: Tensor, v: Tensor, state: Optional[Tensor],
                    forget: Optional[Tensor] = None, key_weight: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """Incremental form: one token, constant work. Returns out [batch, heads, dv], new state.

    Args:
        phi_q, phi_k: [batch, heads, F] (any strides); v: [batch, heads, dv]
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
    stored_in_order = state is not None and (state.is_contiguous() or is_column_major(state))
    in_place = stored_in_order and not (torch.is_grad_enabled() and (
        state.requires_grad or phi_k.requires_grad or values.requires_grad or
        (forget is not None and forget.requires_grad)))
    # S_t = f_t S_{t-1} + c_t φ(k_t) [v_t, 1]ᵀ: the outer product as one broadcast multiply-add,
    # a single pass over the state
    column, row = phi_k.unsqueeze(-1), values.unsqueeze(-2)
    if state is None:
        # a new state is kept column-major (state.py): the readout's faster product order
        state = column_major_state((row.transpose(-1, -2) * column.transpose(-1, -2)).contiguous())
    else:
        if forget is not None:
            gate = forget.float().view(batch, heads, 1, 1)
            state = state.mul_(gate) if in_place else state * gate
        state = state.addcmul_(column, row) if in_place else torch.addcmul(state, column, row)
        if not (state.is_contiguous() or is_column_major(state)):
            state = state.contiguous()  # a product of strided features may come out in their layout
    flat_state = state.reshape(batch * heads, features, -1)  # a view in either layout
    out = state_readout(phi_q.reshape(batch * heads, 1, features), flat_state)
    return normalised(out.view(batch, heads, -1)), state


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
