"""Reference forms of LSH attention: quadratic full attention restricted to the key sets
``P_i`` that Petrick et al. 2022 defines, written for clarity (sort ranks by pairwise comparison, chunk
alignment by min/max over keys); the training and incremental forms are tested against them."""

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from .hashing import PAD_CLASS, fp32_math


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


def masked_softmax_or(scores: Tensor, allowed: Tensor, values: Tensor, fallback: Tensor) -> Tensor:
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
    """Full attention restricted to ``union_r P_i^r`` (Petrick et al. 2022, §3, Figure 1).

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
    return masked_softmax_or(scores, allowed, values.float(), values.float()).to(values.dtype)


def _aligned_key_chunks(query_classes, query_chunks, key_classes, key_chunks, key_is_real):
    """Petrick et al. 2022, §3 "How to find an adequate key chunk": for every query, the middle
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
    """Full attention restricted to ``union_r P_i^r`` for LSH cross-attention (Petrick et al. 2022, §3, Figure 2).

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
    return masked_softmax_or(scores, same_class, values.float(), window_average).to(values.dtype)
