"""RFA document transformer (paper 000): the baseline with random feature attention in the
decoder's causal and cross attention, optionally with the sentential gate (§3.2).

The encoder keeps softmax self-attention (the paper uses RFA where decoding speed is
decided: decoder causal and cross attention). Variants of Table 1::

    RFA            --rfa-gate none
    RFA-sgate      --rfa-gate sgate      --rfa-gate-bias-init {1,2}
    RFA-sgate-avg  --rfa-gate sgate-avg

fairseq's decoder layer loop passes no token ids to the attention modules, so the decoder
computes the sentence starts of each forward (from ``prev_output_tokens``, and from the
source tokens for the optional cross gate) and hands them to its RFA modules for that
forward only (``sentence_starts`` attribute, cleared afterwards).
"""

from dataclasses import dataclass
from typing import Optional

from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerDecoder, TransformerEncoder
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase
from fairseq.utils import safe_getattr
from torch import nn

from ..modules.random_feature_attention import (
    FEATURE_MAPS,
    GATE_VARIANTS,
    RandomFeatureCausalAttention,
    RandomFeatureCrossAttention,
    module_seed,
)
from ..modules.sentences import sentence_starts
from .doc_transformer import (
    DocTransformerModel,
    doc_transformer,
    doc_transformer_tiny,
    wrap_layer,
)

DEFAULT_GATE_BIAS = {"sgate": 2.0, "sgate-avg": 0.0, "none": 0.0}
# the decoder attentions RFA can replace (the paper replaces both)
RFA_ATTENTIONS = ("causal", "cross")


@dataclass(frozen=True)
class RFAOptions:
    """The model's RFA settings (see ``add_args`` for their meaning)."""

    cross_proj_dim: int
    causal_proj_dim: int
    gate: str
    gate_bias_init: float
    cross_gate: bool
    feature_map: str
    learned_tau: bool
    norm_rescale: bool
    tau_init: float
    attentions: tuple
    seed: int

    @classmethod
    def from_args(cls, args) -> "RFAOptions":
        gate = safe_getattr(args, "rfa_gate", "none")
        bias = safe_getattr(args, "rfa_gate_bias_init", None)
        return cls(
            cross_proj_dim=int(safe_getattr(args, "rfa_cross_proj_dim", 256)),
            causal_proj_dim=int(safe_getattr(args, "rfa_causal_proj_dim", 32)),
            gate=gate,
            gate_bias_init=float(DEFAULT_GATE_BIAS[gate] if bias is None else bias),
            cross_gate=bool(safe_getattr(args, "rfa_cross_gate", False)),
            feature_map=safe_getattr(args, "rfa_feature_map", "fourier"),
            learned_tau=bool(safe_getattr(args, "rfa_learned_tau", True)),
            norm_rescale=bool(safe_getattr(args, "rfa_norm_rescale", False)),
            tau_init=float(safe_getattr(args, "rfa_tau_init", 1.0)),
            attentions=parse_rfa_attentions(safe_getattr(args, "rfa_attention", ",".join(RFA_ATTENTIONS))),
            seed=int(safe_getattr(args, "seed", 1)),
        )


def parse_rfa_attentions(value: str) -> tuple:
    names = tuple(name.strip() for name in value.split(",") if name.strip())
    unknown = [name for name in names if name not in RFA_ATTENTIONS]
    if unknown or not names:
        raise ValueError(f"--rfa-attention {value!r}: expected a comma-separated subset of {RFA_ATTENTIONS}")
    return names


class RFADecoderLayer(TransformerDecoderLayerBase):
    """fairseq's decoder layer with causal and cross RFA in place of softmax attention."""

    def __init__(self, cfg, options: RFAOptions, layer_index: int, no_encoder_attn: bool = False):
        self.options, self.layer_index = options, layer_index  # read by the build_* methods below
        super().__init__(cfg, no_encoder_attn=no_encoder_attn)

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        o = self.options
        if "causal" not in o.attentions:  # softmax, for ablations
            return super().build_self_attention(embed_dim, cfg, add_bias_kv, add_zero_attn)
        if add_bias_kv or add_zero_attn or cfg.cross_self_attention:
            raise ValueError("RFA causal attention supports neither bias_kv, zero_attn nor cross_self_attention")
        return _with_tau_init(RandomFeatureCausalAttention(
            embed_dim, cfg.decoder.attention_heads, o.causal_proj_dim,
            seed=module_seed(o.seed, self.layer_index, "causal"), feature_map=o.feature_map,
            learned_tau=o.learned_tau, gate=o.gate, gate_bias_init=o.gate_bias_init), o.tau_init)

    def build_encoder_attention(self, embed_dim, cfg):
        o = self.options
        if "cross" not in o.attentions:  # softmax, for ablations
            return super().build_encoder_attention(embed_dim, cfg)
        return _with_tau_init(RandomFeatureCrossAttention(
            embed_dim, cfg.decoder.attention_heads, o.cross_proj_dim,
            seed=module_seed(o.seed, self.layer_index, "cross"), kdim=cfg.encoder.embed_dim,
            feature_map=o.feature_map, learned_tau=o.learned_tau, gate=o.gate,
            gate_bias_init=o.gate_bias_init, cross_gate=o.cross_gate, norm_rescale=o.norm_rescale), o.tau_init)


