"""Training forms of LSH attention: sort by hash class, cut into fixed-size chunks, attend within
a chunk and its neighbours, O(T * chunk) memory (same signatures as :mod:`.reference`)."""

import math
from typing import Optional, Tuple

import torch
from torch import Tensor

from .hashing import PAD_CLASS, fp32_math


def _pad_time(tensor: Tensor, multiple: int, dim: int, value=0) -> Tensor:
    missing = -tensor.shape[dim] % multiple
    if missing == 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    return torch.cat([tensor, tensor.new_full(shape, value)], dim=dim)


def _padding_after(key_padding_mask: Optional[Tensor], batch: int, time: int, padded_time: int, device) -> Tensor:
    """[batch, padded_time] bool: the caller's padding plus the positions added to fill the last chunk."""
    mask = torch.zeros(batch, time, dtype=torch.bool, device=device) if key_padding_mask is None \
        else key_padding_mask.to(device=device, dtype=torch.bool)
    return _pad_time(mask, padded_time, dim=1, value=True) if padded_time > time else mask


def _pad_and_sort(classes, order, chunk_size, is_pad):
    """Classes [b, h, R, T] padded to whole chunks (padding, ``is_pad`` [b, T'], in ``PAD_CLASS``)
    and their sort by (class, position, or ``order``'s rank where given): (padded classes, sorted
    slot -> position, position -> slot)."""
    padded_time = is_pad.shape[-1]
    classes = _pad_time(classes, chunk_size, dim=3).masked_fill(is_pad[:, None, None, :], PAD_CLASS)
    secondary = torch.arange(padded_time, device=classes.device).expand_as(classes) if order is None else \
        _pad_time(order, chunk_size, dim=3, value=padded_time)
    return (classes, *_sort_by_class(classes, secondary))


def _gather_along_time(source: Tensor, index: Tensor) -> Tensor:
    """source [*lead, T], index [*lead, *more, S] -> [*lead, *more, S]."""
    view = source.view(*source.shape[:-1], *([1] * (index.dim() - source.dim())), source.shape[-1])
    return view.expand(*index.shape[:-1], source.shape[-1]).gather(-1, index)


def _sort_by_class(classes: Tensor, secondary: Tensor) -> Tuple[Tensor, Tensor]:
    """Stable sort of every round by (class, secondary key). Returns ``order`` (sorted slot ->
    position) and ``slot`` (position -> sorted slot), both [..., T]."""
    time = classes.shape[-1]
    order = (classes * time + secondary).argsort(dim=-1, stable=True)
    slot = order.argsort(dim=-1, stable=True)
    return order, slot


def _flat_row_index(index: Tensor, lead_shape, rows: int) -> Tensor:
    """Index into ``[*lead, rows, D]`` viewed as ``[prod(lead) * rows, D]``."""
    groups = math.prod(lead_shape)
    offsets = torch.arange(groups, device=index.device).mul_(rows)
    return (index + offsets.view(*lead_shape, *([1] * (index.dim() - len(lead_shape))))).reshape(-1)


def _gather_rows(source: Tensor, index: Tensor) -> Tensor:
    """source [*lead, T, D], index [*lead, *more, S] (values in 0..T-1) -> [*lead, *more, S, D].

    ``index_select`` on a flat view keeps the index at one integer per row (a ``gather`` would
    need it expanded over ``D``)."""
    lead, rows, dim = source.shape[:-2], source.shape[-2], source.shape[-1]
    flat = _flat_row_index(index, lead, rows)
    return source.reshape(-1, dim).index_select(0, flat).view(*index.shape, dim)


def _scatter_add_rows(updates: Tensor, index: Tensor, source_shape) -> Tensor:
    """The adjoint of :func:`_gather_rows`: rows of ``updates`` summed into zeros of ``source_shape``."""
    lead, rows, dim = source_shape[:-2], source_shape[-2], source_shape[-1]
    flat = _flat_row_index(index, lead, rows)
    total = updates.new_zeros(math.prod(source_shape[:-1]), dim)
    return total.index_add_(0, flat, updates.reshape(-1, dim)).view(source_shape)


# The three autograd functions below keep for the backward pass only what is O(time) in size
# per (query, round): the unsorted inputs, integer indices and the attention weights. Gathered
# (sorted, windowed) copies of queries, keys and values are rebuilt in the backward pass; a
# window holds 2-3 chunks of keys per chunk of queries, so keeping them would cost 2-3 copies
# of the keys and values for every round.


