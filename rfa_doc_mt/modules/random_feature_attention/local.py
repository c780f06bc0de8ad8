"""Local heads: softmax over the current sentence beside RFA over the window.

RFA's attention cannot be sharp: a linear attention cannot single out a few keys among many (cross
attention: the current sentence's source tokens among L sentences' worth of source; causal
attention: the current sentence's recent tokens). Based (Arora et al. 2024) puts a small
sliding-window softmax beside linear attention; long-short term masking (Zhang et al. 2020) makes
some softmax heads see only the current sentence. A module with ``local_heads = N`` (the options
``--rfa-causal-local-heads``, ``--rfa-cross-local-heads``) computes its first N heads as softmax
attention restricted to the current sentence, the others as RFA over the whole window; the
heads share the module's projections and output projection:

* **causal**: query t of target sentence j sees the keys of sentence j up to t;
* **cross**: a query of target sentence j sees the source tokens of source sentence j (clamped to
  the last source sentence when the target has more sentences:
  :func:`..long_short_attention.aligned_source_sentence`).

Sentences follow :mod:`..sentences` (a token's id is the number of separators before it); the
modules receive sentence starts through the hand-off (:func:`sentence_ids_from_starts` turns
them into ids) and the source's sentence ids. Padding keys are never seen.

The three forms (docs/design.md), tested against each other in tests/test_rfa_local.py:

* **reference**: :func:`reference_local_attention`, the per-head masks written out and an explicit
  softmax in fp32 (:func:`..long_short_attention.long_short_attention_reference`, every head
  local); :func:`reference_causal_module` and :func:`reference_cross_module` put it beside the
  reference forms of RFA (:mod:`.reference`) for a whole module;
* **training**: :func:`local_attention`, one ``scaled_dot_product_attention`` over the local heads
  with the mask of :func:`local_mask` ([batch, 1, time_q, time_k], shared by the heads). Its
  memory is quadratic in the window, as the transformer's attention is, for the N local heads:
  the mask (``batch · time_q · time_k`` bools) and, where the attention backend materialises them
  (the math kernel, which a CPU runs for a masked attention), the scores and probabilities
  (``batch · N · time_q · time_k`` floats each), kept for the backward pass. The RFA heads stay
  linear;
* **incremental** (beam search, one token per step, the cost of a step flat in L):
  :func:`local_causal_step` keeps the current sentence's keys and values and drops them when a new
  sentence starts (a step reads at most the longest current sentence of the batch);
  :func:`local_cross_cache` keeps the source's local keys and values once per source with each
  sentence's first position and length (the per-sentence index), and :func:`local_cross_step`
  gathers the aligned sentence's keys (a step reads at most the longest aligned sentence). The
  source's keys stay in memory (the current sentence moves through the source as decoding goes):
  ``source · N · 2 head_dim`` floats per source, the transformer's cross-attention cache for N heads.
  :func:`incremental_local_causal_attention` and :func:`incremental_local_cross_attention` run the
  steps over whole sequences, with the signatures of the other forms.

On the fused decoding path (:mod:`.fused`, on a GPU) each incremental form is one Triton kernel
launched beside the RFA heads' (:func:`.fused.fused_local_causal_step`,
:func:`.fused.fused_local_cross_step`): the same sums, with the gathers, masks and sentence counts
inside the kernel (the cross one reads the cache of :func:`local_cross_cache`); tested against
these forms in tests/test_rfa_fused.py. A causal attention with the delta rule decodes eagerly,
its local heads too.
"""

from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ..long_short_attention import (
    aligned_source_sentence,
    allowed_keys,
    long_short_attention_reference,
    restrict_to_sentence,
)
from ..sentences import same_sentence_mask, sentence_ids_from_starts
from .reference import reference_causal_rfa, reference_cross_rfa

# what a decoding causal attention keeps for its local heads (local_causal_step): the current
# sentence's keys and values [rows, heads, kept, head_dim] and which of them each row reads [rows, kept]
LOCAL_CAUSAL_NAMES = ("local_keys", "local_values", "local_valid")
# what a decoding cross attention keeps of a source for its local heads (local_cross_cache)
LOCAL_CROSS_NAMES = ("local_keys", "local_values", "local_first", "local_length", "local_last")


