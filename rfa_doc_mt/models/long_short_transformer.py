"""The long-short term masking transformer (Zhang et al. 2020): the concatenation transformer whose
self-attention layers have some local heads that see only the current sentence.

The baseline with its self-attention (encoder, decoder, as chosen by ``--local-attention``)
swapped for :class:`~rfa_doc_mt.modules.long_short_attention.LongShortMultiheadAttention`;
``cross`` in ``--local-attention`` also restricts the local heads of cross attention to the
aligned source sentence. Parameter names are the baseline's: a ``doc_transformer``
checkpoint loads into this model, and with ``--local-heads 0`` computes the same function.

The encoder and decoder compute sentence ids from the tokens (the attention only sees hidden
states) and hand them to their attention modules before running the stock layer stack. When
decoding incrementally the decoder keeps, in its incremental state, the running count of
separators seen (the sentence id of the next token) and the ids of all tokens so far.
"""

from typing import Dict, List, Optional

import torch
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import (
    TransformerConfig,
    TransformerDecoderBase,
    TransformerEncoderBase,
)
from fairseq.modules.transformer_layer import (
    TransformerDecoderLayerBase,
    TransformerEncoderLayerBase,
)
from fairseq.utils import safe_getattr
from torch import Tensor

from ..modules.long_short_attention import (
    LongShortMultiheadAttention,
    aligned_source_sentence,
)
from ..modules.sentences import sentence_ids
from .doc_transformer import (
    DocTransformerModel,
    doc_transformer,
    doc_transformer_tiny,
    wrap_layer,
)

LOCAL_ATTENTION_PLACES = ("encoder", "decoder", "cross")


def local_attention_places(cfg) -> List[str]:
    """The attentions with local heads, from ``--local-attention`` (comma-separated)."""
    value = safe_getattr(cfg, "local_attention", "encoder,decoder") or ""
    places = [place.strip() for place in value.split(",") if place.strip() and place.strip() != "none"]
    unknown = sorted(set(places) - set(LOCAL_ATTENTION_PLACES))
    if unknown:
        raise ValueError(f"--local-attention {value!r}: unknown {unknown}; "
                         f"choose from {', '.join(LOCAL_ATTENTION_PLACES)} (or none)")
    return places


def number_of_local_heads(cfg, num_heads: int) -> int:
    """``--local-heads``, or half of the heads when unset (Zhang et al. 2020 splits heads in two)."""
    local_heads = safe_getattr(cfg, "local_heads", None)
    return num_heads // 2 if local_heads is None else int(local_heads)




def long_short_attentions(module: torch.nn.Module, cross: bool) -> List[LongShortMultiheadAttention]:
    """The long-short attention modules under ``module``: cross attention or self-attention."""
    return [m for m in module.modules()
            if isinstance(m, LongShortMultiheadAttention) and m.encoder_decoder_attention == cross]


class LongShortEncoderLayer(TransformerEncoderLayerBase):
    """fairseq's encoder layer with long-short term self-attention."""

    def build_self_attention(self, embed_dim, cfg):
        if "encoder" not in local_attention_places(cfg):
            return super().build_self_attention(embed_dim, cfg)
        return LongShortMultiheadAttention(
            embed_dim,
            cfg.encoder.attention_heads,
            local_heads=number_of_local_heads(cfg, cfg.encoder.attention_heads),
            dropout=cfg.attention_dropout,
            self_attention=True,
            q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size,
        )