def _with_tau_init(module, tau_init: float):
    if module.tau is not None:
        nn.init.constant_(module.tau, tau_init)
    return module


class RFATransformerEncoder(TransformerEncoder):
    """The softmax encoder; its output also carries ``src_tokens`` (the cross gate needs the
    source's sentence starts; fairseq's ``reorder_encoder_out`` reorders them with the rest)."""

    def forward(self, src_tokens, src_lengths=None, return_all_hiddens: bool = False, token_embeddings=None):
        encoder_out = super().forward(src_tokens, src_lengths, return_all_hiddens, token_embeddings)
        encoder_out["src_tokens"] = [src_tokens]
        return encoder_out


class RFATransformerDecoder(TransformerDecoder):
    """fairseq's incremental transformer decoder built from :class:`RFADecoderLayer`."""

    def __init__(self, args, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        self.options = RFAOptions.from_args(args)  # before the layers are built
        self._layers_built = 0
        # from the task through DocTransformerModel.build_model; None outside doc_translation
        self.target_separator: Optional[int] = safe_getattr(args, "target_separator_index", None)
        self.source_separator: Optional[int] = safe_getattr(args, "source_separator_index", None)
        super().__init__(args, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn,
                         output_projection=output_projection)

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        layer = RFADecoderLayer(cfg, self.options, self._layers_built, no_encoder_attn=no_encoder_attn)
        self._layers_built += 1
        return wrap_layer(layer, cfg)

    def _rfa_modules(self):
        for layer in self.layers:
            if isinstance(layer.self_attn, RandomFeatureCausalAttention):
                yield layer.self_attn, "target"
            if isinstance(layer.encoder_attn, RandomFeatureCrossAttention):
                yield layer.encoder_attn, "source"

    def _begin_forward(self, prev_output_tokens, encoder_out, incremental_state) -> None:
        """Hand each RFA module what this forward needs beside its inputs: sentence starts for
        the gates, and a new random-matrix draw held for the whole pass."""
        needs_target = self.options.gate != "none"
        needs_source = self.options.cross_gate
        target_starts = source_starts = None
        if needs_target:
            if self.target_separator is None:
                raise RuntimeError("the sentential gate needs the target separator: build the model with the "
                                   "doc_translation task")
            if incremental_state is not None:
                # the current token starts a sentence when the token before it is a separator
                target_starts = sentence_starts(prev_output_tokens[:, -2:], self.target_separator)[:, -1:]
            else:
                target_starts = sentence_starts(prev_output_tokens, self.target_separator)
        if needs_source and encoder_out is not None and encoder_out.get("src_tokens"):
            if self.source_separator is None:
                raise RuntimeError("the cross gate needs the source separator: use the doc_translation task")
            source_starts = sentence_starts(encoder_out["src_tokens"][0], self.source_separator)
        for module, side in self._rfa_modules():
            module.sentence_starts = target_starts if side == "target" else source_starts
            module.random_matrices.begin_forward()

    def extract_features(self, prev_output_tokens, encoder_out=None, incremental_state=None,
                         full_context_alignment: bool = False, alignment_layer: Optional[int] = None,
                         alignment_heads: Optional[int] = None):
        # valid until the next forward: activation checkpointing recomputes the layers in the backward pass
        self._begin_forward(prev_output_tokens, encoder_out, incremental_state)
        return super().extract_features(prev_output_tokens, encoder_out, incremental_state,
                                        full_context_alignment, alignment_layer, alignment_heads)


@register_model("rfa_doc_transformer")
class RFADocTransformerModel(DocTransformerModel):
    """The concatenation transformer with RFA in decoder causal and cross attention (paper 000)."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        parser.add_argument("--rfa-cross-proj-dim", type=int, metavar="D",
                            help="random projections of cross attention (φ has 2D features with the "
                                 "Fourier map); paper: 256 (with 32 causal) or 128 (with 64 causal)")
        parser.add_argument("--rfa-causal-proj-dim", type=int, metavar="D",
                            help="random projections of decoder causal attention; paper: 32 or 64")
        parser.add_argument("--rfa-gate", choices=GATE_VARIANTS,
                            help="sentential gate in causal attention: none (RFA), sgate (decay the "
                                 "previous sentences, paper §3.2) or sgate-avg (weighted average of "
                                 "previous and current sentence)")
        parser.add_argument("--rfa-gate-bias-init", type=float, metavar="B",
                            help="initial gate bias b_f (paper: searched in {1, 2}); default 2 for "
                                 "sgate, 0 for sgate-avg")
        parser.add_argument("--rfa-cross-gate", action="store_true",
                            help="also gate cross attention over the source's sentences (paper A.2: "
                                 "hurt BLEU by about 1 on IWSLT)")
        parser.add_argument("--rfa-feature-map", choices=FEATURE_MAPS,
                            help="random feature map: fourier (sin/cos, Peng et al. 2021) or positive "
                                 "(exp, Choromanski et al. 2021)")
        parser.add_argument("--rfa-learned-tau", action="store_true", default=True,
                            help="learn the feature map's temperature τ per head, in causal and cross "
                                 "attention (the default, as the authors' release trains every model)")
        parser.add_argument("--rfa-fixed-tau", dest="rfa_learned_tau", action="store_false", default=True,
                            help="keep τ = 1 (models trained before learned τ became the default)")
        parser.add_argument("--rfa-tau-init", type=float, metavar="T",
                            help="initial value of the learned τ (default 1, as the release)")
        parser.add_argument("--rfa-attention", metavar="LIST",
                            help="decoder attentions that use RFA, a subset of causal,cross (default both, "
                                 "as the paper); the others keep softmax attention (for ablations)")
        parser.add_argument("--rfa-norm-rescale", action="store_true",
                            help="cross attention: weight each key by exp(½ (|k|·d^-½ / τ)²), which the "
                                 "normalised feature map loses (the release's --norm-rescale)")

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return RFATransformerEncoder(args, src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        return RFATransformerDecoder(args, tgt_dict, embed_tokens,
                                     no_encoder_attn=safe_getattr(args, "no_cross_attention", False))


def _rfa_defaults(args):
    args.rfa_cross_proj_dim = safe_getattr(args, "rfa_cross_proj_dim", 256)
    args.rfa_causal_proj_dim = safe_getattr(args, "rfa_causal_proj_dim", 32)
    args.rfa_gate = safe_getattr(args, "rfa_gate", "none")
    args.rfa_gate_bias_init = safe_getattr(args, "rfa_gate_bias_init", DEFAULT_GATE_BIAS[args.rfa_gate])
    args.rfa_cross_gate = safe_getattr(args, "rfa_cross_gate", False)
    args.rfa_feature_map = safe_getattr(args, "rfa_feature_map", "fourier")
    args.rfa_learned_tau = safe_getattr(args, "rfa_learned_tau", True)
    args.rfa_norm_rescale = safe_getattr(args, "rfa_norm_rescale", False)
    args.rfa_tau_init = safe_getattr(args, "rfa_tau_init", 1.0)
    args.rfa_attention = safe_getattr(args, "rfa_attention", ",".join(RFA_ATTENTIONS))


@register_model_architecture("rfa_doc_transformer", "rfa_doc_transformer")
def rfa_doc_transformer(args):
    """Paper 000 sizes (those of ``doc_transformer``), RFA projections 256 (cross) + 32 (causal)."""
    _rfa_defaults(args)
    doc_transformer(args)


@register_model_architecture("rfa_doc_transformer", "rfa_doc_transformer_tiny")
def rfa_doc_transformer_tiny(args):
    """``doc_transformer_tiny`` sizes (head dim 32) with 64 + 16 random projections."""
    args.rfa_cross_proj_dim = safe_getattr(args, "rfa_cross_proj_dim", 64)
    args.rfa_causal_proj_dim = safe_getattr(args, "rfa_causal_proj_dim", 16)
    _rfa_defaults(args)
    doc_transformer_tiny(args)