# ---- masks --------------------------------------------------------------------------------


def source_key_ids(source_ids: Tensor, key_padding_mask: Optional[Tensor]) -> Tensor:
    """The source's sentence ids [batch, source] with padding at -1: no query's sentence, and the
    last sentence is the last one with a real token (every aligned sentence then has one)."""
    if key_padding_mask is None:
        return source_ids
    return source_ids.masked_fill(key_padding_mask.bool(), -1)


def aligned_ids(target_ids: Tensor, source_ids: Tensor, key_padding_mask: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    """(query ids [batch, time]: each target token's aligned source sentence, key ids [batch, source]
    with padding at -1): what the cross forms compare."""
    keys = source_key_ids(source_ids, key_padding_mask)
    return aligned_source_sentence(target_ids, keys), keys


def local_mask(query_ids: Tensor, key_ids: Tensor, key_padding_mask: Optional[Tensor] = None,
               causal: bool = False) -> Tensor:
    """The keys a local head may see: [batch, 1, time_q, time_k] bool (True: attend): same sentence,
    not padding, and (causal) not after the query. A row that would be empty (a padding query
    after a final separator) keeps the keys a global head would see, as long-short masking does."""
    batch, time_q = query_ids.shape
    time_k = key_ids.size(1)
    blocked = None
    if causal:
        blocked = torch.ones(time_q, time_k, dtype=torch.bool, device=query_ids.device).triu(1)
    return restrict_to_sentence(allowed_keys(batch, time_q, time_k, key_padding_mask, blocked),
                                same_sentence_mask(query_ids, key_ids))


# ---- reference and training forms ------------------------------------------------------------


def reference_local_attention(q: Tensor, k: Tensor, v: Tensor, query_ids: Tensor, key_ids: Tensor,
                              key_padding_mask: Optional[Tensor] = None, causal: bool = False) -> Tensor:
    """Reference form: q [batch, heads, time_q, dim], k, v [batch, heads, time_k, dim], sentence ids
    [batch, time_q] and [batch, time_k], padding [batch, time_k] → [batch, heads, time_q, dim] fp32,
    every head local, the masks written out per head and an explicit softmax."""
    return long_short_attention_reference(q, k, v, q.size(1), query_ids, key_ids, key_padding_mask, causal)[0]


def local_attention(q: Tensor, k: Tensor, v: Tensor, query_ids: Tensor, key_ids: Tensor,
                    key_padding_mask: Optional[Tensor] = None, causal: bool = False) -> Tensor:
    """Training form: arguments as :func:`reference_local_attention` → [batch, heads, time_q, dim]
    in q's dtype; one ``scaled_dot_product_attention`` with the mask of :func:`local_mask` (its
    memory: the module docstring)."""
    mask = local_mask(query_ids, key_ids, key_padding_mask, causal)
    return F.scaled_dot_product_attention(q, k, v.to(q.dtype), attn_mask=mask, scale=q.size(-1) ** -0.5)


# ---- incremental forms ----------------------------------------------------------------------


def _attend_one(q: Tensor, keys: Tensor, values: Tensor, visible: Tensor) -> Tensor:
    """One query per row: q [rows, heads, dim], keys and values [rows, heads, n, dim], visible
    [rows, n] bool → [rows, heads, dim]."""
    out = F.scaled_dot_product_attention(q.unsqueeze(2), keys, values, attn_mask=visible[:, None, None, :],
                                         scale=q.size(-1) ** -0.5)
    return out.squeeze(2)


def local_causal_step(q: Tensor, k: Tensor, v: Tensor, cache: Dict[str, Optional[Tensor]], starts: Tensor,
                      real: Optional[Tensor] = None) -> Tensor:
    """Incremental causal form, one token: q, k, v [rows, heads, dim] → [rows, heads, dim].

    ``cache`` holds :data:`LOCAL_CAUSAL_NAMES` (empty: nothing before) and is updated in place.
    ``starts`` [rows] bool: the token starts a sentence, so its row's earlier keys are dropped;
    ``real`` [rows] bool (None: all real): padding tokens are kept as keys no query reads. Columns
    that no row reads any more are cut off, so the keys kept are as many as the longest current
    sentence of the batch so far: a step's work does not grow with the window. A query always sees
    its own key (a padding query then has a key, and its output is never read)."""
    rows = q.size(0)
    new_valid = q.new_ones(rows, 1, dtype=torch.bool) if real is None else real.view(rows, 1).bool()
    keys, values, valid = (cache.get(name) for name in LOCAL_CAUSAL_NAMES)
    if keys is None:
        keys, values, valid = k.unsqueeze(2), v.unsqueeze(2), new_valid
    else:
        valid = torch.cat([valid & ~starts.view(rows, 1), new_valid], 1)
        keys, values = torch.cat([keys, k.unsqueeze(2)], 2), torch.cat([values, v.unsqueeze(2)], 2)
        read = valid.any(0)
        read[-1] = True
        first = int(read.nonzero()[0])
        if first:
            keys, values, valid = keys[:, :, first:], values[:, :, first:], valid[:, first:]
    cache.update(zip(LOCAL_CAUSAL_NAMES, (keys, values, valid)))
    visible = valid.clone()
    visible[:, -1] = True
    return _attend_one(q, keys, values.to(q.dtype), visible)


def local_cross_cache(k: Tensor, v: Tensor, key_ids: Tensor) -> Dict[str, Tensor]:
    """What decoding keeps of the sources for the local heads: k, v [sources, heads, source, dim],
    key_ids [sources, source] (padding -1, :func:`source_key_ids`) → keys and values source-major
    [sources, source, heads, dim] (a step gathers positions), and the per-sentence index: each
    sentence's first position and length [sources, sentences] and the last sentence [sources]."""
    sources, source = key_ids.shape
    sentences = int(key_ids.max()) + 1
    # padding goes to an extra column, dropped
    column = torch.where(key_ids >= 0, key_ids, sentences)
    positions = torch.arange(source, device=key_ids.device).expand(sources, source)
    first = key_ids.new_full((sources, sentences + 1), source).scatter_reduce_(1, column, positions, "amin")
    length = key_ids.new_zeros(sources, sentences + 1).scatter_add_(1, column, torch.ones_like(column))
    return {"local_keys": k.permute(0, 2, 1, 3).contiguous(), "local_values": v.permute(0, 2, 1, 3).contiguous(),
            "local_first": first[:, :-1].contiguous(), "local_length": length[:, :-1].contiguous(),
            "local_last": key_ids.max(1).values}


def local_cross_step(q: Tensor, cache: Dict[str, Tensor], sources: Tensor, sentence: Tensor) -> Tensor:
    """Incremental cross form, one token: q [rows, heads, dim], the cache of
    :func:`local_cross_cache`, ``sources`` [rows] (the cached source each row reads) and
    ``sentence`` [rows] (the target sentence of its token) → [rows, heads, dim]. The keys of each
    row's aligned sentence are gathered: as many as the longest aligned sentence of the batch."""
    aligned = torch.minimum(sentence, cache["local_last"].index_select(0, sources))
    first = cache["local_first"][sources, aligned]
    length = cache["local_length"][sources, aligned]
    offsets = torch.arange(int(length.max()), device=q.device)
    positions = (first.unsqueeze(1) + offsets).clamp_max(cache["local_keys"].size(1) - 1)  # [rows, n]
    keys = cache["local_keys"][sources.unsqueeze(1), positions].transpose(1, 2)  # [rows, heads, n, dim]
    values = cache["local_values"][sources.unsqueeze(1), positions].transpose(1, 2)
    return _attend_one(q, keys, values.to(q.dtype), offsets < length.unsqueeze(1))


def incremental_local_causal_attention(q: Tensor, k: Tensor, v: Tensor, starts: Tensor,
                                       key_padding_mask: Optional[Tensor] = None) -> Tensor:
    """:func:`local_causal_step` over a whole sequence: q, k, v [batch, heads, time, dim], sentence
    starts [batch, time] bool → [batch, heads, time, dim] (the results of the other forms)."""
    cache, outputs = {}, []
    for t in range(q.size(2)):
        real = None if key_padding_mask is None else ~key_padding_mask[:, t].bool()
        outputs.append(local_causal_step(q[:, :, t], k[:, :, t], v[:, :, t], cache, starts[:, t], real))
    return torch.stack(outputs, 2)


def incremental_local_cross_attention(q: Tensor, k: Tensor, v: Tensor, target_starts: Tensor, source_ids: Tensor,
                                      key_padding_mask: Optional[Tensor] = None) -> Tensor:
    """:func:`local_cross_step` over a whole target: q [batch, heads, time, dim], k, v [batch, heads,
    source, dim], the target's sentence starts [batch, time], the source's sentence ids [batch,
    source] → [batch, heads, time, dim]."""
    cache = local_cross_cache(k, v, source_key_ids(source_ids, key_padding_mask))
    rows = torch.arange(q.size(0), device=q.device)
    sentence = sentence_ids_from_starts(target_starts)
    return torch.stack([local_cross_step(q[:, :, t], cache, rows, sentence[:, t]) for t in range(q.size(2))], 2)


# ---- a whole module's reference form ---------------------------------------------------------


def reference_causal_module(module, query: Tensor, key_padding_mask: Optional[Tensor] = None) -> Tensor:
    """Reference form of a causal RFA module (:class:`.layers.RandomFeatureCausalAttention`) with
    local heads: query [time, batch, embed_dim] → [time, batch, embed_dim]. Its projections; the
    local heads by :func:`reference_local_attention` over the sentences of the starts handed to it;
    the RFA heads by :func:`.reference.reference_causal_rfa` with its gates; its output projection."""
    local = module.local_heads
    q, k, v = module._split_qkv(query)
    random_matrix = module.random_matrices()
    phi_q, phi_k = module.features_of(q[:, local:], random_matrix), module.features_of(k[:, local:], random_matrix)
    log_forget, key_weight = module._gates(query, key_padding_mask)
    out, _ = reference_causal_rfa(phi_q, phi_k, v[:, local:], log_forget, key_weight)
    if local:
        ids = sentence_ids_from_starts(module.handed("sentence_starts"))
        local_out = reference_local_attention(q[:, :local], k[:, :local], v[:, :local], ids, ids, key_padding_mask,
                                              causal=True)
        out = torch.cat([local_out, out], 1)
    return module.out_proj(module._merge_heads(out, v.dtype))


def reference_cross_module(module, query: Tensor, key: Tensor, key_padding_mask: Optional[Tensor] = None) -> Tensor:
    """Reference form of a cross RFA module (:class:`.layers.RandomFeatureCrossAttention`) with local
    heads: query [time, batch, embed_dim], key [source, batch, kdim] → [time, batch, embed_dim]. Its
    projections; the local heads by :func:`reference_local_attention` over the aligned source
    sentences (from the target sentence starts and source sentence ids handed to it); the RFA heads
    by :func:`.reference.reference_cross_rfa`; its output projection."""
    local = module.local_heads
    time, batch, _ = query.shape
    q = module.q_proj(query).view(time, batch, module.num_heads, module.head_dim).permute(1, 2, 0, 3)
    k_all, v_all = module._source_heads(key)
    k, v, key_weight = module._rfa_source(k_all, v_all, key, key_padding_mask, module.handed_or_none("sentence_starts"))
    random_matrix = module.random_matrices()
    out, _ = reference_cross_rfa(module.features_of(q[:, local:], random_matrix), module.features_of(k, random_matrix),
                                 v, key_weight)
    if local:
        target_ids = sentence_ids_from_starts(module.handed("target_sentence_starts"))
        query_ids, key_ids = aligned_ids(target_ids, module.handed("source_sentence_ids"), key_padding_mask)
        local_out = reference_local_attention(q[:, :local], k_all[:, :local], v_all[:, :local], query_ids, key_ids,
                                              key_padding_mask)
        out = torch.cat([local_out, out], 1)
    return module.out_proj(module._merge_heads(out, q.dtype))