class _WindowScores(torch.autograd.Function):
    """scores[g, r, c, q, w] = queries[g, query_index[g, r, c, q]] . keys[g, key_index[g, r, c, w]]
    * key_scale[g, r, c, w]. queries [G, Tq, D], keys [G, Tk, D]; indices [G, R, C, Q] and
    [G, R, C, W]; key_scale broadcastable to [G, R, C, W]. Returns [G, R, C, Q, W]."""

    @staticmethod
    def forward(ctx, queries, query_index, keys, key_index, key_scale):
        ctx.save_for_backward(queries, query_index, keys, key_index, key_scale)
        products = _gather_rows(queries, query_index) @ _gather_rows(keys, key_index).transpose(-1, -2)
        return products * key_scale.unsqueeze(-2)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_scores):
        queries, query_index, keys, key_index, key_scale = ctx.saved_tensors
        with torch.autocast(device_type=grad_scores.device.type, enabled=False):
            window_queries, window_keys = _gather_rows(queries, query_index), _gather_rows(keys, key_index)
            grad_products = grad_scores * key_scale.unsqueeze(-2)
            grad_queries = grad_keys = grad_scale = None
            if ctx.needs_input_grad[0]:
                grad_queries = _scatter_add_rows(grad_products @ window_keys, query_index, queries.shape)
            if ctx.needs_input_grad[2]:
                grad_keys = _scatter_add_rows(grad_products.transpose(-1, -2) @ window_queries, key_index, keys.shape)
            if ctx.needs_input_grad[4]:
                products = window_queries @ window_keys.transpose(-1, -2)
                grad_scale = (grad_scores * products).sum(-2)
        return grad_queries, None, grad_keys, None, grad_scale


class _WindowWeightedSum(torch.autograd.Function):
    """out[g, r, c, q] = scale[g, r, c, q] * sum_w weights[g, r, c, q, w] values[g, key_index[g, r, c, w]].
    weights [G, R, C, Q, W], values [G, Tk, D], key_index [G, R, C, W], scale [G, R, C, Q] or None.
    Returns [G, R, C, Q, D]."""

    @staticmethod
    def forward(ctx, weights, values, key_index, scale):
        ctx.save_for_backward(weights, values, key_index, scale)
        output = weights @ _gather_rows(values, key_index)
        return output if scale is None else output * scale.unsqueeze(-1)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_output):
        weights, values, key_index, scale = ctx.saved_tensors
        with torch.autocast(device_type=grad_output.device.type, enabled=False):
            window_values = _gather_rows(values, key_index)
            grad_scaled = grad_output if scale is None else grad_output * scale.unsqueeze(-1)
            grad_weights = grad_scaled @ window_values.transpose(-1, -2) if ctx.needs_input_grad[0] else None
            grad_values = _scatter_add_rows(weights.transpose(-1, -2) @ grad_scaled, key_index, values.shape) \
                if ctx.needs_input_grad[1] else None
            grad_scale = ((weights @ window_values) * grad_output).sum(-1) if ctx.needs_input_grad[3] else None
        return grad_weights, grad_values, None, grad_scale


class _MaskedSoftmax(torch.autograd.Function):
    """Softmax over the allowed entries of the last axis, with its log-normaliser.
    Rows without an allowed entry get zero weights and a ``-inf`` log-normaliser (no NaNs in
    either pass); only the weights are kept for the backward pass.
    scores [..., W] float, allowed [..., W] bool -> (weights [..., W], log_normaliser [...], has_key [...])."""

    @staticmethod
    def forward(ctx, scores, allowed):
        has_key = allowed.any(-1)
        masked = scores.masked_fill(~allowed, float("-inf"))
        row_max = torch.where(has_key, masked.amax(-1), torch.zeros_like(masked[..., 0]))
        weights = masked.sub_(row_max.unsqueeze(-1)).exp_()
        total = torch.where(has_key, weights.sum(-1), torch.ones_like(row_max))
        weights.div_(total.unsqueeze(-1))
        log_normaliser = torch.where(has_key, total.log() + row_max, torch.full_like(row_max, float("-inf")))
        ctx.save_for_backward(weights, has_key)
        ctx.mark_non_differentiable(has_key)
        return weights, log_normaliser, has_key

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_weights, grad_log_normaliser, _):
        weights, has_key = ctx.saved_tensors
        # d softmax: w * (g - sum(w g)); d log-normaliser / d scores = w
        grad = grad_weights - (weights * grad_weights).sum(-1, keepdim=True)
        grad = grad + grad_log_normaliser.masked_fill(~has_key, 0.0).unsqueeze(-1)
        return weights * grad, None


