"""Long-short term masking self-attention (Zhang et al. 2020: Zhang, Chen, Ge and Fan, "Long-Short Term
Masking Transformer: A Simple but Effective Baseline for Document-level Neural Machine
Translation", EMNLP 2020; the supplement gives the mask code, section 2).

Some heads of multi-head attention (the *local* or short-term heads) may only attend to keys of
the query's own sentence; the other heads (global, long-term) see the whole window. The
supplement builds the local mask as "same number of separators so far" for queries and keys,
and for the decoder adds it to the causal mask. The supplement leaves open which heads are
local and what happens at padding; this project fixes:

- Sentence ids come from :mod:`rfa_doc_mt.modules.sentences` (a token's id is the number of
  separators *before* it, so a separator closes its own sentence; the supplement's inclusive
  ``tf.cumsum`` would put it at the start of the next one instead). EOS and right padding
  belong to the last sentence.
- The first ``local_heads`` heads are local, the others global.
- A local head's allowed keys are the global allowed keys (padding, causal) restricted to the
  query's sentence. Should that leave a query row with no key at all (only possible for a
  padding query of an empty last sentence, e.g. a decoder input ending with a separator), the
  row falls back to the global allowed keys: no row is ever fully masked, so no NaN.
- Cross attention can use the same idea (``aligned`` source sentence): a query in target
  sentence j sees source sentence j, clamped to the last source sentence.

Three forms, one truth (docs/design.md):

- :func:`long_short_attention_reference`: the per-head mask written out as [batch, heads,
  time, time] and an explicit softmax, for clarity and tests;
- :class:`LongShortMultiheadAttention` training form: the heads are split into a local and a
  global group, each group is one ``scaled_dot_product_attention`` call with a mask shared
  by its heads ([batch, 1, time, time]), or no mask at all when nothing is masked;
- the incremental form of the same class, for beam search: keys, values and their padding
  mask are cached in fairseq's incremental state exactly as fairseq's
  :class:`~fairseq.modules.MultiheadAttention` caches them (same buffer names and shapes, so
  its ``reorder_incremental_state`` is reused); the sentence ids of the cached keys and of the
  new query are kept by the decoder (see ``models/long_short_transformer.py``) and handed in with
  ``LongShortMultiheadAttention.hand_in``.

The class subclasses fairseq's MultiheadAttention to reuse its projections and parameter
names (``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``): a baseline checkpoint loads as is.
"""

from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq.modules import MultiheadAttention
from torch import Tensor

from .hand_off import HandOff
from .sentences import same_sentence_mask

IncrementalState = Dict[str, Dict[str, Optional[Tensor]]]


# ---- masks --------------------------------------------------------------------------------


def allowed_keys(
    batch: int,
    query_length: int,
    key_length: int,
    key_padding_mask: Optional[Tensor] = None,
    attn_mask: Optional[Tensor] = None,
) -> Optional[Tensor]:
    """Keys every head may see: [batch, 1, time_q, time_k] bool (True = attend), or None (all).

    key_padding_mask: [batch, time_k], True/nonzero at padding (fairseq's convention).
    attn_mask: [time_q, time_k], fairseq's additive mask (0 where allowed, -inf or -1e8 where
    blocked, e.g. the decoder's causal mask) or a bool mask (True = blocked).
    """
    allowed = None
    if key_padding_mask is not None:
        allowed = ~key_padding_mask.bool()[:, None, None, :]
    if attn_mask is not None:
        not_blocked = attn_mask.eq(0)[None, None, :, :]
        allowed = not_blocked if allowed is None else allowed & not_blocked
    if allowed is None:
        return None
    return allowed.expand(batch, 1, query_length, key_length)


def restrict_to_sentence(global_allowed: Optional[Tensor], same_sentence: Tensor) -> Tensor:
    """Keys a local head may see: [batch, 1, time_q, time_k] bool.

    global_allowed: [batch, 1, time_q, time_k] bool or None (everything allowed).
    same_sentence: [batch, time_q, time_k] bool, from :func:`same_sentence_mask`.
    Rows the restriction would leave empty keep their global keys (see the module docstring).
    """
    same_sentence = same_sentence.unsqueeze(1)
    if global_allowed is None:
        # every query sees at least itself or, in cross attention, its (non-empty) sentence
        return same_sentence
    local = global_allowed & same_sentence
    empty_row = ~local.any(dim=-1, keepdim=True)
    return torch.where(empty_row, global_allowed, local)


