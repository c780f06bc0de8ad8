"""Incremental form of causal RFA: one token and constant work per step, for beam search.

:func:`causal_decoding_step` is what decoding runs: a short prefix is kept as its keys and
values (:func:`causal_keys_step`), which is less to read, update and reorder than the state
until the prefix reaches ``F (dv + 1) / (F + dv + 1)`` tokens (32 at the paper's causal sizes),
and as the state after that (:func:`causal_rfa_step`, constant work per step). A decay per
feature (the feature gate, ``forget`` [batch, heads, F]) works in both: it scales the features of
the kept keys as it scales the rows of the state, ``Diag(f) Σ φ(k) [v, 1]ᵀ = Σ (f ⊙ φ(k)) [v, 1]ᵀ``.
:func:`incremental_causal_rfa` runs it over a sequence with the signature of the other forms
(:mod:`.reference`); cross RFA's incremental form is the module's cached source summary
(:func:`.training.cross_rfa_summary`), read at every step (:func:`.training.cross_rfa_read`).
"""

from typing import Dict, Optional, Tuple

import torch
from torch import Tensor

from .state import column_major_state, is_column_major, normalised, state_readout, with_ones
from .training import keys_readout

# what a decoding causal attention keeps of its prefix (causal_decoding_step): the state, or while
# the prefix is short its keys and values, the rows of them that beam search's reorders chose since
# the last step, and the buffers that the next extension of the keys is written into
PREFIX_NAMES = ("state", "keys", "values", "rows", "spare_prefix", "spare_state")