def _dropout(weights: Tensor, p: float, training: bool) -> Tensor:
    """Attention dropout keeping a boolean mask for the backward pass (CPU dropout keeps a float one)."""
    if not training or p == 0.0:
        return weights
    dropped = torch.rand_like(weights) < p
    return weights.masked_fill(dropped, 0.0) * (1.0 / (1.0 - p))


def _round_weights(log_normaliser: Tensor, has_key: Tensor) -> Tuple[Tensor, Tensor]:
    """Weights of the rounds in one softmax over their union (log-sum-exp, Kitaev et al. 2020):
    [b, h, R, T] log-normalisers -> ([b, h, R, T] weights summing to 1 over R, [b, h, T] any key)."""
    any_key = has_key.any(2)
    peak = torch.where(any_key, log_normaliser.detach().amax(2), torch.zeros_like(log_normaliser[:, :, 0]))
    weights = torch.exp(log_normaliser - peak.unsqueeze(2))  # exp(-inf) = 0 for empty rounds
    return weights / weights.sum(2, keepdim=True).clamp_min(1e-30), any_key


def _window_slots(window_chunks: Tensor, window_is_real: Tensor, chunk_size: int, chunks: int) -> Tuple[Tensor, Tensor]:
    """[..., O] chunk indices -> ([..., O * chunk_size] sorted slots of their keys, clamped into
    range, and whether each slot belongs to a real chunk)."""
    within = torch.arange(chunk_size, device=window_chunks.device)
    slots = window_chunks.clamp(0, chunks - 1).unsqueeze(-1) * chunk_size + within
    return slots.flatten(-2), window_is_real.repeat_interleave(chunk_size, dim=-1)


def _heads_as_groups(tensor: Tensor) -> Tensor:
    """[batch, heads, time, dim] -> fp32 [batch * heads, time, dim] (no copy when already so)."""
    batch, heads, time, dim = tensor.shape
    return tensor.float().reshape(batch * heads, time, dim)


@fp32_math
def lsh_self_attention(
    shared_qk: Tensor, values: Tensor, classes: Tensor, chunk_size: int, *, causal: bool,
    key_padding_mask: Optional[Tensor] = None, dropout_p: float = 0.0, training: bool = False,
) -> Tensor:
    """LSH self-attention with shared queries/keys, training form (Petrick et al. 2022, §3; Kitaev et al. 2020).

    Computed in windows (:func:`windowed_lsh_self_attention`), or, when the sequence is so short
    that all its pairs are no more than the rounds' windows (:func:`dense_is_cheaper`), over all
    pairs at once (:func:`dense_lsh_self_attention`): the same attention, chosen by size alone.
    Arguments and result as :func:`windowed_lsh_self_attention`.
    """
    padded_time = shared_qk.shape[2] + (-shared_qk.shape[2] % chunk_size)
    window = (2 if causal else 3) * chunk_size
    form = dense_lsh_self_attention if dense_is_cheaper(padded_time, classes.shape[2], window) \
        else windowed_lsh_self_attention
    return form(shared_qk, values, classes, chunk_size, causal=causal, key_padding_mask=key_padding_mask,
                dropout_p=dropout_p, training=training)


def dense_is_cheaper(key_time: int, rounds: int, window: int) -> bool:
    """Whether all (query, key) pairs are no more than the rounds' windows hold: then the dense
    form costs no more arithmetic and keeps no more for the backward pass than the windowed one
    (and saves its sorting and gathering per round). ``key_time`` padded to whole chunks;
    ``window``: keys per query per round."""
    return key_time <= rounds * window


