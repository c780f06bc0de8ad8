"""Locality-sensitive hashing (LSH) attention: paper 003 (Petrick et al., 2022, §3) after
Kitaev et al. (2020, "Reformer").

Two numbers name the hashing, and they are easy to confuse:

* ``hash_classes`` (``--lsh-hash-classes``, the paper's ``n_hash``): how many buckets one hash
  function has. Angular LSH (Andoni et al., 2015) takes ``argmax([xR; -xR])`` for a random
  rotation ``R`` of ``hash_classes / 2`` columns, so ``hash_classes`` must be even.
* ``rounds`` (``--lsh-rounds``): how many independent hash functions (rotations) are used; a
  query may attend to a key that shares its class in *any* round (paper 003 §3, "Multi-round
  LSH attention").

Each mechanism comes in three forms (DESIGN.md, "three forms, one truth"):

* reference forms (:func:`reference_lsh_self_attention`, :func:`reference_lsh_cross_attention`):
  quadratic full attention restricted to the key sets ``P_i`` that the paper defines, written
  for clarity (sort ranks by pairwise comparison, chunk alignment by min/max over keys);
* training forms (:func:`lsh_self_attention`, :func:`lsh_cross_attention`): sort by hash class,
  cut into fixed-size chunks, attend within a chunk and its neighbours, O(T * chunk) memory;
* incremental forms (the ``incremental_state`` path of :class:`LSHSelfAttention` and
  :class:`LSHCrossAttention`), one target position at a time, for beam search.

Multi-round attention is one softmax over the union of the rounds' key sets: every round
computes a softmax over its own window and its log-normaliser, and the rounds are combined by
log-sum-exp; a key that several rounds (or neighbouring chunks) would both offer is counted
once by subtracting ``log(count)`` from its logit in every round that sees it (as Kitaev et
al.'s multi-round LSH attention does). Tensors are ``[batch, heads, time, dim]`` and hash
classes ``[batch, heads, rounds, time]`` unless a docstring says otherwise.

Memory: the training forms keep for the backward pass only the unsorted inputs, integer
indices and the per-round attention weights (``rounds * time * window`` floats); the sorted,
windowed copies of queries, keys and values (2-3 chunks of keys per chunk of queries) are
rebuilt in the backward pass (:class:`_WindowScores`, :class:`_WindowWeightedSum`). At a fixed
number of tokens this memory does not depend on the sequence length (tested).

What the incremental forms compute, exactly (tests hold them to it):

* causal self-attention: the new position attends to *all* earlier, non-padded positions that
  share its hash class in at least one round (itself only when there are none). Chunk
  boundaries of the training form come from sorting the *whole* sequence by class, so they
  depend on later positions' classes and cannot be known while decoding; the incremental form
  is therefore the training form with a chunk large enough to hold the whole sequence, i.e.
  :func:`reference_lsh_self_attention` with ``chunk_size=None``. (The same dependence means
  that in the training form the *set* of keys of position ``i`` can change when a later
  position changes class; no value or gradient flows from later positions.)
* cross-attention: every query is its own query chunk (``query_chunk_size=1``): its aligned key
  chunk is the middle of the first key chunk holding its class and the last one holding it.
  The training form aligns chunks of ``chunk_size`` queries by their class range instead; with
  ``query_chunk_size=1`` the training form gives exactly the incremental outputs.
"""

import functools
import math
from typing import Dict, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from fairseq.incremental_decoding_utils import with_incremental_state
from torch import Tensor, nn

# Padded positions get a class above every real one: they sort to the end, never share a class
# with a real position, and (in cross-attention) never fall in a query chunk's class range.
PAD_CLASS = 2**31


def fp32_math(function):
    """Run an op with autocast off: its math (hashing, logits, normalisers) stays in fp32 even
    inside ``torch.autocast``; the op casts its inputs up and its output back itself."""
    @functools.wraps(function)
    def without_autocast(*args, **kwargs):
        device = next(a.device for a in args if isinstance(a, Tensor))
        with torch.autocast(device_type=device.type, enabled=False):
            return function(*args, **kwargs)
    return without_autocast


# ----------------------------------------------------------------------------------------------
# hashing