def aligned_source_sentence(target_sentence_ids: Tensor, source_sentence_ids: Tensor) -> Tensor:
    """The source sentence a target query is aligned to: [batch, time_q] (sentence index j -> j,
    clamped to the last source sentence when the target has more sentences than the source).

    source_sentence_ids: [batch, time_k]; its padding carries the last sentence's id, so the
    row maximum is the last source sentence.
    """
    last_source_sentence = source_sentence_ids.max(dim=-1, keepdim=True).values
    return torch.minimum(target_sentence_ids, last_source_sentence)


# ---- reference form -----------------------------------------------------------------------


def long_short_attention_reference(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    local_heads: int,
    query_sentence_ids: Tensor,
    key_sentence_ids: Tensor,
    key_padding_mask: Optional[Tensor] = None,
    causal: bool = False,
) -> Tuple[Tensor, Tensor]:
    """Long-short term attention written out plainly, for tests.

    query: [batch, heads, time_q, dim]; key, value: [batch, heads, time_k, dim] (projected);
    query_sentence_ids: [batch, time_q]; key_sentence_ids: [batch, time_k];
    key_padding_mask: [batch, time_k] bool, True at padding; causal: query i sees keys <= i.
    Returns the attention output [batch, heads, time_q, dim] and probabilities
    [batch, heads, time_q, time_k], computed in fp32.
    """
    batch, heads, query_length, dim = query.shape
    key_length = key.size(2)
    # the supplement's mask: same sentence <=> same separator count (Zhang et al. 2020, supp. sec. 2)
    same_sentence = query_sentence_ids[:, :, None] == key_sentence_ids[:, None, :]
    visible = torch.ones(batch, query_length, key_length, dtype=torch.bool, device=query.device)
    if key_padding_mask is not None:
        visible &= ~key_padding_mask[:, None, :]
    if causal:
        visible &= torch.ones(query_length, key_length, dtype=torch.bool, device=query.device).tril()
    mask = torch.empty(batch, heads, query_length, key_length, dtype=torch.bool, device=query.device)
    for head in range(heads):
        if head < local_heads:
            local = visible & same_sentence
            # a query with nothing left in its sentence keeps the keys a global head sees
            mask[:, head] = torch.where(local.any(-1, keepdim=True), local, visible)
        else:
            mask[:, head] = visible
    scores = torch.einsum("bhqd,bhkd->bhqk", query.float(), key.float()) * dim ** -0.5
    probabilities = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    output = torch.einsum("bhqk,bhkd->bhqd", probabilities, value.float())
    return output, probabilities


# ---- training and incremental forms ---------------------------------------------------------