@fp32_math
def windowed_lsh_self_attention(
    shared_qk: Tensor, values: Tensor, classes: Tensor, chunk_size: int, *, causal: bool,
    key_padding_mask: Optional[Tensor] = None, dropout_p: float = 0.0, training: bool = False,
) -> Tensor:
    """LSH self-attention with shared queries/keys, in windows (Petrick et al. 2022, §3; Kitaev et al. 2020).

    Each round sorts the positions by (hash class, position), cuts the sorted sequence into
    chunks of ``chunk_size``, and lets every query attend to the keys of its own class in its
    chunk and the chunks before and after (only the one before, and only earlier positions, when
    ``causal``), never to itself unless no other key is found in any round. Memory is
    O(rounds * time * chunk_size). Equals :func:`reference_lsh_self_attention`.

    shared_qk, values: [batch, heads, time, dim]; classes: [batch, heads, rounds, time] (0-based,
    e.g. from :func:`hash_vectors`); key_padding_mask: [batch, time], True at padding.
    Returns [batch, heads, time, dim] in the dtype of ``values``.
    """
    batch, heads, time, dim = shared_qk.shape
    rounds = classes.shape[2]
    groups = batch * heads
    padded_time = time + (-time % chunk_size)
    chunks = padded_time // chunk_size
    device = shared_qk.device
    is_pad = _padding_after(key_padding_mask, batch, time, padded_time, device)
    classes, order, slot = _pad_and_sort(classes, None, chunk_size, is_pad)
    offsets = (-1, 0) if causal else (-1, 0, 1)

    neighbours = torch.arange(chunks, device=device).unsqueeze(-1) + torch.tensor(offsets, device=device)
    window_slots, window_is_real = _window_slots(neighbours, (neighbours >= 0) & (neighbours < chunks),
                                                 chunk_size, chunks)  # [chunks, W]
    order_rows = order.view(groups, rounds, padded_time)
    sorted_classes = classes.gather(-1, order).view(groups, rounds, padded_time)
    query_positions = order_rows.view(groups, rounds, chunks, chunk_size)
    query_classes = sorted_classes.view(groups, rounds, chunks, chunk_size)
    key_positions = order_rows[..., window_slots].masked_fill(~window_is_real, -1)  # [G, R, chunks, W]
    key_classes = sorted_classes[..., window_slots]
    # padded positions read a real row (they are masked out or their outputs dropped)
    query_index, key_index = query_positions.clamp_max(time - 1), key_positions.clamp(0, time - 1)

    shared_rows, value_rows = _heads_as_groups(shared_qk), _heads_as_groups(values)
    # unit-length keys (Kitaev et al. 2020, shared-QK attention), as a per-key scale of the dot products
    inverse_norms = 1.0 / (shared_rows.norm(dim=-1).clamp_min(1e-12) * math.sqrt(dim))  # as F.normalize
    key_scale = _gather_along_time(inverse_norms, key_index)
    scores = _WindowScores.apply(shared_rows, query_index, shared_rows, key_index, key_scale)
    query_at, key_at = query_positions.unsqueeze(-1), key_positions.unsqueeze(-2)
    key_is_real = (key_at >= 0) & (key_classes != PAD_CLASS).unsqueeze(-2)
    allowed = (query_classes.unsqueeze(-1) == key_classes.unsqueeze(-2)) & key_is_real & (key_at != query_at)
    if causal:
        allowed &= key_at < query_at
    if rounds > 1:
        scores = scores - _duplicate_counts(
            classes, slot // chunk_size, query_positions.view(batch, heads, rounds, chunks, chunk_size),
            key_positions.view(batch, heads, rounds, chunks, -1), offsets).view(scores.shape).log()
    weights, log_normaliser, has_key = _MaskedSoftmax.apply(scores, allowed)
    weights = _dropout(weights, dropout_p, training)

    # one softmax over the union of the rounds: scale every round by its log-sum-exp weight
    has_key = has_key.view(batch, heads, rounds, padded_time).gather(-1, slot)
    round_scale = None
    if rounds > 1:
        round_weights, any_key = _round_weights(
            log_normaliser.view(batch, heads, rounds, padded_time).gather(-1, slot), has_key)
        round_scale = round_weights.gather(-1, order).view(groups, rounds, chunks, chunk_size)
    else:
        any_key = has_key[:, :, 0]
    outputs = _WindowWeightedSum.apply(weights, value_rows, key_index, round_scale)  # sorted
    combined = _gather_rows(outputs.view(batch, heads, rounds, padded_time, dim), slot).sum(2)[:, :, :time]
    combined = torch.where(any_key[:, :, :time].unsqueeze(-1), combined, values.float())  # itself as fallback
    return combined.to(values.dtype)