class LongShortDecoderLayer(TransformerDecoderLayerBase):
    """fairseq's decoder layer with long-short term self-attention (and, optionally, cross
    attention whose local heads see the aligned source sentence)."""

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        if cfg.cross_self_attention:
            raise NotImplementedError("lstm_doc_transformer does not support --cross-self-attention")
        if "decoder" not in local_attention_places(cfg):
            return super().build_self_attention(embed_dim, cfg, add_bias_kv, add_zero_attn)
        return LongShortMultiheadAttention(
            embed_dim,
            cfg.decoder.attention_heads,
            local_heads=number_of_local_heads(cfg, cfg.decoder.attention_heads),
            dropout=cfg.attention_dropout,
            add_bias_kv=add_bias_kv,
            add_zero_attn=add_zero_attn,
            self_attention=True,
            q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size,
        )

    def build_encoder_attention(self, embed_dim, cfg):
        if "cross" not in local_attention_places(cfg):
            return super().build_encoder_attention(embed_dim, cfg)
        return LongShortMultiheadAttention(
            embed_dim,
            cfg.decoder.attention_heads,
            local_heads=number_of_local_heads(cfg, cfg.decoder.attention_heads),
            kdim=cfg.encoder.embed_dim,
            vdim=cfg.encoder.embed_dim,
            dropout=cfg.attention_dropout,
            encoder_decoder_attention=True,
            q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size,
        )


class LongShortTransformerEncoder(TransformerEncoderBase):
    """fairseq's encoder; computes source sentence ids for its local heads and returns them
    in ``encoder_out["source_sentence_ids"]`` ([batch, src_len]) for aligned cross attention."""

    def __init__(self, cfg, dictionary, embed_tokens, return_fc=False):
        super().__init__(cfg, dictionary, embed_tokens, return_fc=return_fc)
        self.separator: int = cfg.source_separator_index

    def build_encoder_layer(self, cfg):
        return wrap_layer(LongShortEncoderLayer(cfg, return_fc=self.return_fc), cfg)

    def forward(self, src_tokens, src_lengths: Optional[Tensor] = None, return_all_hiddens: bool = False,
                token_embeddings: Optional[Tensor] = None):
        source_sentence_ids = sentence_ids(src_tokens, self.separator)
        for attention in long_short_attentions(self, cross=False):
            attention.hand_in(query_sentence_ids=source_sentence_ids, key_sentence_ids=source_sentence_ids)
        encoder_out = super().forward(src_tokens, src_lengths, return_all_hiddens, token_embeddings)
        encoder_out["source_sentence_ids"] = [source_sentence_ids]
        return encoder_out

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order):
        reordered = super().reorder_encoder_out(encoder_out, new_order)
        reordered["source_sentence_ids"] = [ids.index_select(0, new_order)
                                            for ids in encoder_out.get("source_sentence_ids", [])]
        return reordered


class LongShortTransformerDecoder(TransformerDecoderBase):
    """fairseq's incremental decoder; computes target sentence ids for its local heads.

    Incremental state (key ``"sentences"``): ``separators_seen`` [batch, 1], the number of
    separators among the tokens fed so far, which is the sentence id of the next token
    (sentences.py); ``key_sentence_ids`` [batch, steps], the ids of all tokens fed so far.
    """

    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn,
                         output_projection=output_projection)
        self.separator: int = cfg.target_separator_index

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        return wrap_layer(LongShortDecoderLayer(cfg, no_encoder_attn), cfg)

    def extract_features(
        self,
        prev_output_tokens,
        encoder_out: Optional[Dict[str, List[Tensor]]],
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        full_context_alignment: bool = False,
        alignment_layer: Optional[int] = None,
        alignment_heads: Optional[int] = None,
    ):
        query_ids, key_ids = self.target_sentence_ids(prev_output_tokens, incremental_state)
        for attention in long_short_attentions(self, cross=False):
            attention.hand_in(query_sentence_ids=query_ids, key_sentence_ids=key_ids)
        cross_attentions = [attention for attention in long_short_attentions(self, cross=True)
                            if attention.local_heads > 0]
        if cross_attentions and encoder_out is not None:
            if not encoder_out.get("source_sentence_ids"):
                raise RuntimeError("aligned cross attention needs encoder_out['source_sentence_ids'] "
                                   "(from LongShortTransformerEncoder)")
            source_ids = encoder_out["source_sentence_ids"][0]
            aligned_ids = aligned_source_sentence(query_ids, source_ids)
            for attention in cross_attentions:
                attention.hand_in(query_sentence_ids=aligned_ids, key_sentence_ids=source_ids)
        return super().extract_features(prev_output_tokens, encoder_out, incremental_state,
                                        full_context_alignment, alignment_layer, alignment_heads)

    def target_sentence_ids(self, prev_output_tokens: Tensor,
                            incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]]):
        """Sentence ids of the queries [batch, time_q] and of the keys [batch, time_k].

        Full forward: both are ``sentence_ids(prev_output_tokens)``. Incremental: the query is
        the last token, its id the running separator count; keys are all tokens so far."""
        if incremental_state is None:
            ids = sentence_ids(prev_output_tokens, self.separator)
            return ids, ids
        state = self.get_incremental_state(incremental_state, "sentences")
        new_token = prev_output_tokens[:, -1:]
        if state is None:
            # first step: separators before the new token (none, unless started from a prefix)
            separators_seen = prev_output_tokens[:, :-1].eq(self.separator).sum(dim=1, keepdim=True)
            previous_ids = separators_seen.new_zeros(separators_seen.size(0), 0)
        else:
            separators_seen, previous_ids = state["separators_seen"], state["key_sentence_ids"]
        query_ids = separators_seen
        key_ids = torch.cat([previous_ids, query_ids], dim=1)
        self.set_incremental_state(incremental_state, "sentences", {
            "separators_seen": separators_seen + new_token.eq(self.separator).long(),
            "key_sentence_ids": key_ids,
        })
        return query_ids, key_ids

    def reorder_incremental_state(self, incremental_state: Dict[str, Dict[str, Optional[Tensor]]],
                                  new_order: Tensor):
        state = self.get_incremental_state(incremental_state, "sentences")
        if state is not None:
            self.set_incremental_state(incremental_state, "sentences", {
                name: value.index_select(0, new_order) for name, value in state.items()})


