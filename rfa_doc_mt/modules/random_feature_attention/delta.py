"""The delta rule on RFA's causal state, in its three forms (``--rfa-update delta``).

Additive RFA only ever adds to its state, ``S_t = f_t S_{t-1} + c_t φ(k_t) [v_t, 1]ᵀ``: what a key
stored stays there, decayed, however often the key comes back. The delta rule (Schlag et al. 2021,
*Linear Transformers Are Secretly Fast Weight Programmers*) writes the difference between the new
value and what the state already holds for the key, so that a key's value is overwritten::

    S_t = α_t (I - b_t k̂_t k̂_tᵀ) S_{t-1} + b_t k̂_t v_tᵀ,     o_t = S_tᵀ q̂_t

    k̂ = φ(k) / |φ(k)|,  q̂ = φ(q) / |φ(q)|     unit-norm random features of RFA's feature map
    b_t = β_t c_t,  β_t = σ(w_β·x_t + b_β)      the write strength per head and token, in [0, 1]
    α_t = f_t                                  the gate per head (1 without one)

(the Fourier map's features have unit norm already, Σ (sin² + cos²) / D = 1; the positive map's
are rescaled). ``c_t`` is the forms' ``key_weight``, as in additive RFA a weight of what token t
writes: 0 at padding, where ``α = 1`` too, so that padding leaves the state as it was; the model
(:class:`.layers.RandomFeatureCausalAttention`) passes 1 elsewhere. Equivalently ``S_t = S' + b_t
k̂_t (v_t - S'ᵀ k̂_t)ᵀ`` with ``S' = α_t S_{t-1}``: the state is corrected towards predicting v_t
from k̂_t, one step of gradient descent on ``½ |S'ᵀ k̂_t - v_t|²`` with learning rate b_t. With a
gate it is the gated delta rule (Yang et al. 2025, *Gated Delta Networks*).

**No normaliser.** The state is ``[batch, heads, F, dv]`` (no z column) and the output is
``Sᵀ q̂``, as in the published delta rule: nothing is divided and :data:`.state.NORMALISER_FLOOR`
plays no part. A z column updated by the same rule (a value of 1 for every key) would not be a
sum of attention weights any more: ``q̂·z`` would be near 1 for queries near stored keys and near
0, or negative, for others, and dividing by it (floored) would scale outputs by up to 10 in
places nothing controls. The readout needs no normaliser to stay bounded: with ``|k̂| = 1`` and
``b ∈ [0, 1]`` no update ``α (I - b k̂k̂ᵀ)`` lengthens a vector (eigenvalues α(1 - b) along k̂, α
across), and each column of the state obeys ``|S_t e_d|² ≤ |S_{t-1} e_d|² + b_t v_{t,d}²``, so
``|o_{t,d}| ≤ (|S_0 e_d|² + Σ_{i≤t} b_i v_{i,d}²)^½``.

The forms (the signature of RFA's causal forms with the write strength after the values,
``(phi_q, phi_k, v, beta, log_forget, key_weight, initial_state) -> (out, final_state)``; the
features are made unit vectors inside):

* :func:`reference_delta_rule`: the recurrence token by token, in the inputs' precision (fp64 stays
  fp64: the tests' exact values);
* :func:`chunked_delta_rule`: the training form, chunks of C tokens in the WY (UT-transform) form
  of Yang et al. 2024 (delta rule; *Parallelizing Linear Transformers with the Delta Rule over
  Sequence Length*), with the decays inside a chunk as Gated Delta Networks take them: linear in
  time and memory, differentiable;
* :func:`delta_rule_step` and :func:`incremental_delta_rule`: one token per call, constant work,
  for beam search (the module keeps the state in fairseq's incremental state).

A gate per feature (GLA's, ``log_forget`` [batch, heads, time, F]) is refused: the delta rule
here takes one gate per head, as Gated Delta Networks do.
"""

from typing import Optional, Tuple

import torch
from torch import Tensor

from .features import l2_normalise