@fp32_math
def dense_lsh_self_attention(
    shared_qk: Tensor, values: Tensor, classes: Tensor, chunk_size: int, *, causal: bool,
    key_padding_mask: Optional[Tensor] = None, dropout_p: float = 0.0, training: bool = False,
) -> Tensor:
    """The attention of :func:`windowed_lsh_self_attention` over all pairs at once.

    Every round sorts and chunks the positions as the windowed form does; a key is offered to a
    query when in some round it has the query's class and its chunk is in the query's window.
    One softmax over the offered keys is what the windowed form's rounds combine to (their
    duplicate counts make a key offered twice count once). O(time²) memory: used where that is
    no more than the windows' (:func:`dense_is_cheaper`). Attention dropout falls once on each
    (query, key) weight, where the windowed form drops each round's copy of it.
    Arguments and result as :func:`windowed_lsh_self_attention`.
    """
    batch, heads, time, dim = shared_qk.shape
    padded_time = time + (-time % chunk_size)
    device = shared_qk.device
    is_pad = _padding_after(key_padding_mask, batch, time, padded_time, device)
    classes, _, slot = _pad_and_sort(classes, None, chunk_size, is_pad)
    chunk_of, classes = (slot // chunk_size)[..., :time], classes[..., :time]  # [b, h, R, T]
    distance = chunk_of.unsqueeze(-2) - chunk_of.unsqueeze(-1)  # key chunk - query chunk
    offered = (classes.unsqueeze(-1) == classes.unsqueeze(-2)) & (distance >= -1) & (distance <= (0 if causal else 1))
    positions = torch.arange(time, device=device)
    allowed = offered.any(2) & (positions.unsqueeze(-1) != positions) & ~is_pad[:, None, None, :time]
    if causal:
        allowed &= positions.unsqueeze(-1) > positions

    # unit-length keys (Kitaev et al. 2020, shared-QK attention) as a per-key scale of the dot
    # products, which _WindowScores keeps instead of a normalised copy of the keys
    rows = _heads_as_groups(shared_qk)
    inverse_norms = 1.0 / (rows.norm(dim=-1).clamp_min(1e-12) * math.sqrt(dim))
    every = torch.arange(time, device=device).expand(batch * heads, 1, 1, time)
    scores = _WindowScores.apply(rows, every, rows, every, inverse_norms.view(batch * heads, 1, 1, time))
    weights, _, has_key = _MaskedSoftmax.apply(scores.view(batch, heads, time, time), allowed)
    own_values = values.float()
    combined = _dropout(weights, dropout_p, training) @ own_values
    return torch.where(has_key.unsqueeze(-1), combined, own_values).to(values.dtype)  # itself as fallback


def _duplicate_counts(classes, chunk_of, query_positions, key_positions, offsets):
    """In how many rounds each (query, window key) pair meets: same class and key chunk within
    ``offsets`` of the query's chunk. Subtracting ``log(count)`` from a pair's logit in every round
    that offers it makes the rounds' log-sum-exp one softmax over the union (each key once).
    classes, chunk_of: [b, h, R, T]; query_positions [b, h, R, chunks, chunk];
    key_positions [b, h, R, chunks, window] (-1 outside). Returns [b, h, R, chunks, chunk, window] float."""
    batch, heads, rounds = classes.shape[:3]
    flat_queries = query_positions.reshape(batch, heads, rounds, -1)
    flat_keys = key_positions.clamp_min(0).reshape(batch, heads, rounds, -1)
    counts = None
    for r in range(rounds):
        def at(table, index, like):
            return _gather_along_time(table[:, :, r], index).view(like.shape)
        same = at(classes, flat_queries, query_positions).unsqueeze(-1) == \
            at(classes, flat_keys, key_positions).unsqueeze(-2)
        distance = at(chunk_of, flat_keys, key_positions).unsqueeze(-2) - \
            at(chunk_of, flat_queries, query_positions).unsqueeze(-1)
        meets = same & (distance >= min(offsets)) & (distance <= max(offsets))
        counts = meets.to(torch.float32) if counts is None else counts + meets
    return counts.clamp_min(1.0)


class _CrossSorting:
    """What both forms of LSH cross-attention sort and align, every round: keys and queries padded
    to whole chunks (padding in ``PAD_CLASS``), sorted by (class, position or random rank), and
    every query chunk's aligned key chunk (Petrick et al. 2022, §3: the middle of the first key chunk holding
    the chunk's smallest class and the last key chunk holding its largest).

    key_sort / key_slot: [b, h, R, Tk'] (sorted slot -> position, position -> slot); key_classes,
    sorted_key_classes: [b, h, R, Tk']; last_real_chunk: [b, 1, 1, 1]; query_sort, query_slot,
    query_classes: [b, h, R, Tq']; sorted_query_classes: [b * h, R, query chunks, query chunk];
    aligned: [b, h, R, query chunks]."""

    def __init__(self, query_classes, key_classes, chunk_size, query_chunk_size, key_padding_mask,
                 query_order, key_order):
        batch, heads, rounds, query_time = query_classes.shape
        key_time = key_classes.shape[3]
        padded_query_time = query_time + (-query_time % query_chunk_size)
        padded_key_time = key_time + (-key_time % chunk_size)
        query_chunks = padded_query_time // query_chunk_size
        device = query_classes.device

        # keys: pad to whole chunks, sort
        key_is_pad = _padding_after(key_padding_mask, batch, key_time, padded_key_time, device)
        self.key_classes, self.key_sort, self.key_slot = _pad_and_sort(key_classes, key_order, chunk_size, key_is_pad)
        self.sorted_key_classes = self.key_classes.gather(-1, self.key_sort)
        real_keys = (~key_is_pad).sum(-1).view(batch, 1, 1, 1)
        self.last_real_chunk = ((real_keys - 1).clamp_min(0)) // chunk_size

        # queries: same, with the class range of every query chunk
        query_is_pad = _padding_after(None, batch, query_time, padded_query_time, device)
        self.query_classes, self.query_sort, self.query_slot = _pad_and_sort(
            query_classes, query_order, query_chunk_size, query_is_pad)
        self.sorted_query_classes = self.query_classes.gather(-1, self.query_sort).view(
            batch * heads, rounds, query_chunks, query_chunk_size)
        is_real = self.sorted_query_classes != PAD_CLASS
        h_min = self.sorted_query_classes.masked_fill(~is_real, PAD_CLASS).amin(-1).view(
            batch, heads, rounds, query_chunks)
        h_max = self.sorted_query_classes.masked_fill(~is_real, -1).amax(-1).view(batch, heads, rounds, query_chunks)

        # alignment: middle of the first key chunk holding h_min and the last holding h_max
        first = torch.searchsorted(self.sorted_key_classes, h_min, right=False) // chunk_size
        last = (torch.searchsorted(self.sorted_key_classes, h_max, right=True) - 1).div(
            chunk_size, rounding_mode="floor")
        first = torch.minimum(first, self.last_real_chunk)
        last = torch.minimum(last.clamp_min(0), self.last_real_chunk)
        self.aligned = (first + last + 1) // 2


@fp32_math
def lsh_cross_attention(
    queries: Tensor, keys: Tensor, values: Tensor, query_classes: Tensor, key_classes: Tensor,
    chunk_size: int, *, query_chunk_size: Optional[int] = None, key_padding_mask: Optional[Tensor] = None,
    query_order: Optional[Tensor] = None, key_order: Optional[Tensor] = None,
    dropout_p: float = 0.0, training: bool = False,
) -> Tensor:
    """LSH cross-attention, training form (Petrick et al. 2022, §3, the paper's own extension; Figure 2).

    Computed in windows (:func:`windowed_lsh_cross_attention`), or, when the source is so short
    that all its keys are no more than the rounds' windows (:func:`dense_is_cheaper`), over all
    pairs at once (:func:`dense_lsh_cross_attention`): the same attention, chosen by size alone.
    Arguments and result as :func:`windowed_lsh_cross_attention`.
    """
    padded_key_time = keys.shape[2] + (-keys.shape[2] % chunk_size)
    form = dense_lsh_cross_attention if dense_is_cheaper(padded_key_time, query_classes.shape[2], 3 * chunk_size) \
        else windowed_lsh_cross_attention
    return form(queries, keys, values, query_classes, key_classes, chunk_size, query_chunk_size=query_chunk_size,
                key_padding_mask=key_padding_mask, query_order=query_order, key_order=key_order,
                dropout_p=dropout_p, training=training)


@fp32_math
def windowed_lsh_cross_attention(
    queries: Tensor, keys: Tensor, values: Tensor, query_classes: Tensor, key_classes: Tensor,
    chunk_size: int, *, query_chunk_size: Optional[int] = None, key_padding_mask: Optional[Tensor] = None,
    query_order: Optional[Tensor] = None, key_order: Optional[Tensor] = None,
    dropout_p: float = 0.0, training: bool = False,
) -> Tensor:
    """LSH cross-attention in windows (Petrick et al. 2022, §3, the paper's own extension; Figure 2).

    Queries and keys are hashed and sorted separately (by class, then position, or then the
    random ranks ``query_order`` / ``key_order`` that the module draws in training), cut into
    chunks, and every query chunk is aligned to the key chunk in the middle of the first key
    chunk holding its smallest class and the last key chunk holding its largest class. A query
    attends to the keys of its own class in the aligned chunk and both neighbours; when no round
    offers any, it takes the average of the values in its windows (paper: weights ``1/l_chunk``).
    Equals :func:`reference_lsh_cross_attention`; with ``query_chunk_size=1`` it is what
    incremental decoding computes.

    queries: [batch, heads, Tq, dim]; keys, values: [batch, heads, Tk, dim];
    query_classes: [batch, heads, rounds, Tq]; key_classes: [batch, heads, rounds, Tk];
    key_padding_mask: [batch, Tk]. Returns [batch, heads, Tq, dim] in the dtype of ``values``.
    """
    query_chunk_size = query_chunk_size or chunk_size
    batch, heads, query_time, dim = queries.shape
    key_time, rounds = keys.shape[2], query_classes.shape[2]
    groups = batch * heads
    padded_query_time = query_time + (-query_time % query_chunk_size)
    padded_key_time = key_time + (-key_time % chunk_size)
    query_chunks, key_chunks = padded_query_time // query_chunk_size, padded_key_time // chunk_size
    device = queries.device

    sorting = _CrossSorting(query_classes, key_classes, chunk_size, query_chunk_size, key_padding_mask,
                            query_order, key_order)
    key_sort, key_slot, key_classes = sorting.key_sort, sorting.key_slot, sorting.key_classes
    sorted_key_classes, last_real_chunk = sorting.sorted_key_classes, sorting.last_real_chunk
    query_sort, query_slot, query_classes = sorting.query_sort, sorting.query_slot, sorting.query_classes
    sorted_query_classes, aligned = sorting.sorted_query_classes, sorting.aligned
    window_chunks = aligned.unsqueeze(-1) + torch.tensor([-1, 0, 1], device=device)  # [b, h, R, qc, 3]
    window_slots, window_is_real = _window_slots(
        window_chunks, (window_chunks >= 0) & (window_chunks <= last_real_chunk.unsqueeze(-1)), chunk_size, key_chunks)
    window_slots = window_slots.view(groups, rounds, query_chunks, -1)  # [G, R, qc, 3 * chunk]
    window_positions = _gather_along_time(key_sort.view(groups, rounds, padded_key_time), window_slots)
    window_classes = _gather_along_time(sorted_key_classes.view(groups, rounds, padded_key_time), window_slots)
    window_key_is_real = (window_classes != PAD_CLASS) & window_is_real.view(window_slots.shape)
    query_index = query_sort.view(groups, rounds, query_chunks, query_chunk_size).clamp_max(query_time - 1)
    key_index = window_positions.clamp_max(key_time - 1)

    query_rows, key_rows, value_rows = _heads_as_groups(queries), _heads_as_groups(keys), _heads_as_groups(values)
    scale = query_rows.new_full((1, 1, 1, 1), 1.0 / math.sqrt(dim))
    scores = _WindowScores.apply(query_rows, query_index, key_rows, key_index, scale)  # [G, R, qc, chunk_q, W]
    in_window = window_key_is_real.unsqueeze(-2).expand(scores.shape)
    allowed = in_window & (sorted_query_classes.unsqueeze(-1) == window_classes.unsqueeze(-2))

    uniform = in_window.to(torch.float32)  # fallback weights: each key of the union of windows once
    if rounds > 1:  # how many rounds offer each (query, key) pair: as a class match, and in a window
        aligned_of_query = aligned.gather(-1, query_slot // query_chunk_size)  # [b, h, R, Tq]
        shape = (batch, heads, rounds, query_chunks, -1)
        class_counts, window_counts = _cross_duplicate_counts(
            query_classes, aligned_of_query, key_classes, key_slot // chunk_size,
            query_sort.view(shape), window_positions.view(shape))
        scores = scores - class_counts.view(scores.shape).log()
        uniform = uniform / window_counts.view(scores.shape)
    weights, log_normaliser, has_key = _MaskedSoftmax.apply(scores, allowed)
    weights = _dropout(weights, dropout_p, training)

    def by_position(tensor):  # sorted [G, R, qc, chunk_q(, D)] -> [b, h, R, Tq(, D)]
        if tensor.dim() == 5:
            return _gather_rows(tensor.view(batch, heads, rounds, padded_query_time, dim), query_slot)
        return tensor.view(batch, heads, rounds, padded_query_time).gather(-1, query_slot)

    has_key = by_position(has_key)
    round_scale = None
    if rounds > 1:
        round_weights, any_key = _round_weights(by_position(log_normaliser), has_key)
        round_scale = round_weights.gather(-1, query_sort).view(groups, rounds, query_chunks, query_chunk_size)
    else:
        any_key = has_key[:, :, 0]
    combined = by_position(_WindowWeightedSum.apply(weights, value_rows, key_index, round_scale)).sum(2)
    fallback_sum = by_position(_WindowWeightedSum.apply(uniform, value_rows, key_index, None)).sum(2)
    fallback_total = by_position(uniform.sum(-1)).sum(2)
    window_average = fallback_sum / fallback_total.clamp_min(1e-30).unsqueeze(-1)
    combined = torch.where(any_key.unsqueeze(-1), combined, window_average)
    return combined[:, :, :query_time].to(values.dtype)


@fp32_math
def dense_lsh_cross_attention(
    queries: Tensor, keys: Tensor, values: Tensor, query_classes: Tensor, key_classes: Tensor,
    chunk_size: int, *, query_chunk_size: Optional[int] = None, key_padding_mask: Optional[Tensor] = None,
    query_order: Optional[Tensor] = None, key_order: Optional[Tensor] = None,
    dropout_p: float = 0.0, training: bool = False,
) -> Tensor:
    """The attention of :func:`windowed_lsh_cross_attention` over all pairs at once.

    Every round sorts, chunks and aligns as the windowed form does (:class:`_CrossSorting`); a
    key is offered to a query when in some round it is in the query's window (its chunk within
    one of the aligned chunk) and has the query's class, and is in the union of its windows when
    it is in some round's window. One softmax over the offered keys, or else the average of the
    union, is what the windowed form's rounds combine to. O(Tq * Tk) memory: used where that is
    no more than the windows' (:func:`dense_is_cheaper`); attention dropout falls once on each
    (query, key) weight. Arguments and result as :func:`windowed_lsh_cross_attention`.
    """
    query_chunk_size = query_chunk_size or chunk_size
    query_time, key_time, dim = queries.shape[2], keys.shape[2], queries.shape[3]
    sorting = _CrossSorting(query_classes, key_classes, chunk_size, query_chunk_size, key_padding_mask,
                            query_order, key_order)
    aligned = sorting.aligned.gather(-1, sorting.query_slot // query_chunk_size)[..., :query_time]  # [b, h, R, Tq]
    key_chunk = (sorting.key_slot // chunk_size)[..., :key_time]
    key_classes, query_classes = sorting.key_classes[..., :key_time], sorting.query_classes[..., :query_time]
    in_window = ((key_chunk.unsqueeze(-2) - aligned.unsqueeze(-1)).abs() <= 1) & \
        (key_classes != PAD_CLASS).unsqueeze(-2)  # [b, h, R, Tq, Tk]
    allowed = (in_window & (query_classes.unsqueeze(-1) == key_classes.unsqueeze(-2))).any(2)
    in_window = in_window.any(2)

    scores = queries.float() @ keys.float().transpose(-1, -2) / math.sqrt(dim)
    weights, _, has_key = _MaskedSoftmax.apply(scores, allowed)
    key_values = values.float()
    combined = _dropout(weights, dropout_p, training) @ key_values
    window_average = (in_window.float() @ key_values) / in_window.sum(-1, keepdim=True).clamp_min(1)
    return torch.where(has_key.unsqueeze(-1), combined, window_average).to(values.dtype)


def _cross_duplicate_counts(query_classes, aligned_of_query, key_classes, key_chunk_of, query_positions, key_positions):
    """For every (query, window key) pair: in how many rounds the key is in the query's window
    (``|key chunk - aligned chunk| <= 1``), and in how many of those it also has the query's class.
    query_classes/aligned_of_query: [b, h, R, Tq]; key_classes/key_chunk_of: [b, h, R, Tk];
    query_positions: [b, h, R, qc, chunk_q]; key_positions: [b, h, R, qc, window].
    Returns two [b, h, R, qc, chunk_q, window] float tensors, at least 1."""
    batch, heads, rounds = query_classes.shape[:3]
    flat_queries = query_positions.reshape(batch, heads, rounds, -1)
    flat_keys = key_positions.reshape(batch, heads, rounds, -1)
    class_counts = window_counts = None
    for r in range(rounds):
        def at(table, index, like):
            return _gather_along_time(table[:, :, r], index).view(like.shape)
        distance = at(key_chunk_of, flat_keys, key_positions).unsqueeze(-2) - \
            at(aligned_of_query, flat_queries, query_positions).unsqueeze(-1)
        in_window = (distance >= -1) & (distance <= 1)
        same = at(query_classes, flat_queries, query_positions).unsqueeze(-1) == \
            at(key_classes, flat_keys, key_positions).unsqueeze(-2)
        meets = in_window & same
        class_counts = meets.to(torch.float32) if class_counts is None else class_counts + meets
        window_counts = in_window.to(torch.float32) if window_counts is None else window_counts + in_window
    return class_counts.clamp_min(1.0), window_counts.clamp_min(1.0)
