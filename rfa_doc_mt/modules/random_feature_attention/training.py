"""Training forms of RFA: linear in time and memory, differentiable (same signatures as
:mod:`.reference`)."""

import functools
import math
from typing import Dict, Optional, Tuple

import torch
from torch import Tensor

from .features import fourier_angle_grad, fourier_rows
from .state import normalised, state_readout, with_ones

# Training-form chunk length: quadratic work inside a chunk, recurrent state between chunks.
CHUNK_SIZE = 64
# The same for a decay per feature (chunked_per_feature_causal_rfa): a power of two
PER_FEATURE_CHUNK_SIZE = 64
# The largest decay, -log, inside one chunk for which the per-feature form takes GLA's one-product
# chunk form: its factors e^{±B} then stay within e^{±60} (1e-26 to 1e26), far inside fp32's range
FACTORED_DECAY_LIMIT = 60.0


@functools.lru_cache(maxsize=64)
def triangle(size: int, diagonal: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """``[size, size]`` of ones on and below ``diagonal`` (``tril``), zeros above; made once per
    shape, type and device and shared (never written to): each is two kernels a step otherwise.
    Made outside inference mode, so that a first call under it leaves a tensor autograd can save."""
    with torch.inference_mode(False):
        return torch.ones(size, size, dtype=dtype, device=device).tril(diagonal)


def chunked_causal_rfa(phi_q: Tensor, phi_k: Tensor, v: Tensor, log_forget: Optional[Tensor] = None,
                       key_weight: Optional[Tensor] = None, initial_state: Optional[Tensor] = None,
                       chunk_size: int = CHUNK_SIZE, final_state: bool = True) -> Tuple[Tensor, Optional[Tensor]]:
    """Training form, linear in time and memory: out [batch, heads, time, dv], final state.

    The state is ``[batch, heads, F, dv + 1]`` (S with z as its last column, see
    :func:`.state.split_state`). Inside a chunk the quadratic form runs with decays relative to the
    chunk start; the state carries everything before it (same arguments as
    :func:`.reference.reference_causal_rfa`). With ``final_state=False`` the state after the last
    chunk is not returned (``None``): a training step that only needs the outputs. A
    ``log_forget`` of one gate per feature, [batch, heads, time, F], runs
    :func:`chunked_per_feature_causal_rfa` (with chunks of the largest power of two ≤ ``chunk_size``).

    Every chunk at once, as batched products over a chunk dimension (the sequence filled up to
    whole chunks with zero keys, queries and log gates, which add, read and decay nothing): a
    training step launches as many kernels whatever its length, where a loop over chunks would
    launch a dozen per chunk, forward and backward (on a GPU a training step of paper-size models
    is bound by launching kernels). What each chunk adds to the state, ``A_j = Σ_{i∈j} k_i [v_i,
    1]ᵀ`` decayed to the chunk's end, reaches chunk ``j`` through the decay between the chunks:
    the state chunk ``j`` starts from is ``Σ_{i<j} e^{T_{j-1} - T_i} A_i`` (``T`` the cumulative
    sum of the chunks' log decays, so every exponent is ≤ 0), one product with a lower-triangular
    ``[chunks, chunks]`` matrix; without gates, of ones below the diagonal. The memory is
    that of the loop (a state per chunk, which autograd keeps either way).
    """
    if log_forget is not None and log_forget.dim() == 4:
        return chunked_per_feature_causal_rfa(phi_q, phi_k, v, log_forget, key_weight, initial_state,
                                              chunk_size=chunk_size, final_state=final_state)
    batch, heads, time, features = phi_q.shape
    phi_q, phi_k = phi_q.float(), phi_k.float()
    columns = v.size(-1) + 1
    if key_weight is not None:
        phi_k = phi_k * key_weight.float().unsqueeze(-1)
    if time == 0:
        state = phi_q.new_zeros(batch, heads, features, columns) if initial_state is None else initial_state.float()
        return v.float(), (state if final_state else None)
    chunk = max(1, min(chunk_size, time))
    chunks = -(-time // chunk)
    filled = chunks * chunk - time  # zero keys, queries and log gates after the last token

    def as_chunks(x: Tensor) -> Tensor:  # [batch, heads, time, ...] → [batch, heads, chunks, chunk, ...]
        if filled:
            x = torch.nn.functional.pad(x, (0, 0) * (x.dim() - 3) + (0, filled))
        return x.reshape(batch, heads, chunks, chunk, *x.shape[3:])

    # the values' filler rows meet only zero keys: with_ones fills them (with ones) in its own pad
    q, k = as_chunks(phi_q), as_chunks(phi_k)
    val = with_ones(v.float(), filled).view(batch, heads, chunks, chunk, columns)
    scores = q @ k.transpose(-1, -2)  # [batch, heads, chunks, chunk, chunk]
    needs_added = chunks > 1 or final_state
    if log_forget is None:
        out = scores.tril() @ val  # a key reaches the queries at and after it
        added = k.transpose(-1, -2) @ val if needs_added else None  # [batch, heads, chunks, F, dv + 1]
        if chunks > 1:  # the state each chunk starts from: what the chunks before it added
            earlier = triangle(chunks, -1, added.dtype, added.device)
            before = (earlier @ added.flatten(-2)).view(added.shape)
            if initial_state is not None:
                before = before + initial_state.float().unsqueeze(2)
            out = out + q @ before
        elif initial_state is not None:
            out = out + q @ initial_state.float().unsqueeze(2)
        out = normalised(out.reshape(batch, heads, -1, columns)[:, :, :time] if filled else
                         out.view(batch, heads, time, columns))
        if not final_state:
            return out, None
        return out, (added.sum(2) if initial_state is None else initial_state.float() + added.sum(2))
    causal = triangle(chunk, 0, torch.bool, q.device)
    cumulative = as_chunks(log_forget.float().unsqueeze(-1)).squeeze(-1).cumsum(-1)  # log Π f from each chunk's start
    log_decay = (cumulative.unsqueeze(-1) - cumulative.unsqueeze(-2)).masked_fill(~causal, float("-inf"))
    out = (scores * log_decay.exp()) @ val
    total = cumulative[..., -1]  # [batch, heads, chunks]: each chunk's log decay
    # the chunks' log decays summed to the end of chunk j (T_j), and to its start (T_{j-1}, T_{-1} = 0)
    through = total.cumsum(-1)
    upto = torch.nn.functional.pad(through[..., :-1], (1, 0))
    if needs_added:
        added = (k * (total.unsqueeze(-1) - cumulative).exp().unsqueeze(-1)).transpose(-1, -2) @ val
    read = q * cumulative.exp().unsqueeze(-1)  # a query reads the state its chunk starts from, decayed
    if chunks > 1:
        earlier = triangle(chunks, -1, torch.bool, q.device)
        between = (upto.unsqueeze(-1) - through.unsqueeze(-2)).masked_fill(~earlier, float("-inf")).exp()
        before = (between @ added.flatten(-2)).view(batch, heads, chunks, features, columns)
        if initial_state is not None:
            before = before + initial_state.float().unsqueeze(2) * upto.exp()[..., None, None]
        out = out + read @ before
    elif initial_state is not None:
        out = out + read @ initial_state.float().unsqueeze(2)
    out = normalised(out.reshape(batch, heads, -1, columns)[:, :, :time] if filled else
                     out.view(batch, heads, time, columns))
    if not final_state:
        return out, None
    # the state after the last chunk: every chunk's addition decayed to the end
    last = (through[..., -1:] - through).exp()  # [batch, heads, chunks]
    state = (last.unsqueeze(-2) @ added.flatten(-2)).view(batch, heads, features, columns)
    if initial_state is not None:
        state = state + initial_state.float() * through[..., -1].exp()[..., None, None]
    return out, state


def chunked_per_feature_causal_rfa(phi_q: Tensor, phi_k: Tensor, v: Tensor, log_forget: Tensor,
                                   key_weight: Optional[Tensor] = None, initial_state: Optional[Tensor] = None,
                                   chunk_size: int = PER_FEATURE_CHUNK_SIZE,
                                   final_state: bool = True) -> Tuple[Tensor, Optional[Tensor]]:
    """Training form with a decay per feature (GLA's gate on the random-feature state,
    :func:`.reference.reference_per_feature_causal_rfa`), linear in time and memory: log_forget
    [batch, heads, time, F], the other arguments and the results as :func:`chunked_causal_rfa`;
    chunks of the largest power of two ≤ ``chunk_size`` tokens (a short last chunk is filled with
    zero keys and gates of 1, which add and decay nothing).

    Numerics: the decay of key i for query t ≥ i is ``exp(B_t - B_i)`` per feature, B the
    cumulative sum of log f (B never increases: its terms are ≤ 0 and fp32 rounding is monotone).
    Between chunks only exponents ≤ 0 occur, as in the scalar form: a query reads the state left at
    its chunk's start s with ``q_t e^{B_t - B_s}``, a key adds to the state at the chunk's end e
    with ``k_i e^{B_e - B_i}``, and the state decays by ``e^{B_e - B_s}``. Inside a chunk (B from
    its start):

    * GLA's chunk form (Yang et al. 2024 §4.2), one product per chunk, ``(q_t e^{B_t})·(k_i
      e^{-B_i})``, when no chunk decays by more than e^-60 (``-B_e ≤`` :data:`FACTORED_DECAY_LIMIT`
      everywhere): every factor then lies within e^{±60} (1e-26 to 1e26), far inside fp32's normal
      range (1e-38 to 3e38), so each product is the decay to 2 roundings. Beyond, ``e^{-B_i}``
      would overflow (at -B > 88: 64 tokens of log f = -1.4);
    * else by halving, where every exponent is a difference ``B_x - B_y`` with y ≤ x, hence ≤ 0,
      and every factor lies in [0, 1], as GLA's secondary chunks (§4.3) but down to single tokens:
      in a block of 2m tokens, the queries of the second half read the keys of the first through
      ``(q_t e^{B_t - B_r})·(k_i e^{B_r - B_i})``, r the first half's last token (i ≤ r < t), one
      product per block; i = t has decay 1. Nothing overflows, whatever the gates; a factor
      underflows only where the decay it stands for is below 1e-38, and so is then its term. It
      costs about twice the one-product form (log2(chunk) rescalings of the queries and keys, and
      smaller products); what autograd keeps stays linear in the length.

    The feature gate reaches the halving only where a feature's α averages below e^{-60/64} =
    0.39 over a chunk of 64 tokens, a logit below -15 at GLA's τ = 16.
    """
    batch, heads, time, features = phi_q.shape
    # a power of two, no longer than the sequence needs (a short one is not filled up to a chunk)
    chunk = min(1 << (max(1, chunk_size).bit_length() - 1), 1 << max(0, time - 1).bit_length())
    phi_q, phi_k, log_forget = phi_q.float(), phi_k.float(), log_forget.float()
    values = with_ones(v.float())
    if key_weight is not None:
        phi_k = phi_k * key_weight.float().unsqueeze(-1)
    if time == 0:
        state = values.new_zeros(batch, heads, features, values.size(-1)) if initial_state is None else \
            initial_state.float()
        return values[..., :-1], (state if final_state else None)
    chunks = -(-time // chunk)
    if chunks * chunk > time:
        fill = (0, 0, 0, chunks * chunk - time)
        phi_q, phi_k, values, log_forget = (torch.nn.functional.pad(x, fill)
                                            for x in (phi_q, phi_k, values, log_forget))
    q, k, val, log_forget = (x.view(batch, heads, chunks, chunk, x.size(-1))
                             for x in (phi_q, phi_k, values, log_forget))
    cumulative = log_forget.cumsum(-2)  # B from each chunk's start: [batch, heads, chunks, chunk, F]
    # the one-product form where no chunk decays by more than e^-60, else halving (see above)
    if float(cumulative[..., -1, :].detach().min()) >= -FACTORED_DECAY_LIMIT:
        out = _within_chunks_factored(q, k, val, cumulative)
    else:
        out = _within_chunks_halving(q, k, val, cumulative)
    # the state each chunk leaves: Σ_i (k_i e^{B_e - B_i}) [v_i, 1]ᵀ for all chunks in one product,
    # then the recurrence between chunks, S ← e^{B_e} S + added (the rows decay)
    total = cumulative[..., -1:, :]  # B_e: [batch, heads, chunks, 1, F]
    added = (k * (total - cumulative).exp()).transpose(-1, -2) @ val  # [batch, heads, chunks, F, dv + 1]
    decay = total.transpose(-1, -2).exp()  # [batch, heads, chunks, F, 1]
    state = None if initial_state is None else initial_state.float()
    read = []  # the state at each chunk's start (None: nothing before)
    for index in range(chunks):
        read.append(state)
        if index + 1 < chunks or final_state:
            state = added[:, :, index] if state is None else state * decay[:, :, index] + added[:, :, index]
    first = 0 if read[0] is not None else 1  # the first chunk reading a state
    if first < chunks:
        from_state = (q[:, :, first:] * cumulative[:, :, first:].exp()) @ torch.stack(read[first:], dim=2)
        out = torch.cat([out[:, :, :first], out[:, :, first:] + from_state], dim=2)
    out = normalised(out.view(batch, heads, chunks * chunk, -1)[:, :, :time])
    if not final_state:
        return out, None
    return out, state


def _within_chunks_factored(q: Tensor, k: Tensor, values: Tensor, cumulative: Tensor) -> Tensor:
    """:func:`_within_chunks_halving` as GLA's chunk form, one product per chunk:
    ``(q_t e^{B_t})·(k_i e^{-B_i})``, for chunks in which ``-B ≤`` :data:`FACTORED_DECAY_LIMIT`."""
    chunk = q.size(-2)
    causal = triangle(chunk, 0, torch.bool, q.device)
    scores = (q * cumulative.exp()) @ (k * (-cumulative).exp()).transpose(-1, -2)
    # the pairs i > t hold e^{B_t - B_i} ≥ 1 (≤ e^60, finite): dropped, never multiplied
    return scores.masked_fill(~causal, 0.0) @ values


def _within_chunks_halving(q: Tensor, k: Tensor, values: Tensor, cumulative: Tensor) -> Tensor:
    """``Σ_{i ≤ t} Σ_f q_tf k_if e^{B_tf - B_if} [v_i, 1]`` over the keys i of each query t's own
    chunk, by halving (:func:`chunked_per_feature_causal_rfa`): q, k, cumulative (B from the chunk's
    start) [..., chunk, F], values [..., chunk, dv + 1], chunk a power of two → [..., chunk, dv + 1]."""
    *lead, chunk, features = q.shape
    out = (q * k).sum(-1, keepdim=True) * values  # i = t
    half = 1
    while half < chunk:
        blocks = (*lead, chunk // (2 * half), 2, half)
        # halves by unbind, whose backward stacks (a select's would fill a zero tensor per half)
        (_, q_second), (k_first, _), (values_first, _), (B_first, B_second) = (
            x.reshape(*blocks, x.size(-1)).unbind(-3) for x in (q, k, values, cumulative))
        reference = B_first[..., -1:, :]  # B_r, r the last token of each block's first half
        queries = q_second * (B_second - reference).exp()  # e^{B_t - B_r}, t > r
        keys = k_first * (reference - B_first).exp()  # e^{B_r - B_i}, i ≤ r
        if half == 1:  # one key per query: a dot product (a batch of 1 x 1 matrix products is slower)
            read = (queries * keys).sum(-1, keepdim=True) * values_first
        else:
            read = (queries @ keys.transpose(-1, -2)) @ values_first  # [..., blocks, half, dv + 1]
        out_first, out_second = out.reshape(*blocks, out.size(-1)).unbind(-3)
        out = torch.stack([out_first, out_second + read], dim=-3).reshape(out.shape)
        half *= 2
    return out


def cheapest_chunk_size(time: int, features: int, value_dim: int, longest: int = CHUNK_SIZE) -> int:
    """The chunk length for :func:`chunked_causal_rfa` in a training step that needs no final
    state: the whole sequence in one chunk (no state at all) when that costs less arithmetic,
    else as many chunks as chunks of ``longest`` would make, of equal length (no short last chunk).

    A chunk of ``c`` tokens costs ``c² (F + dv + 1)`` multiply-adds per head for its scores and
    their weighted values; every chunk but the first reads the state (``c F (dv + 1)``) and every
    chunk but the last adds to it (as much). Against two chunks, one is cheaper below
    ``2 F (dv + 1) / (F + dv + 1)`` tokens, so the quadratic part stays bounded and the memory
    linear in the length: 64 tokens at the paper's causal sizes (32 projections, so 64 features,
    and 64-wide heads), where one chunk never beats chunks of 64; 115 with 256 projections."""
    if time <= longest:
        return longest
    count = -(-time // longest)
    balanced = -(-time // count)

    def cost(chunk: int) -> int:
        lengths = [min(chunk, time - start) for start in range(0, time, chunk)]
        # tokens of the chunks that read the state (all but the first) and that add to it (all but the last)
        state_traffic = (time - lengths[0]) + (time - lengths[-1])
        return sum(c * c for c in lengths) * (features + value_dim + 1) + state_traffic * features * (value_dim + 1)
    return time if cost(time) < cost(balanced) else balanced


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
    return normalised(state_readout(phi_q, state))


def cross_rfa(phi_q: Tensor, phi_k: Tensor, v: Tensor, key_weight: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """Cross RFA through the source summary: the state once (:func:`cross_rfa_state`), then every
    query reads it (:func:`cross_rfa_readout`). Same arguments and results as
    :func:`.reference.reference_cross_rfa`."""
    state = cross_rfa_state(phi_k, v, key_weight)
    return cross_rfa_readout(phi_q, state), state


def cross_rfa_summary(phi_k: Tensor, v: Tensor, key_weight: Optional[Tensor] = None,
                      reads: Optional[int] = None) -> Dict[str, Tensor]:
    """What cross attention keeps of the source, in whichever of two exact forms costs less.

    A query reads ``φ(q)·[S, z]`` with ``[S, z] = φ(K)ᵀ [w v, w]``: either through the state
    (``{"state"}``, ``F × (dv + 1)`` per head, :func:`cross_rfa_state`) or, re-associated,
    through the source's features and weighted values (``{"keys", "values"}``, ``T × (F + dv + 1)``
    per head), ``(φ(q)·φ(K)ᵀ)·[w v, w]``. Both compute the same sums in another order:

    * decoding (``reads`` None: the summary is read at every step, by the beams of a source) keeps
      the smaller one, as every read multiplies each of its numbers once: the keys while the source
      is shorter than ``F (dv + 1) / (F + dv + 1)`` tokens (57 at the paper's 512 features and
      64-wide heads), the state beyond;
    * training (``reads``: the queries per source, each reading once) adds the state's own cost,
      ``T F (dv + 1)``: the keys are kept when ``reads · T (F + dv + 1) < (T + reads) F (dv + 1)``
      (e.g. up to about 115 tokens for as many queries as keys). The ``reads x T`` scores this
      keeps for the backward pass are then fewer than ``(T + reads) · 57`` per head: linear in
      the lengths, as the state's memory is.

    Args: as :func:`cross_rfa_state`; ``reads``: queries per source reading the summary once each.
    """
    if keys_form_is_cheaper(phi_k.size(-2), phi_k.size(-1), v.size(-1) + 1, reads):
        return {"keys": phi_k.float().contiguous(), "values": weighted_values(v, key_weight).contiguous()}
    return {"state": cross_rfa_state(phi_k, v, key_weight)}


class _FourierKeysNumerator(torch.autograd.Function):
    """Cross RFA's keys form with the Fourier map, one head at a time (see :func:`fourier_keys_numerator`)."""

    @staticmethod
    def forward(ctx, q_units: Tensor, k_units: Tensor, values: Tensor, projection: Tensor, scale: float) -> Tensor:
        heads = projection.size(0)
        numerator = values.new_empty(q_units.shape[:-1] + values.shape[-1:])
        kept = []
        for head in range(heads):
            phi_q = fourier_rows(q_units[head], projection[head], scale)
            phi_k = fourier_rows(k_units[head], projection[head], scale)
            scores = torch.bmm(phi_q, phi_k.transpose(1, 2))
            torch.bmm(scores, values[head], out=numerator[head])
            kept += [phi_q, phi_k, scores]
        ctx.save_for_backward(q_units, k_units, values, projection, *kept)
        return numerator

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor):
        q_units, k_units, values, projection, *kept = ctx.saved_tensors
        want_q, want_k, want_values, want_projection = ctx.needs_input_grad[:4]
        grad_q = torch.empty_like(q_units) if want_q else None
        grad_k = torch.empty_like(k_units) if want_k else None
        grad_values = torch.empty_like(values) if want_values else None
        grad_projection = torch.zeros_like(projection) if want_projection else None
        dim = projection.size(-1)
        for head in range(projection.size(0)):
            phi_q, phi_k, scores = kept[3 * head:3 * head + 3]
            if want_values:
                torch.bmm(scores.transpose(1, 2), grad[head], out=grad_values[head])
            if not (want_q or want_k or want_projection):
                continue
            grad_scores = torch.bmm(grad[head], values[head].transpose(1, 2))
            for units, features, others, scores_grad, out in (
                    (q_units, phi_q, phi_k, grad_scores, grad_q),
                    (k_units, phi_k, phi_q, grad_scores.transpose(1, 2), grad_k)):
                if out is None and not want_projection:
                    continue
                angles = fourier_angle_grad(torch.bmm(scores_grad, others), features)
                if out is not None:
                    torch.mm(angles, projection[head], out=out[head].view(-1, dim))
                if want_projection:
                    grad_projection[head].addmm_(angles.t(), units[head].reshape(-1, dim))
        return grad_q, grad_k, grad_values, grad_projection, None


def fourier_keys_numerator(q_units: Tensor, k_units: Tensor, values: Tensor, projection: Tensor) -> Tensor:
    """``(φ(q)·φ(K)ᵀ)·[w v, w]`` for the Fourier map, from unit vectors laid out heads first:
    q_units [heads, batch, time, head_dim], k_units [heads, batch, source, head_dim], values
    [heads, batch, source, dv + 1] (weighted, :func:`weighted_values`), projection (W/τ)
    [heads, D, head_dim] → [heads, batch, time, dv + 1], before the normalisation.

    The same sums as :func:`random_fourier_features` followed by :func:`keys_readout`, computed
    one head at a time in both directions: a head's features, scores and their gradients are a
    few MB that stay in cache between the products that make and use them, where the whole
    layer's are hundreds of MB (4100 tokens of 512 features, twice, and their gradients), each
    a fresh allocation the CPU must fault in on every step. Keeps what the two-step form keeps
    for the backward pass (every head's features and scores)."""
    scale = 1.0 / math.sqrt(projection.size(-2))
    return _FourierKeysNumerator.apply(q_units, k_units, values.contiguous(), projection, scale)


def keys_form_is_cheaper(source: int, features: int, columns: int, reads: Optional[int] = None) -> bool:
    """Whether :func:`cross_rfa_summary` keeps the keys form for ``source`` keys of ``features``
    features and ``columns`` = dv + 1 value columns (``reads``: as there)."""
    if reads is None:
        return source * (features + columns) < features * columns
    return reads * source * (features + columns) < (source + reads) * features * columns


def cross_rfa_read(phi_q: Tensor, summary: Dict[str, Tensor]) -> Tensor:
    """φ(q)·S / φ(q)·z from a :func:`cross_rfa_summary`: phi_q [batch, heads, time, F] →
    [batch, heads, time, dv]."""
    if "state" in summary:
        return cross_rfa_readout(phi_q, summary["state"])
    return normalised(keys_readout(phi_q, summary["keys"], summary["values"]))


def keys_readout(phi_q: Tensor, keys: Tensor, values: Tensor) -> Tensor:
    """``(φ(q)·φ(K)ᵀ)·[w v, w]``: phi_q [..., n, F], keys [..., T, F], values [..., T, dv + 1] with
    the same leading dimensions → [..., n, dv + 1] (before the normalisation).

    With fewer queries than keys (decoding: the beams of a sentence) the scores are computed
    transposed, ``φ(K)·φ(q)ᵀ``, with the keys as the left operand: the same sums, about 1.6x
    faster on a CPU at decoding's shapes (MKL, fp32: 4 beams, 512 features, 25-50 keys)."""
    phi_q = phi_q.float()
    *lead, n, features = phi_q.shape
    if n >= keys.size(-2):
        return (phi_q @ keys.transpose(-1, -2)) @ values
    source, columns = keys.size(-2), values.size(-1)
    queries = phi_q.reshape(-1, n, features)
    scores = torch.bmm(keys.reshape(-1, source, features), queries.transpose(1, 2)).transpose(1, 2)
    return torch.bmm(scores, values.reshape(-1, source, columns)).view(*lead, n, columns)