# how the causal state is updated: additive RFA, or the delta rule (this module)
STATE_UPDATES = ("add", "delta")
# the gates the delta rule takes in the model: one per head (sgate-avg differs from sgate only by a key
# weight, which the model's delta rule does not apply; see layers.RandomFeatureCausalAttention)
DELTA_GATES = ("none", "sgate", "token")
# training-form chunk length (as fla's chunked delta-rule kernels)
DELTA_CHUNK_SIZE = 64


def compute_dtype(*tensors: Optional[Tensor]) -> torch.dtype:
    """fp32, or fp64 when an input is fp64: half-precision inputs are computed in fp32, as all of
    RFA, and an fp64 input keeps fp64 (the reference's exact values in the tests)."""
    dtype = torch.float32
    for tensor in tensors:
        if tensor is not None:
            dtype = torch.promote_types(dtype, tensor.dtype)
    return dtype


def delta_inputs(phi_q: Tensor, phi_k: Tensor, v: Tensor, beta: Tensor, gate: Optional[Tensor],
                 key_weight: Optional[Tensor]) -> Tuple[Tensor, Tensor, Tensor, Tensor, Optional[Tensor]]:
    """q̂, k̂ (unit vectors of the features), v, the write strength ``b = β c`` and the gate (log α
    of a sequence, or α of a step, one per head: the shape of ``beta``), in :func:`compute_dtype`;
    any leading dimensions (a sequence or one token)."""
    if gate is not None and gate.shape != beta.shape:
        raise ValueError(f"the delta rule takes one gate per head, of the shape of beta {tuple(beta.shape)}, "
                         f"not {tuple(gate.shape)} (a gate per feature is not supported)")
    dtype = compute_dtype(phi_q, phi_k, v, beta, gate, key_weight)
    q, k = l2_normalise(phi_q.to(dtype)), l2_normalise(phi_k.to(dtype))
    strength = beta.to(dtype) if key_weight is None else beta.to(dtype) * key_weight.to(dtype)
    return q, k, v.to(dtype), strength, None if gate is None else gate.to(dtype)