def causal_rfa_step(phi_q: Tensor, phi_k: Tensor, v: Tensor, state: Optional[Tensor],
                    forget: Optional[Tensor] = None, key_weight: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """Incremental form: one token, constant work. Returns out [batch, heads, dv], new state.

    Args:
        phi_q, phi_k: [batch, heads, F] (any strides); v: [batch, heads, dv]
        state: [batch, heads, F, dv + 1] or None (empty prefix)
        forget: [batch, heads] f_t (None: 1), or [batch, heads, F]: a decay per feature (the
            state's rows); key_weight: [batch, heads] c_t (None: 1)
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
            gate = forget.float().view(batch, heads, -1, 1)  # 1 or F rows
            state = state.mul_(gate) if in_place else state * gate
        state = state.addcmul_(column, row) if in_place else torch.addcmul(state, column, row)
        if not (state.is_contiguous() or is_column_major(state)):
            state = state.contiguous()  # a product of strided features may come out in their layout
    flat_state = state.reshape(batch * heads, features, -1)  # a view in either layout
    out = state_readout(phi_q.reshape(batch * heads, 1, features), flat_state)
    return normalised(out.view(batch, heads, -1)), state


def keys_capacity(features: int, columns: int) -> int:
    """The longest prefix that causal decoding keeps as its keys (:func:`causal_decoding_step`):
    the largest ``t`` with ``t (F + dv + 1) < F (dv + 1)`` (32 at the paper's causal sizes)."""
    return max(0, (features * columns - 1) // (features + columns))


def prefix_buffer_floats(batch: int, heads: int, features: int, columns: int) -> int:
    """Size of one buffer of a decoding prefix (:func:`causal_decoding_step`): room for the keys
    and values of the longest prefix kept as keys, and for the state that follows them."""
    capacity = keys_capacity(features, columns)
    return batch * heads * max(capacity * (features + columns), features * columns)


def causal_keys_step(phi_q: Tensor, phi_k: Tensor, v: Tensor, keys: Optional[Tensor], values: Optional[Tensor],
                     forget: Optional[Tensor] = None, key_weight: Optional[Tensor] = None,
                     rows: Optional[Tensor] = None, spare: Optional[Tensor] = None) -> Tuple[Tensor, Tensor, Tensor]:
    """:func:`causal_rfa_step` with the prefix kept as its keys: the same sums, re-associated,
    ``(φ(q)·φ(K)ᵀ)·[v, 1]`` in place of ``φ(q)·S``. Returns out [batch, heads, dv] and the
    prefix with this token, keys [batch, heads, t + 1, F] and values [batch, heads, t + 1, dv + 1].

    Args: as :func:`causal_rfa_step`, and
        keys, values: the prefix, [batch', heads, t, F] (each φ(k) times its weights so far: its
            key weight c and the forget gates since) and [batch', heads, t, dv + 1] ([v, 1]),
            contiguous; None: an empty prefix
        rows: [batch], the prefix row each row continues (beam search's reorders, applied in the
            same copy that extends the prefix); None: row i continues row i
        spare: a 1-D buffer to write the extended keys and values into when nothing needs a
            gradient (decoding: the one the previous step left, so that no step allocates); too
            small or None: a new one of :func:`prefix_buffer_floats`
    """
    batch, heads, features = phi_q.shape
    phi_k = phi_k.float()
    if key_weight is not None:
        phi_k = phi_k * key_weight.float().unsqueeze(-1)
    key, value = phi_k.unsqueeze(2), with_ones(v.float()).unsqueeze(2)
    length = 0 if keys is None else keys.size(2)
    # f_t, or a decay per feature: the columns of the keys, as it is the rows of the state
    gate = None if forget is None or keys is None else forget.float().view(batch, heads, 1, -1)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (keys, values, key, value, gate)):
        if keys is not None and rows is not None:
            keys, values = keys.index_select(0, rows), values.index_select(0, rows)
        if gate is not None:  # f_t decays every earlier key: S_t = f_t S_{t-1} + ...
            keys = keys * gate
        keys = key if keys is None else torch.cat([keys, key], dim=2)
        values = value if values is None else torch.cat([values, value], dim=2)
    else:
        columns = value.size(-1)
        if spare is None or spare.numel() < batch * heads * (length + 1) * (features + columns):
            spare = key.new_empty(max(prefix_buffer_floats(batch, heads, features, columns),
                                      batch * heads * (length + 1) * (features + columns)))
        extended = _prefix_views(spare, batch, heads, length + 1, features, columns)
        for old, new, out in zip((keys, values), (key, value), extended):
            if old is not None:
                if rows is None:
                    out[:, :, :length].copy_(old)
                else:
                    torch.index_select(old, 0, rows, out=out[:, :, :length])
            out[:, :, length] = new[:, :, 0]
        keys, values = extended
        if gate is not None:
            keys[:, :, :length].mul_(gate)
    out = keys_readout(phi_q.unsqueeze(2), keys, values)
    return normalised(out.squeeze(2)), keys, values


def _prefix_views(buffer: Tensor, batch: int, heads: int, length: int, features: int,
                  columns: int) -> Tuple[Tensor, Tensor]:
    """Keys [batch, heads, length, F] and values [batch, heads, length, columns], contiguous, one
    after the other at the start of a 1-D buffer."""
    split = batch * heads * length * features
    return (buffer[:split].view(batch, heads, length, features),
            buffer[split:split + batch * heads * length * columns].view(batch, heads, length, columns))


def _state_view(buffer: Tensor, batch: int, heads: int, features: int, columns: int) -> Tensor:
    """A column-major state [batch, heads, F, columns] at the start of a 1-D buffer."""
    return column_major_state(buffer[:batch * heads * columns * features].view(batch, heads, columns, features))


def keys_to_state(keys: Tensor, values: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """The state of a prefix kept as its keys (:func:`causal_keys_step`): ``Σ φ(k) [v, 1]ᵀ``
    [batch, heads, F, dv + 1], column-major (state.py); ``out``: a column-major state to write it
    into (not with autograd)."""
    if out is None:
        return column_major_state(values.transpose(-1, -2) @ keys)
    batch, heads, length, features = keys.shape
    columns = values.size(-1)
    torch.bmm(values.reshape(-1, length, columns).transpose(1, 2), keys.reshape(-1, length, features),
              out=out.transpose(-1, -2).view(-1, columns, features))
    return out


def causal_decoding_step(phi_q: Tensor, phi_k: Tensor, v: Tensor, prefix: Dict[str, Optional[Tensor]],
                         forget: Optional[Tensor] = None, key_weight: Optional[Tensor] = None) -> Tensor:
    """One decoding step in the cheaper exact form of the prefix: out [batch, heads, dv].

    ``prefix`` holds what :data:`PREFIX_NAMES` names (empty: no prefix) and is updated in place:
    the keys and values (:func:`causal_keys_step`) while ``t (F + dv + 1) < F (dv + 1)`` for the
    ``t`` tokens read this step (reading, extending and reordering them then moves less memory
    than the state does), the state from then on, built once from the keys when the prefix
    outgrows them. ``rows`` are beam search's reorders not yet applied to the keys. In decoding
    (no autograd) the prefix lives in two buffers that take turns, ``spare_prefix`` being the one
    free: the keys, then the state and the spare that the next reorder gathers it into
    (``spare_state``), so that memory is neither allocated nor freed while a batch decodes (freeing
    and allocating buffers of a few MB every step raised the peak memory by 7%, through the
    allocator). Arguments as :func:`causal_rfa_step`."""
    state, keys, values, rows = (prefix.get(name) for name in ("state", "keys", "values", "rows"))
    if state is None:
        features, columns = phi_q.size(-1), v.size(-1) + 1
        length = 0 if keys is None else keys.size(2)
        if length < keys_capacity(features, columns):
            out, new_keys, new_values = causal_keys_step(phi_q, phi_k, v, keys, values, forget, key_weight, rows,
                                                         prefix.get("spare_prefix"))
            # the old prefix's buffer is the next step's spare
            prefix.update(keys=new_keys, values=new_values, rows=None, spare_prefix=_flat(keys, new_keys))
            return out
        if keys is not None:
            batch, heads = phi_q.shape[:2]
            old, spare = _flat(keys, keys), prefix.get("spare_prefix")
            if old is None:  # autograd
                if rows is not None:
                    keys, values = keys.index_select(0, rows), values.index_select(0, rows)
                state = keys_to_state(keys, values)
            else:
                if spare is None or spare.numel() < prefix_buffer_floats(batch, heads, features, columns):
                    spare = keys.new_empty(prefix_buffer_floats(batch, heads, features, columns))
                if rows is not None:  # gathered into the spare, the state built in the keys' buffer
                    gathered = _prefix_views(spare, batch, heads, length, features, columns)
                    for tensor, out in zip((keys, values), gathered):
                        torch.index_select(tensor, 0, rows, out=out)
                    (keys, values), spare, old = gathered, old, spare
                state = keys_to_state(keys, values, out=_state_view(spare, batch, heads, features, columns))
                prefix["spare_state"] = _state_view(old, batch, heads, features, columns)
        prefix.update(keys=None, values=None, rows=None, spare_prefix=None)
    out, prefix["state"] = causal_rfa_step(phi_q, phi_k, v, state, forget, key_weight)
    return out


def _flat(old: Optional[Tensor], new: Tensor) -> Optional[Tensor]:
    """The whole buffer behind a decoding prefix, 1-D, to be reused (None: none, or one that
    autograd may still need)."""
    if old is None or old.requires_grad or new.requires_grad or (
            new is not old and old.untyped_storage().data_ptr() == new.untyped_storage().data_ptr()):
        return None
    return old.new_empty(0).set_(old.untyped_storage())


def incremental_causal_rfa(phi_q: Tensor, phi_k: Tensor, v: Tensor, log_forget: Optional[Tensor] = None,
                           key_weight: Optional[Tensor] = None,
                           initial_state: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """:func:`causal_decoding_step` over a whole sequence (what beam search does, one call per
    token, short prefixes as their keys); the arguments and results of
    :func:`.reference.reference_causal_rfa`."""
    # the step updates a state in place when nothing needs its gradient: never the caller's
    prefix, outputs = ({} if initial_state is None else {"state": initial_state.clone()}), []
    for t in range(phi_q.size(2)):
        forget = None if log_forget is None else log_forget[:, :, t].exp()
        weight = None if key_weight is None else key_weight[:, :, t]
        outputs.append(causal_decoding_step(phi_q[:, :, t], phi_k[:, :, t], v[:, :, t], prefix, forget, weight))
    state = prefix.get("state")
    if state is None:
        state = keys_to_state(prefix["keys"], prefix["values"]) if prefix.get("keys") is not None else \
            v.new_zeros(v.size(0), v.size(1), phi_k.size(-1), v.size(-1) + 1, dtype=torch.float32)
    return torch.stack(outputs, dim=2), state