def random_rotations(num_heads: int, rounds: int, head_dim: int, hash_classes: int, seed: int) -> Tensor:
    """[heads, rounds, head_dim, hash_classes // 2] Gaussian rotations drawn from ``seed`` alone.

    A private ``torch.Generator`` (never the global RNG) makes them reproducible between
    training and decoding, workers, and checkpoint round-trips.
    """
    if hash_classes < 2 or hash_classes % 2:
        raise ValueError(f"the number of hash classes must be even and >= 2 (argmax over [xR; -xR]), "
                         f"got {hash_classes}")
    if rounds < 1:
        raise ValueError(f"the number of hash rounds must be >= 1, got {rounds}")
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(num_heads, rounds, head_dim, hash_classes // 2, generator=generator)


@fp32_math
def hash_vectors(vectors: Tensor, rotations: Tensor) -> Tensor:
    """Angular LSH (Andoni et al. 2015): [batch, heads, time, dim] -> [batch, heads, rounds, time]
    classes ``argmax([xR; -xR])`` in ``0 .. hash_classes - 1``, one class per round."""
    projected = torch.einsum("bhtd,hrdc->bhrtc", vectors.float(), rotations.float())
    return torch.cat([projected, -projected], dim=-1).argmax(dim=-1)


def random_ranks(shape: Sequence[int], generator: torch.Generator, device) -> Tensor:
    """A random permutation of ``0 .. shape[-1] - 1`` along the last axis (secondary sort key)."""
    return torch.rand(*shape, generator=generator, device=device).argsort(dim=-1)


# ----------------------------------------------------------------------------------------------
# reference forms: quadratic, for clarity and for the tests


def _sorted_chunk_ids(classes: Tensor, secondary: Tensor, chunk_size: int) -> Tensor:
    """Chunk index of every position after sorting by (class, secondary key): the rank of a
    position is the number of positions that sort before it. [..., T] -> [..., T]."""
    before = (classes.unsqueeze(-2) < classes.unsqueeze(-1)) | (
        (classes.unsqueeze(-2) == classes.unsqueeze(-1)) & (secondary.unsqueeze(-2) < secondary.unsqueeze(-1)))
    return before.sum(-1) // chunk_size


def _with_pad_class(classes: Tensor, padding_mask: Optional[Tensor]) -> Tensor:
    if padding_mask is None:
        return classes
    return classes.masked_fill(padding_mask[:, None, None, :], PAD_CLASS)


def _masked_softmax_or(scores: Tensor, allowed: Tensor, values: Tensor, fallback: Tensor) -> Tensor:
    """Softmax over the allowed keys of each row; rows without any allowed key take ``fallback``."""
    has_key = allowed.any(-1, keepdim=True)
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    weights = weights.masked_fill(~has_key, 0.0)
    return torch.where(has_key, weights @ values, fallback)


@fp32_math
def reference_lsh_self_attention(
    shared_qk: Tensor, values: Tensor, classes: Tensor, chunk_size: Optional[int], *,
    causal: bool, key_padding_mask: Optional[Tensor] = None,
) -> Tensor:
    """Full attention restricted to ``union_r P_i^r`` (paper 003 §3, Figure 1).

    ``P_i^r`` = positions ``j != i`` with the class of ``i`` in round ``r`` whose chunk (after
    sorting round ``r`` by class, then position) is the chunk of ``i`` or a neighbour (only the
    previous one and ``j < i`` when ``causal``), and not padding; ``{i}`` when the union is
    empty. ``chunk_size=None`` drops the chunk condition (what incremental decoding computes).
    Keys are the shared query/key vectors normalised to unit length (Kitaev et al. 2020).
    shared_qk, values: [batch, heads, time, dim]; classes: [batch, heads, rounds, time].
    """
    time = shared_qk.shape[-2]
    queries = shared_qk.float()
    keys = F.normalize(queries, dim=-1)
    scores = queries @ keys.transpose(-1, -2) / math.sqrt(queries.shape[-1])
    classes = _with_pad_class(classes, key_padding_mask)
    positions = torch.arange(time, device=classes.device)
    allowed = torch.zeros(scores.shape, dtype=torch.bool, device=scores.device)
    for round_classes in classes.unbind(2):
        same = round_classes.unsqueeze(-1) == round_classes.unsqueeze(-2)
        if chunk_size is not None:
            chunk = _sorted_chunk_ids(round_classes, positions.expand_as(round_classes), chunk_size)
            distance = chunk.unsqueeze(-2) - chunk.unsqueeze(-1)  # key chunk - query chunk
            same &= (distance >= -1) & (distance <= (0 if causal else 1))
        allowed |= same
    allowed &= positions.unsqueeze(-1) != positions.unsqueeze(-2)
    if causal:
        allowed &= positions.unsqueeze(-1) > positions.unsqueeze(-2)
    if key_padding_mask is not None:
        allowed &= ~key_padding_mask[:, None, None, :]
    return _masked_softmax_or(scores, allowed, values.float(), values.float()).to(values.dtype)


def _aligned_key_chunks(query_classes, query_chunks, key_classes, key_chunks, key_is_real):
    """Paper 003 §3 "How to find an adequate key chunk": for every query, the middle
    ``ceil((j1 + j2) / 2)`` of ``j1`` = first key chunk holding ``h_min`` and ``j2`` = last key
    chunk holding ``h_max`` of its query chunk. When a class is absent, ``j1`` is the first
    chunk holding a larger class and ``j2`` the last holding a smaller one (where it would sort);
    both stay within the chunks that hold real keys. One round: [batch, heads, T] -> [batch, heads, Tq]."""
    same_chunk = query_chunks.unsqueeze(-1) == query_chunks.unsqueeze(-2)  # [b, h, Tq, Tq]
    h_min = query_classes.unsqueeze(-2).masked_fill(~same_chunk, PAD_CLASS).amin(-1)
    h_max = query_classes.unsqueeze(-2).masked_fill(~same_chunk, -1).amax(-1)
    real_chunks = key_chunks.masked_fill(~key_is_real, -1)
    last_real_chunk = real_chunks.amax(-1, keepdim=True).clamp_min(0)
    at_or_above = (key_classes.unsqueeze(-2) >= h_min.unsqueeze(-1)) & key_is_real.unsqueeze(-2)
    at_or_below = (key_classes.unsqueeze(-2) <= h_max.unsqueeze(-1)) & key_is_real.unsqueeze(-2)
    first = key_chunks.unsqueeze(-2).masked_fill(~at_or_above, PAD_CLASS).amin(-1)
    first = torch.minimum(first, last_real_chunk)
    last = key_chunks.unsqueeze(-2).masked_fill(~at_or_below, -1).amax(-1).clamp_min(0)
    return (first + last + 1) // 2


@fp32_math
def reference_lsh_cross_attention(
    queries: Tensor, keys: Tensor, values: Tensor, query_classes: Tensor, key_classes: Tensor,
    chunk_size: int, *, query_chunk_size: Optional[int] = None, key_padding_mask: Optional[Tensor] = None,
    query_order: Optional[Tensor] = None, key_order: Optional[Tensor] = None,
) -> Tensor:
    """Full attention restricted to ``union_r P_i^r`` for LSH cross-attention (paper 003 §3, Figure 2).

    In round ``r`` queries and keys are sorted by (class, position) (or by (class, ``*_order``))
    and cut into chunks; query ``i``'s window is its aligned key chunk and both neighbours;
    ``P_i^r`` are the window's keys of ``i``'s class. When ``union_r P_i^r`` is empty the output is
    the plain average of the values in the union of the windows.
    queries: [batch, heads, Tq, dim]; keys, values: [batch, heads, Tk, dim];
    query_classes: [batch, heads, rounds, Tq]; key_classes: [batch, heads, rounds, Tk].
    """
    query_chunk_size = query_chunk_size or chunk_size
    scores = queries.float() @ keys.float().transpose(-1, -2) / math.sqrt(queries.shape[-1])
    key_classes = _with_pad_class(key_classes, key_padding_mask)
    key_is_real = key_classes != PAD_CLASS
    query_positions = torch.arange(queries.shape[-2], device=queries.device).expand_as(query_classes)
    key_positions = torch.arange(keys.shape[-2], device=keys.device).expand_as(key_classes)
    query_order = query_positions if query_order is None else query_order
    key_order = key_positions if key_order is None else key_order
    same_class = torch.zeros(scores.shape, dtype=torch.bool, device=scores.device)
    in_window = torch.zeros_like(same_class)
    for r in range(query_classes.shape[2]):
        query_chunks = _sorted_chunk_ids(query_classes[:, :, r], query_order[:, :, r], query_chunk_size)
        key_chunks = _sorted_chunk_ids(key_classes[:, :, r], key_order[:, :, r], chunk_size)
        aligned = _aligned_key_chunks(query_classes[:, :, r], query_chunks, key_classes[:, :, r],
                                      key_chunks, key_is_real[:, :, r])
        window = (key_chunks.unsqueeze(-2) - aligned.unsqueeze(-1)).abs() <= 1
        window &= key_is_real[:, :, r].unsqueeze(-2)
        in_window |= window
        same_class |= window & (query_classes[:, :, r].unsqueeze(-1) == key_classes[:, :, r].unsqueeze(-2))
    window_average = (in_window.float() @ values.float()) / in_window.sum(-1, keepdim=True).clamp_min(1)
    return _masked_softmax_or(scores, same_class, values.float(), window_average).to(values.dtype)


# ----------------------------------------------------------------------------------------------
# training forms: sort, chunk, attend within a chunk and its neighbours


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
    """LSH self-attention with shared queries/keys, training form (paper 003 §3; Kitaev et al. 2020).

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
    classes = _pad_time(classes, chunk_size, dim=3).masked_fill(is_pad[:, None, None, :], PAD_CLASS)
    order, slot = _sort_by_class(classes, torch.arange(padded_time, device=device).expand_as(classes))
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


@fp32_math
def lsh_cross_attention(
    queries: Tensor, keys: Tensor, values: Tensor, query_classes: Tensor, key_classes: Tensor,
    chunk_size: int, *, query_chunk_size: Optional[int] = None, key_padding_mask: Optional[Tensor] = None,
    query_order: Optional[Tensor] = None, key_order: Optional[Tensor] = None,
    dropout_p: float = 0.0, training: bool = False,
) -> Tensor:
    """LSH cross-attention, training form (paper 003 §3, the paper's own extension; Figure 2).

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

    # keys: pad to whole chunks, sort
    key_is_pad = _padding_after(key_padding_mask, batch, key_time, padded_key_time, device)
    key_classes = _pad_time(key_classes, chunk_size, dim=3).masked_fill(key_is_pad[:, None, None, :], PAD_CLASS)
    key_positions = torch.arange(padded_key_time, device=device).expand_as(key_classes)
    key_secondary = key_positions if key_order is None else \
        _pad_time(key_order, chunk_size, dim=3, value=padded_key_time)
    key_sort, key_slot = _sort_by_class(key_classes, key_secondary)
    sorted_key_classes = key_classes.gather(-1, key_sort)
    real_keys = (~key_is_pad).sum(-1).view(batch, 1, 1, 1)
    last_real_chunk = ((real_keys - 1).clamp_min(0)) // chunk_size

    # queries: same, with the class range of every query chunk
    query_is_pad = _padding_after(None, batch, query_time, padded_query_time, device)
    query_classes = _pad_time(query_classes, query_chunk_size, dim=3).masked_fill(
        query_is_pad[:, None, None, :], PAD_CLASS)
    query_positions = torch.arange(padded_query_time, device=device).expand_as(query_classes)
    query_secondary = query_positions if query_order is None else \
        _pad_time(query_order, query_chunk_size, dim=3, value=padded_query_time)
    query_sort, query_slot = _sort_by_class(query_classes, query_secondary)
    sorted_query_classes = query_classes.gather(-1, query_sort).view(groups, rounds, query_chunks, query_chunk_size)
    is_real = sorted_query_classes != PAD_CLASS
    h_min = sorted_query_classes.masked_fill(~is_real, PAD_CLASS).amin(-1).view(batch, heads, rounds, query_chunks)
    h_max = sorted_query_classes.masked_fill(~is_real, -1).amax(-1).view(batch, heads, rounds, query_chunks)

    # alignment (paper 003 §3): middle of the first key chunk holding h_min and the last holding h_max
    first = torch.searchsorted(sorted_key_classes, h_min, right=False) // chunk_size
    last = (torch.searchsorted(sorted_key_classes, h_max, right=True) - 1).div(chunk_size, rounding_mode="floor")
    first = torch.minimum(first, last_real_chunk)
    last = torch.minimum(last.clamp_min(0), last_real_chunk)
    aligned = (first + last + 1) // 2  # [b, h, R, query_chunks]
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


# ----------------------------------------------------------------------------------------------
# fairseq modules (the MultiheadAttention call signature), with the incremental forms


class _LSHAttention(nn.Module):
    """Projections, rotations and incremental-state plumbing shared by both LSH modules."""

    def __init__(self, embed_dim: int, num_heads: int, *, chunk_size: int, hash_classes: int, rounds: int,
                 dropout: float = 0.0, seed: int = 0, bias: bool = True):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        if chunk_size < 1:
            raise ValueError(f"the LSH chunk size must be >= 1, got {chunk_size}")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.chunk_size, self.hash_classes, self.rounds = chunk_size, hash_classes, rounds
        self.dropout = dropout
        self.seed = seed
        self.num_updates = 0
        # persistent: a checkpoint carries the exact rotations it was trained with
        self.register_buffer("rotations", random_rotations(num_heads, rounds, self.head_dim, hash_classes, seed))
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def _init_projection(self, projection: nn.Linear, gain: float):
        # fairseq's MultiheadAttention initialisation (xavier, 1/sqrt(2) for the input projections)
        nn.init.xavier_uniform_(projection.weight, gain=gain)
        if projection.bias is not None:
            nn.init.constant_(projection.bias, 0.0)

    def seed_rotations(self, seed: int) -> None:
        """Redraw the rotations from ``seed`` (the model gives every layer its own seed)."""
        self.seed = seed
        with torch.no_grad():
            self.rotations.copy_(random_rotations(self.num_heads, self.rounds, self.head_dim, self.hash_classes, seed))

    def set_num_updates(self, num_updates: int) -> None:
        """Called by fairseq every update: training-time randomness is a function of (seed, update)."""
        self.num_updates = num_updates

    def _split_heads(self, x: Tensor) -> Tensor:
        """[time, batch, embed] -> [batch, heads, time, head_dim]."""
        time, batch, _ = x.shape
        return x.view(time, batch, self.num_heads, self.head_dim).permute(1, 2, 0, 3)

    def _merge_heads(self, x: Tensor) -> Tensor:
        """[batch, heads, time, head_dim] -> [time, batch, embed]."""
        batch, _, time, _ = x.shape
        return x.permute(2, 0, 1, 3).reshape(time, batch, self.embed_dim)

    def _get_input_buffer(self, incremental_state) -> Dict[str, Optional[Tensor]]:
        result = self.get_incremental_state(incremental_state, "attn_state")
        return result if result is not None else {}

    def _set_input_buffer(self, incremental_state, buffer: Dict[str, Optional[Tensor]]):
        return self.set_incremental_state(incremental_state, "attn_state", buffer)

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        """Beam search: every buffered tensor has batch * beam first; select the surviving rows."""
        buffer = self._get_input_buffer(incremental_state)
        if buffer:
            for name, value in buffer.items():
                if value is not None:
                    buffer[name] = value.index_select(0, new_order)
            incremental_state = self._set_input_buffer(incremental_state, buffer)
        return incremental_state

    def extra_repr(self) -> str:
        return (f"embed_dim={self.embed_dim}, heads={self.num_heads}, chunk_size={self.chunk_size}, "
                f"hash_classes={self.hash_classes}, rounds={self.rounds}, seed={self.seed}")


@with_incremental_state
class LSHSelfAttention(_LSHAttention):
    """LSH self-attention with shared query/key projection (paper 003 §3; Kitaev et al. 2020).

    Called like fairseq's ``MultiheadAttention`` with ``query`` = ``key`` = ``value``
    ([time, batch, embed]). ``causal=True`` for decoder self-attention: causality is built in,
    so the decoder's future mask (``attn_mask``) is not needed and ignored. With an
    ``incremental_state`` every new position attends to all earlier positions of its own class
    in any round (see the module docstring for why this is what decoding can compute).
    """

    def __init__(self, embed_dim: int, num_heads: int, *, causal: bool, chunk_size: int, hash_classes: int,
                 rounds: int, dropout: float = 0.0, seed: int = 0, bias: bool = True):
        super().__init__(embed_dim, num_heads, chunk_size=chunk_size, hash_classes=hash_classes, rounds=rounds,
                         dropout=dropout, seed=seed, bias=bias)
        self.causal = causal
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)  # shared query/key projection
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self._init_projection(self.q_proj, 1 / math.sqrt(2))
        self._init_projection(self.v_proj, 1 / math.sqrt(2))
        self._init_projection(self.out_proj, 1.0)

    def forward(self, query: Tensor, key: Optional[Tensor] = None, value: Optional[Tensor] = None,
                key_padding_mask: Optional[Tensor] = None, incremental_state=None, need_weights: bool = False,
                static_kv: bool = False, attn_mask: Optional[Tensor] = None, before_softmax: bool = False,
                need_head_weights: bool = False) -> Tuple[Tensor, None]:
        """query: [time, batch, embed]; key_padding_mask: [batch, time], True at padding.
        Returns ([time, batch, embed], None): LSH attention has no dense weights to return."""
        if attn_mask is not None and not self.causal:
            raise ValueError("LSH self-attention takes no attention mask (only padding) when not causal")
        if before_softmax:
            raise NotImplementedError("LSH attention has no dense attention logits")
        shared_qk = self._split_heads(self.q_proj(query))
        values = self._split_heads(self.v_proj(query))
        classes = hash_vectors(shared_qk, self.rotations)
        if incremental_state is not None:
            if not self.causal:
                raise ValueError("incremental decoding needs causal LSH self-attention")
            context = self._decoding_step(shared_qk, values, classes, key_padding_mask, incremental_state)
        else:
            context = lsh_self_attention(shared_qk, values, classes, self.chunk_size, causal=self.causal,
                                         key_padding_mask=key_padding_mask, dropout_p=self.dropout,
                                         training=self.training)
        return self.out_proj(self._merge_heads(context)), None

    @fp32_math
    def _decoding_step(self, shared_qk, values, classes, key_padding_mask, incremental_state) -> Tensor:
        """New positions [batch, heads, new, dim] attend to every earlier position that shares their
        class in at least one round (= :func:`reference_lsh_self_attention` with ``chunk_size=None``)."""
        batch, _, new, _ = shared_qk.shape
        keys = F.normalize(shared_qk.float(), dim=-1)
        padding = torch.zeros(batch, new, dtype=torch.bool, device=shared_qk.device) if key_padding_mask is None \
            else key_padding_mask[:, -new:].to(torch.bool)
        buffer = self._get_input_buffer(incremental_state)
        if buffer.get("prev_key") is not None:
            keys = torch.cat([buffer["prev_key"], keys], dim=2)
            values = torch.cat([buffer["prev_value"], values], dim=2)
            classes = torch.cat([buffer["prev_classes"], classes], dim=3)
            padding = torch.cat([buffer["prev_key_padding_mask"], padding], dim=1)
        self._set_input_buffer(incremental_state, {
            "prev_key": keys, "prev_value": values, "prev_classes": classes, "prev_key_padding_mask": padding})

        time = keys.shape[2]
        query_positions = torch.arange(time - new, time, device=keys.device)
        earlier = query_positions.unsqueeze(-1) > torch.arange(time, device=keys.device)
        query_classes = classes[..., time - new:]
        shares_class = (query_classes.unsqueeze(-1) == classes.unsqueeze(-2)).any(2)  # [b, h, new, time]
        allowed = shares_class & earlier & ~padding[:, None, None, :]
        scores = shared_qk.float() @ keys.transpose(-1, -2) / math.sqrt(self.head_dim)
        own_values = values[:, :, time - new:].float()
        return _masked_softmax_or(scores, allowed, values.float(), own_values).to(values.dtype)


@with_incremental_state
class LSHCrossAttention(_LSHAttention):
    """LSH encoder-decoder attention (paper 003 §3, "LSH cross-attention").

    Called like fairseq's ``MultiheadAttention`` for encoder attention: ``query`` [Tq, batch,
    embed] from the decoder, ``key`` = ``value`` = encoder output [Tk, batch, kdim]. In training
    the order of queries and of keys inside a hash class is shuffled before sorting (paper 003
    §4: "crucial for training stability"); the shuffle is drawn from a generator seeded by
    (layer seed, update number), so recomputing a layer (activation checkpointing) repeats it,
    and the global RNG is never touched. Inference sorts by position. With an
    ``incremental_state`` the projected and hashed encoder keys are computed once per sentence
    and every query is its own query chunk (``query_chunk_size=1``).
    """

    def __init__(self, embed_dim: int, num_heads: int, *, kdim: Optional[int] = None, vdim: Optional[int] = None,
                 chunk_size: int, hash_classes: int, rounds: int, dropout: float = 0.0, seed: int = 0,
                 shuffle_in_training: bool = True, bias: bool = True):
        super().__init__(embed_dim, num_heads, chunk_size=chunk_size, hash_classes=hash_classes, rounds=rounds,
                         dropout=dropout, seed=seed, bias=bias)
        self.shuffle_in_training = shuffle_in_training
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(kdim or embed_dim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(vdim or embed_dim, embed_dim, bias=bias)
        for projection in (self.q_proj, self.k_proj, self.v_proj):
            self._init_projection(projection, 1 / math.sqrt(2))
        self._init_projection(self.out_proj, 1.0)

    def shuffle_generator(self, device) -> torch.Generator:
        """The training shuffle's generator: a function of (layer seed, update number) only."""
        generator = torch.Generator(device=device)
        generator.manual_seed((self.seed * 1_000_003 + self.num_updates) % (2**63 - 1))
        return generator

    def _keys(self, key: Tensor, key_padding_mask: Optional[Tensor]):
        keys, values = self._split_heads(self.k_proj(key)), self._split_heads(self.v_proj(key))
        return keys, values, hash_vectors(keys, self.rotations), key_padding_mask

    def forward(self, query: Tensor, key: Optional[Tensor], value: Optional[Tensor] = None,
                key_padding_mask: Optional[Tensor] = None, incremental_state=None, need_weights: bool = False,
                static_kv: bool = True, attn_mask: Optional[Tensor] = None, before_softmax: bool = False,
                need_head_weights: bool = False) -> Tuple[Tensor, None]:
        """query: [Tq, batch, embed]; key: [Tk, batch, kdim] (``value`` is ``key``);
        key_padding_mask: [batch, Tk]. Returns ([Tq, batch, embed], None)."""
        if attn_mask is not None or before_softmax:
            raise NotImplementedError("LSH cross-attention takes only a key padding mask")
        queries = self._split_heads(self.q_proj(query))
        query_classes = hash_vectors(queries, self.rotations)
        if incremental_state is not None:
            buffer = self._get_input_buffer(incremental_state)
            if buffer.get("prev_key") is not None:
                keys, values = buffer["prev_key"], buffer["prev_value"]
                key_classes, key_padding_mask = buffer["key_classes"], buffer.get("key_padding_mask")
            else:
                keys, values, key_classes, key_padding_mask = self._keys(key, key_padding_mask)
                self._set_input_buffer(incremental_state, {
                    "prev_key": keys, "prev_value": values, "key_classes": key_classes,
                    "key_padding_mask": key_padding_mask})
            context = lsh_cross_attention(queries, keys, values, query_classes, key_classes, self.chunk_size,
                                          query_chunk_size=1, key_padding_mask=key_padding_mask)
            return self.out_proj(self._merge_heads(context)), None

        keys, values, key_classes, key_padding_mask = self._keys(key, key_padding_mask)
        query_order = key_order = None
        if self.training and self.shuffle_in_training:
            generator = self.shuffle_generator(queries.device)
            query_order = random_ranks(query_classes.shape, generator, queries.device)
            key_order = random_ranks(key_classes.shape, generator, queries.device)
        context = lsh_cross_attention(queries, keys, values, query_classes, key_classes, self.chunk_size,
                                      key_padding_mask=key_padding_mask, query_order=query_order,
                                      key_order=key_order, dropout_p=self.dropout, training=self.training)
        return self.out_proj(self._merge_heads(context)), None