class LongShortMultiheadAttention(HandOff, MultiheadAttention):
    """fairseq's multi-head attention whose first ``local_heads`` heads see only the query's
    sentence (Zhang et al. 2020). Same constructor arguments as fairseq's, plus ``local_heads``.

    Sentence ids are not computed here (the module sees hidden states, not tokens): the
    encoder / decoder that owns this module hands them in before each forward
    (``hand_in(query_sentence_ids=..., key_sentence_ids=...)``, ``modules/hand_off.py``):
    ``query_sentence_ids`` [batch, time_q] of the queries of the next forward (the new token
    only when decoding incrementally), ``key_sentence_ids`` [batch, time_k] of all its keys
    (cached ones included). For cross attention the query ids are the aligned source sentences
    (:func:`aligned_source_sentence`). batch is the query batch (batch * beam).
    """

    def __init__(self, embed_dim, num_heads, *args, local_heads: int = 0, **kwargs):
        super().__init__(embed_dim, num_heads, *args, **kwargs)
        if not 0 <= local_heads <= num_heads:
            raise ValueError(f"--local-heads {local_heads} must be between 0 and the number of heads ({num_heads})")
        if self.bias_k is not None or self.add_zero_attn or self.use_xformers:
            raise NotImplementedError("long-short term attention supports neither add_bias_kv, "
                                      "add_zero_attn nor xformers")
        self.local_heads = local_heads

    def extra_repr(self) -> str:
        return f"heads={self.num_heads}, local_heads={self.local_heads}"

    def _same_sentence(self, batch: int, query_length: int, key_length: int) -> Tensor:
        query_ids = self.handed("query_sentence_ids", (batch, query_length), "its local heads")
        key_ids = self.handed("key_sentence_ids", (batch, key_length), "its local heads")
        return same_sentence_mask(query_ids, key_ids)

    def _split_heads(self, x: Tensor, batch: int) -> Tensor:
        """[time, batch, embed] -> [batch, heads, time, head_dim]."""
        return x.view(x.size(0), batch, self.num_heads, self.head_dim).permute(1, 2, 0, 3)

    def _first_beam(self, x: Tensor) -> Tensor:
        """[time, batch * beam, embed] -> [time, batch, embed]: the first beam of each sentence."""
        return x.view(x.size(0), -1, self.beam_size, x.size(2))[:, :, 0]

    def forward(
        self,
        query: Tensor,
        key: Optional[Tensor],
        value: Optional[Tensor],
        key_padding_mask: Optional[Tensor] = None,
        incremental_state: Optional[IncrementalState] = None,
        need_weights: bool = True,
        static_kv: bool = False,
        attn_mask: Optional[Tensor] = None,
        before_softmax: bool = False,
        need_head_weights: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """query: [time_q, batch, embed]; key, value: [time_k, batch, embed] (ignored for
        self-attention); key_padding_mask: [batch, time_k]; attn_mask: [time_q, time_k].
        Returns [time_q, batch, embed] and, if asked, weights [batch, time_q, time_k] averaged
        over heads or [heads, batch, time_q, time_k] (need_head_weights), as fairseq does."""
        if before_softmax:
            raise NotImplementedError("before_softmax is not supported by long-short term attention")
        need_weights = need_weights or need_head_weights
        query_length, batch, _ = query.shape

        saved_state = self._get_input_buffer(incremental_state) if incremental_state is not None else None
        reuse_keys = saved_state is not None and static_kv and "prev_key" in saved_state

        q = self._split_heads(self.q_proj(query), batch)
        k = v = None
        if not reuse_keys:
            key_input = query if self.self_attention else key
            value_input = query if self.self_attention else value
            assert key_input is not None and value_input is not None
            if (incremental_state is not None and self.encoder_decoder_attention
                    and self.beam_size > 1 and key_input.size(1) == batch):
                # beam search: the beams of a sentence share its encoder output; keep one copy
                # (fairseq's "beamable" cross attention, same cache layout)
                key_input = self._first_beam(key_input)
                value_input = self._first_beam(value_input)
                if key_padding_mask is not None:
                    key_padding_mask = key_padding_mask.view(-1, self.beam_size, key_padding_mask.size(1))[:, 0]
            k = self._split_heads(self.k_proj(key_input), key_input.size(1))
            v = self._split_heads(self.v_proj(value_input), value_input.size(1))

        if saved_state is not None:
            if "prev_key" in saved_state:
                previous_key, previous_value = saved_state["prev_key"], saved_state["prev_value"]
                assert previous_key is not None and previous_value is not None
                if static_kv:
                    k, v = previous_key, previous_value
                else:
                    k = torch.cat([previous_key, k], dim=2)
                    v = torch.cat([previous_value, v], dim=2)
            assert k is not None and v is not None
            key_padding_mask = MultiheadAttention._append_prev_key_padding_mask(
                key_padding_mask=key_padding_mask,
                prev_key_padding_mask=saved_state.get("prev_key_padding_mask"),
                batch_size=k.size(0), src_len=k.size(2), static_kv=static_kv)
            saved_state["prev_key"], saved_state["prev_value"] = k, v
            saved_state["prev_key_padding_mask"] = key_padding_mask
            self._set_input_buffer(incremental_state, saved_state)
        assert k is not None and v is not None
        key_length = k.size(2)

        if key_padding_mask is not None and k.size(0) != batch:
            # beamable cross attention caches one padding row per sentence; masks are per query row
            key_padding_mask = key_padding_mask.repeat_interleave(batch // k.size(0), dim=0)
        global_allowed = allowed_keys(batch, query_length, key_length, key_padding_mask, attn_mask)
        local_allowed = None
        if self.local_heads > 0:
            same_sentence = self._same_sentence(batch, query_length, key_length)
            local_allowed = restrict_to_sentence(global_allowed, same_sentence)

        output, probabilities = self._attend(q, k, v, local_allowed, global_allowed, need_weights)
        output = output.permute(2, 0, 1, 3).reshape(query_length, batch, self.embed_dim)
        output = self.out_proj(output)

        weights: Optional[Tensor] = None
        if need_weights:
            assert probabilities is not None
            weights = probabilities.transpose(0, 1)  # [heads, batch, time_q, time_k]
            if not need_head_weights:
                weights = weights.mean(dim=0)
        return output, weights

    def _attend(
        self, q: Tensor, k: Tensor, v: Tensor, local_allowed: Optional[Tensor],
        global_allowed: Optional[Tensor], need_weights: bool,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """q: [batch, heads, time_q, dim]; k, v: [key_batch, heads, time_k, dim], key_batch
        dividing batch (beamable cross attention); masks [batch, 1, time_q, time_k] or None.
        The local heads (first ``local_heads``) use local_allowed, the others global_allowed."""
        groups = []
        if self.local_heads > 0:
            groups.append((slice(0, self.local_heads), local_allowed))
        if self.local_heads < self.num_heads:
            groups.append((slice(self.local_heads, self.num_heads), global_allowed))
        outputs, probabilities = [], []
        for heads, allowed in groups:
            output, probability = self._attend_group(q[:, heads], k[:, heads], v[:, heads], allowed, need_weights)
            outputs.append(output)
            probabilities.append(probability)
        output = outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=1)
        if not need_weights:
            return output, None
        return output, probabilities[0] if len(probabilities) == 1 else torch.cat(probabilities, dim=1)

    def _attend_group(
        self, q: Tensor, k: Tensor, v: Tensor, allowed: Optional[Tensor], need_weights: bool,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """One group of heads sharing a mask; shapes as in :meth:`_attend`."""
        batch, heads, query_length, dim = q.shape
        key_batch = k.size(0)
        beams = batch // key_batch
        if beams > 1:
            # the beams of a sentence become extra query positions over the sentence's one copy
            # of the keys: [key_batch, heads, beams * time_q, dim]
            q = q.view(key_batch, beams, heads, query_length, dim).transpose(1, 2) \
                .reshape(key_batch, heads, beams * query_length, dim)
            if allowed is not None:
                allowed = allowed.reshape(key_batch, beams, 1, query_length, -1).transpose(1, 2) \
                    .reshape(key_batch, 1, beams * query_length, -1)
        dropout_p = self.dropout_module.p if (self.training or self.dropout_module.apply_during_inference) else 0.0
        probabilities = None
        if need_weights:
            # explicit softmax in fp32 (fairseq returns the attention weights for alignment)
            scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * self.scaling
            if allowed is not None:
                scores = scores.masked_fill(~allowed, float("-inf"))
            probabilities = scores.softmax(dim=-1)
            output = torch.matmul(self.dropout_module(probabilities).to(v.dtype), v)
        else:
            output = F.scaled_dot_product_attention(
                q, k, v, attn_mask=allowed, dropout_p=dropout_p, scale=self.scaling)
        if beams > 1:
            output = output.view(key_batch, heads, beams, query_length, dim).transpose(1, 2) \
                .reshape(batch, heads, query_length, dim)
            if probabilities is not None:
                probabilities = probabilities.view(key_batch, heads, beams, query_length, -1).transpose(1, 2) \
                    .reshape(batch, heads, query_length, -1)
        return output, probabilities