@register_model("long_short_doc_transformer")
class LongShortTermMaskingTransformerModel(DocTransformerModel):
    """Concatenation transformer with long-short term masking self-attention (Zhang et al. 2020)."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        parser.add_argument("--local-heads", type=int, metavar="N",
                            help="heads per attention layer that see only the current sentence "
                                 "(short-term); the others see the whole window (default: half)")
        parser.add_argument("--local-attention", type=str, metavar="LIST",
                            help="comma-separated attentions with local heads: encoder (self), "
                                 "decoder (self), cross (local heads see the aligned source "
                                 "sentence); 'none' for the baseline (default: encoder,decoder)")

    @classmethod
    def build_model(cls, args, task):
        for side in ("source", "target"):
            if not hasattr(task, f"{side}_separator"):
                raise ValueError("long_short_doc_transformer needs the doc_translation task (sentence separators)")
        local_attention_places(args)  # fail early on a bad --local-attention
        return super().build_model(args, task)

    @classmethod
    def build_encoder(cls, cfg, src_dict, embed_tokens):
        return LongShortTransformerEncoder(TransformerConfig.from_namespace(cfg), src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, cfg, tgt_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(cfg)
        return LongShortTransformerDecoder(cfg, tgt_dict, embed_tokens, no_encoder_attn=cfg.no_cross_attention)


def long_short_defaults(args):
    args.local_heads = safe_getattr(args, "local_heads", None)
    args.local_attention = safe_getattr(args, "local_attention", "encoder,decoder")


@register_model_architecture("long_short_doc_transformer", "long_short_doc_transformer")
def long_short_doc_transformer(args):
    """Paper sizes (as ``doc_transformer``); half of the self-attention heads are local."""
    long_short_defaults(args)
    doc_transformer(args)


@register_model_architecture("long_short_doc_transformer", "long_short_doc_transformer_tiny")
def long_short_doc_transformer_tiny(args):
    """A small model for CPU demos and tests."""
    long_short_defaults(args)
    doc_transformer_tiny(args)


# The names before the rename ("lstm" read as an LSTM): configs and checkpoints that use them still work.
register_model_architecture("long_short_doc_transformer", "lstm_doc_transformer")(long_short_doc_transformer)
register_model_architecture("long_short_doc_transformer", "lstm_doc_transformer_tiny")(long_short_doc_transformer_tiny)
lstm_doc_transformer, lstm_doc_transformer_tiny = long_short_doc_transformer, long_short_doc_transformer_tiny