def reference_delta_rule(phi_q: Tensor, phi_k: Tensor, v: Tensor, beta: Tensor,
                         log_forget: Optional[Tensor] = None, key_weight: Optional[Tensor] = None,
                         initial_state: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """The (gated) delta rule token by token, as written in the module docstring: out
    [batch, heads, time, dv] and the state after the last token [batch, heads, F, dv].

    Args:
        phi_q, phi_k: [batch, heads, time, F] (made unit vectors here); v: [batch, heads, time, dv]
        beta: [batch, heads, time], β_t ∈ [0, 1]
        log_forget: [batch, heads, time], log α_t ≤ 0, or None (α = 1)
        key_weight: [batch, heads, time], c_t ∈ [0, 1] (0 at padding), or None (c = 1)
        initial_state: [batch, heads, F, dv] or None (zero)
    """
    q, k, v, strength, log_forget = delta_inputs(phi_q, phi_k, v, beta, log_forget, key_weight)
    batch, heads, time, features = q.shape
    state = q.new_zeros(batch, heads, features, v.size(-1)) if initial_state is None else \
        initial_state.to(q.dtype)
    outputs = []
    for t in range(time):
        k_t, b_t = k[:, :, t], strength[:, :, t, None, None]
        if log_forget is not None:
            state = log_forget[:, :, t, None, None].exp() * state  # α_t S_{t-1}
        # (I - b k̂ k̂ᵀ) S + b k̂ vᵀ
        state = state - b_t * k_t.unsqueeze(-1) * (k_t.unsqueeze(-2) @ state) + \
            b_t * k_t.unsqueeze(-1) * v[:, :, t].unsqueeze(-2)
        outputs.append((q[:, :, t].unsqueeze(-2) @ state).squeeze(-2))  # S_tᵀ q̂_t
    out = torch.stack(outputs, dim=2) if outputs else v.new_zeros(batch, heads, 0, v.size(-1))
    return out, state


def chunked_delta_rule(phi_q: Tensor, phi_k: Tensor, v: Tensor, beta: Tensor, log_forget: Optional[Tensor] = None,
                       key_weight: Optional[Tensor] = None, initial_state: Optional[Tensor] = None,
                       chunk_size: int = DELTA_CHUNK_SIZE,
                       final_state: bool = True) -> Tuple[Tensor, Optional[Tensor]]:
    """Training form, the chunkwise WY form of Yang et al. 2024 (delta rule) with the decays of
    Yang et al. 2025: the arguments and results of :func:`reference_delta_rule`; chunks of
    ``chunk_size`` tokens (a short last one is filled with zero keys and strengths and gates of 1,
    which write and decay nothing); with ``final_state=False`` the state after the last chunk is
    neither built nor returned.

    Inside a chunk whose first token reads the state S_0 (B_t: the cumulative log α from the
    chunk's start, ``γ_t = e^{B_t}``), the recurrence unrolls to
    ``S_t = γ_t S_0 + Σ_{i≤t} e^{B_t - B_i} k̂_i u_iᵀ`` with the writes
    ``u_t = b_t (v_t - γ_t S_0ᵀ k̂_t - Σ_{i<t} e^{B_t - B_i} (k̂_t·k̂_i) u_i)``, a lower-triangular
    system for all the writes of the chunk at once::

        (I + A) U = diag(b) (V - diag(γ) K S_0),     A_ti = b_t e^{B_t - B_i} k̂_t·k̂_i  (i < t)

        T = (I + A)⁻¹ diag(b),   U = T V - W S_0,   W = T diag(γ) K          (the WY form)
        O = diag(γ) Q S_0 + (Q Kᵀ ⊙ D) U,          D_ti = e^{B_t - B_i} (i ≤ t), else 0
        S_C = γ_C S_0 + (diag(e^{B_C - B}) K)ᵀ U

    T V and T diag(γ) K come from one forward substitution (``torch.linalg.solve_triangular``)
    for every chunk at once, as they do not depend on the state; only ``U = T V - W S_0``, the
    outputs and the state pass from chunk to chunk. Every exponent is a difference ``B_x - B_y``
    with y ≤ x, never positive: nothing overflows whatever the gates. What autograd keeps is
    linear in the length ([chunk, chunk] per chunk, the state per chunk).
    """
    q, k, v, strength, log_forget = delta_inputs(phi_q, phi_k, v, beta, log_forget, key_weight)
    batch, heads, time, features = q.shape
    dv = v.size(-1)
    state = None if initial_state is None else initial_state.to(q.dtype)  # None: zero so far
    if time == 0:
        if not final_state:
            return v.new_zeros(batch, heads, 0, dv), None
        return v.new_zeros(batch, heads, 0, dv), q.new_zeros(batch, heads, features, dv) if state is None else state
    chunk = max(1, min(chunk_size, time))
    chunks = -(-time // chunk)
    if log_forget is None:
        log_forget = strength.new_zeros(strength.shape)
    fill = chunks * chunk - time
    if fill:
        pad = torch.nn.functional.pad
        q, k, v = (pad(x, (0, 0, 0, fill)) for x in (q, k, v))
        strength, log_forget = pad(strength, (0, fill)), pad(log_forget, (0, fill))
    q, k, v = (x.view(batch, heads, chunks, chunk, x.size(-1)) for x in (q, k, v))
    strength, log_forget = (x.view(batch, heads, chunks, chunk) for x in (strength, log_forget))
    cumulative = log_forget.cumsum(-1)  # B from each chunk's start: [batch, heads, chunks, chunk]
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    strictly_lower = causal.tril(-1)
    # D_ti = e^{B_t - B_i} for i ≤ t; the pairs i > t (positive exponents) are dropped before exp
    decay = (cumulative.unsqueeze(-1) - cumulative.unsqueeze(-2)).masked_fill(~causal, float("-inf")).exp()
    lower = (strength.unsqueeze(-1) * (k @ k.transpose(-1, -2)) * decay).masked_fill(~strictly_lower, 0.0)
    # T [V, diag(γ) K] = (I + A)⁻¹ diag(b) [V, diag(γ) K]: one forward substitution (the unit
    # diagonal of I + A is implied, so A alone is passed)
    start_decay = cumulative.exp().unsqueeze(-1)  # γ_t = e^{B_t}: [batch, heads, chunks, chunk, 1]
    right = strength.unsqueeze(-1) * torch.cat([v, k * start_decay], dim=-1)
    solved = torch.linalg.solve_triangular(lower, right, upper=False, unitriangular=True)
    writes, from_state = solved.split([dv, features], dim=-1)  # T V and W
    scores = (q @ k.transpose(-1, -2)) * decay  # Q Kᵀ ⊙ D
    queries = q * start_decay  # diag(γ) Q: reads S_0
    to_end = cumulative[..., -1:] - cumulative  # B_C - B_t ≤ 0
    keys = k * to_end.exp().unsqueeze(-1)  # diag(e^{B_C - B}) K: writes into S_C
    chunk_decay = cumulative[..., -1].exp()  # γ_C: [batch, heads, chunks]
    outputs = []
    for index in range(chunks):
        if state is None:
            u = writes[:, :, index]
            outputs.append(scores[:, :, index] @ u)
        else:
            u = writes[:, :, index] - from_state[:, :, index] @ state
            outputs.append(queries[:, :, index] @ state + scores[:, :, index] @ u)
        if index + 1 < chunks or final_state:
            added = keys[:, :, index].transpose(-1, -2) @ u
            state = added if state is None else chunk_decay[:, :, index, None, None] * state + added
    out = torch.stack(outputs, dim=2).view(batch, heads, chunks * chunk, dv)[:, :, :time]
    if not final_state:
        return out, None
    return out, state


def delta_rule_step(phi_q: Tensor, phi_k: Tensor, v: Tensor, beta: Tensor, state: Optional[Tensor],
                    forget: Optional[Tensor] = None, key_weight: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """Incremental form: one token, constant work. Returns out [batch, heads, dv] and the new
    state [batch, heads, F, dv] (a new tensor: the state given is left as it was).

    Args:
        phi_q, phi_k: [batch, heads, F]; v: [batch, heads, dv]; beta: [batch, heads]
        state: [batch, heads, F, dv] or None (nothing before)
        forget: [batch, heads] α_t (None: 1); key_weight: [batch, heads] c_t (None: 1)
    """
    q, k, v, strength, forget = delta_inputs(phi_q, phi_k, v, beta, forget, key_weight)
    if state is None:
        state = q.new_zeros(*q.shape, v.size(-1))
    else:
        state = state.to(q.dtype)
        if forget is not None:
            state = forget[..., None, None] * state
    # what the decayed state predicts for k̂_t, and the write that corrects it towards v_t
    predicted = (k.unsqueeze(-2) @ state).squeeze(-2)  # S'ᵀ k̂: [batch, heads, dv]
    write = strength.unsqueeze(-1) * (v - predicted)
    state = state + k.unsqueeze(-1) * write.unsqueeze(-2)
    return (q.unsqueeze(-2) @ state).squeeze(-2), state


def incremental_delta_rule(phi_q: Tensor, phi_k: Tensor, v: Tensor, beta: Tensor,
                           log_forget: Optional[Tensor] = None, key_weight: Optional[Tensor] = None,
                           initial_state: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """:func:`delta_rule_step` over a whole sequence (what beam search does, one call per token);
    the arguments and results of :func:`reference_delta_rule`."""
    state, outputs = initial_state, []
    for t in range(phi_q.size(2)):
        forget = None if log_forget is None else log_forget[:, :, t].exp()
        weight = None if key_weight is None else key_weight[:, :, t]
        out, state = delta_rule_step(phi_q[:, :, t], phi_k[:, :, t], v[:, :, t], beta[:, :, t], state, forget, weight)
        outputs.append(out)
    if outputs:
        return torch.stack(outputs, dim=2), state
    # no tokens: nothing read, the state as it was (zero without one)
    batch, heads, _, features = phi_q.shape
    dtype = compute_dtype(phi_q, phi_k, v, beta)
    state = v.new_zeros(batch, heads, features, v.size(-1), dtype=dtype) if state is None else state.to(dtype)
    return v.new_zeros(*v.shape, dtype=dtype), state
