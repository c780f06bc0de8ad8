"""RFA document transformer (Wu et al. 2022): the baseline with random feature attention in the
decoder's causal and cross attention, optionally with the sentential gate (§3.2) or the gates of
RFA's successors, at every token.

The encoder keeps softmax self-attention (the paper uses RFA where decoding speed is
decided: decoder causal and cross attention). Variants of Table 1, and the two successors::

    RFA            --rfa-gate none
    RFA-sgate      --rfa-gate sgate      --rfa-gate-bias-init {1,2}
    RFA-sgate-avg  --rfa-gate sgate-avg
    RFA-token      --rfa-gate token      (Peng et al. 2021 §3.3: a gate per head at every token)
    RFA-feature    --rfa-gate feature    --rfa-gate-rank 16 --rfa-gate-temperature 16
                                         (GLA, Yang et al. 2024: a decay per feature at every token)

and the causal state's update, ``--rfa-update add`` (RFA) or ``delta`` (the delta rule, Schlag et al.
2021, Yang et al. 2024 (delta rule); gated by ``--rfa-gate sgate`` or ``token`` as Gated Delta Networks, Yang
et al. 2025); and, beside any of them, softmax heads over the current sentence (``--rfa-causal-local-heads N``,
``--rfa-cross-local-heads N``: Arora et al. 2024; Zhang et al. 2020), the other heads RFA over the
window (``modules/random_feature_attention/local.py``).

fairseq's decoder layer loop passes no token ids to the attention modules, so the decoder
computes the sentence starts of each forward (from ``prev_output_tokens``, and from the
source tokens for the optional cross gate; the source's sentence ids for cross local heads, until
decoding has cached the source) and hands them to its RFA modules before each forward
(``modules/hand_off.py``), valid until the next one.
"""

import argparse
from dataclasses import dataclass, fields
from typing import Optional

from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerDecoder, TransformerEncoder
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase
from fairseq.utils import safe_getattr
from torch import nn

from ..modules.random_feature_attention import (
    DELTA_GATES,
    FEATURE_GATE_RANK,
    FEATURE_GATE_TEMPERATURE,
    FEATURE_MAPS,
    GATE_VARIANTS,
    SENTENCE_GATES,
    STATE_UPDATES,
    RandomFeatureCausalAttention,
    RandomFeatureCrossAttention,
    module_seed,
)
from ..modules.sentences import sentence_ids, sentence_starts
from .doc_transformer import (
    DocTransformerModel,
    doc_transformer,
    doc_transformer_tiny,
    wrap_layer,
)

# the token gate's 0 is RFA's (Wu et al. 2022, A.2: "instead of setting it to zero as in RFA"), the
# feature gate's GLA's (α = σ(0)^{1/16} ≈ 0.96)
DEFAULT_GATE_BIAS = {"sgate": 2.0, "sgate-avg": 0.0, "none": 0.0, "token": 0.0, "feature": 0.0}
# the decoder attentions RFA can replace (the paper replaces both)
RFA_ATTENTIONS = ("causal", "cross")


@dataclass(frozen=True)
class RFAOptions:
    """The model's RFA settings and the one place of their defaults: option ``--rfa-x-y`` is field
    ``x_y`` (see ``add_args`` for their meaning); the architectures fill a missing option from
    here (:func:`_rfa_defaults`), the tiny one with its own projection sizes."""

    cross_proj_dim: int = 256
    causal_proj_dim: int = 32
    gate: str = "none"
    gate_bias_init: Optional[float] = None  # None: DEFAULT_GATE_BIAS of the gate
    gate_rank: int = FEATURE_GATE_RANK
    gate_temperature: float = FEATURE_GATE_TEMPERATURE
    cross_gate: bool = False
    feature_map: str = "fourier"
    learned_tau: bool = True  # as the authors' release trains every model
    norm_rescale: bool = False
    tau_init: float = 1.0
    init_scale: float = 0.0  # 0: fairseq's initialisation; S > 0: the release's --init-scale S
    attention: str = ",".join(RFA_ATTENTIONS)
    update: str = "add"
    causal_local_heads: int = 0
    cross_local_heads: int = 0
    seed: int = 1  # not an RFA option: the run's --seed, from which every module's matrices are drawn

    @classmethod
    def from_args(cls, args) -> "RFAOptions":
        values = {f.name: safe_getattr(args, f"rfa_{f.name}", f.default) for f in fields(cls) if f.name != "seed"}
        if values["init_scale"] < 0:
            raise ValueError(f"--rfa-init-scale {values['init_scale']}: expected 0 (fairseq's initialisation) or a "
                             "positive scale")
        if values["gate_bias_init"] is None:
            values["gate_bias_init"] = DEFAULT_GATE_BIAS[values["gate"]]
        attentions = parse_rfa_attentions(values["attention"])  # fail early on a misspelled --rfa-attention
        for attention in RFA_ATTENTIONS:
            local_heads = values[f"{attention}_local_heads"]
            if local_heads < 0 or (local_heads and attention not in attentions):
                raise ValueError(f"--rfa-{attention}-local-heads {local_heads}: expected 0, or a number of heads "
                                 f"when {attention} attention is RFA (--rfa-attention {values['attention']})")
        check_rfa_update(values["update"], values["gate"], values["attention"])
        return cls(**values, seed=int(safe_getattr(args, "seed", cls.seed)))

    @property
    def attentions(self) -> tuple:
        """The decoder attentions that use RFA."""
        return parse_rfa_attentions(self.attention)

    def local_heads(self, attention: str, num_heads: int) -> int:
        """``--rfa-{attention}-local-heads``, checked against the layer's ``num_heads``."""
        local_heads = getattr(self, f"{attention}_local_heads")
        if local_heads >= num_heads:
            raise ValueError(f"--rfa-{attention}-local-heads {local_heads}: at most {num_heads - 1} of the decoder's "
                             f"{num_heads} heads (at least one stays RFA)")
        return local_heads


def check_rfa_update(update: str, gate: str, attention: str) -> None:
    """Fail early on an ``--rfa-update`` the model cannot build: the delta rule updates causal
    attention's state and takes a gate per head."""
    if update not in STATE_UPDATES:
        raise ValueError(f"--rfa-update {update!r}: expected one of {STATE_UPDATES}")
    if update == "delta" and "causal" not in parse_rfa_attentions(attention):
        raise ValueError(f"--rfa-update delta updates RFA's causal attention, which --rfa-attention {attention!r} "
                         "leaves softmax")
    if update == "delta" and gate not in DELTA_GATES:
        raise ValueError(f"--rfa-update delta takes --rfa-gate {'/'.join(DELTA_GATES)}, a gate per head, not {gate!r}")


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
        return _initialised(RandomFeatureCausalAttention(
            embed_dim, cfg.decoder.attention_heads, o.causal_proj_dim,
            seed=module_seed(o.seed, self.layer_index, "causal"), feature_map=o.feature_map,
            learned_tau=o.learned_tau, gate=o.gate, gate_bias_init=o.gate_bias_init, gate_rank=o.gate_rank,
            gate_temperature=o.gate_temperature, update=o.update,
            local_heads=o.local_heads("causal", cfg.decoder.attention_heads)), o)

    def build_encoder_attention(self, embed_dim, cfg):
        o = self.options
        if "cross" not in o.attentions:  # softmax, for ablations
            return super().build_encoder_attention(embed_dim, cfg)
        return _initialised(RandomFeatureCrossAttention(
            embed_dim, cfg.decoder.attention_heads, o.cross_proj_dim,
            seed=module_seed(o.seed, self.layer_index, "cross"), kdim=cfg.encoder.embed_dim,
            feature_map=o.feature_map, learned_tau=o.learned_tau, gate=o.gate,
            gate_bias_init=o.gate_bias_init, cross_gate=o.cross_gate, norm_rescale=o.norm_rescale,
            local_heads=o.local_heads("cross", cfg.decoder.attention_heads)), o)


def _initialised(module, options: RFAOptions):
    """The module with τ set to ``--rfa-tau-init`` and, with ``--rfa-init-scale``, its
    projections initialised as the release does (:func:`release_init`)."""
    if module.tau is not None:
        nn.init.constant_(module.tau, options.tau_init)
    if options.init_scale:
        release_init(module, options.init_scale)
    return module


def release_init(module, scale: float) -> None:
    """Initialise an RFA module's projections as the authors' release does with ``--init-scale
    scale`` (``models/causal_attention.py``, ``models/cross_attention.py``): in causal attention
    q, k, v, the output and the gate Xavier-uniform with gain scale^-½, each of q, k, v as its own
    square matrix; in cross attention k and v the same, q and the output normal with standard
    deviation 0.02·scale^-½ (at scale 6: 0.0082, an output near zero at the start). Biases stay
    zero (the release leaves q, k and v's at PyTorch's default), the gate's bias keeps its
    ``--rfa-gate-bias-init``; what the release lacks (the cross gate, the delta rule's β, the
    feature gate) keeps ours."""
    gain = scale ** -0.5
    if isinstance(module, RandomFeatureCausalAttention):
        for part in module.in_proj.weight.data.chunk(3, dim=0):  # q, k, v
            nn.init.xavier_uniform_(part, gain=gain)
        nn.init.xavier_uniform_(module.out_proj.weight, gain=gain)
        if module.gate_proj is not None:
            nn.init.xavier_uniform_(module.gate_proj.weight, gain=gain)
    else:
        for part in module.kv_proj.weight.data.chunk(2, dim=0):  # k, v
            nn.init.xavier_uniform_(part, gain=gain)
        nn.init.normal_(module.q_proj.weight, std=0.02 * gain)
        nn.init.normal_(module.out_proj.weight, std=0.02 * gain)


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
        the gates and the local heads, the source's sentence ids for cross local heads, and a new
        random-matrix draw held for the whole pass."""
        o = self.options
        local_causal = o.causal_local_heads > 0 and "causal" in o.attentions
        local_cross = o.cross_local_heads > 0 and "cross" in o.attentions
        # the token and feature gates read no boundaries; cross local heads read their own starts
        # (cross_starts, below): the causal attention's are not made for them (a decoding step is
        # launch-bound on a GPU)
        needs_target = o.gate in SENTENCE_GATES or local_causal
        needs_source = o.cross_gate
        target_starts = source_starts = source_ids = None
        if (needs_target or local_cross) and self.target_separator is None:
            raise RuntimeError("the sentential gate and the local heads need the target separator: build the "
                               "model with the doc_translation task")
        if needs_target:
            if incremental_state is not None:
                # the current token starts a sentence when the token before it is a separator
                target_starts = sentence_starts(prev_output_tokens[:, -2:], self.target_separator)[:, -1:]
            else:
                target_starts = sentence_starts(prev_output_tokens, self.target_separator)
        if needs_source and encoder_out is not None and encoder_out.get("src_tokens"):
            if self.source_separator is None:
                raise RuntimeError("the cross gate needs the source separator: use the doc_translation task")
            source_starts = sentence_starts(encoder_out["src_tokens"][0], self.source_separator)
        # cross local heads align the sentence of the token a query *predicts* with its source sentence:
        # the query whose input is a separator predicts the next sentence's first token, so the
        # sentence starts there (decoder inputs are the targets shifted by one)
        cross_starts = None
        if local_cross:
            last = prev_output_tokens[:, -1:] if incremental_state is not None else prev_output_tokens
            cross_starts = last.eq(self.target_separator)
        if local_cross and encoder_out is not None and encoder_out.get("src_tokens") and \
                not self._source_cached(incremental_state):
            if self.source_separator is None:
                raise RuntimeError("cross local heads need the source separator: use the doc_translation task")
            source_ids = sentence_ids(encoder_out["src_tokens"][0], self.source_separator)
        for module, side in self._rfa_modules():
            if side == "target":
                module.hand_in(sentence_starts=target_starts)
            else:
                module.hand_in(sentence_starts=source_starts, target_sentence_starts=cross_starts,
                               source_sentence_ids=source_ids)
            module.random_matrices.begin_forward()

    def _source_cached(self, incremental_state) -> bool:
        """Whether decoding has cached the source in its cross attention (whose sentence ids then
        need not be derived again: a step's work stays flat in the source's length)."""
        if incremental_state is None:
            return False
        return any(module.has_source(incremental_state) for module, side in self._rfa_modules() if side == "source")

    def extract_features(self, prev_output_tokens, encoder_out=None, incremental_state=None,
                         full_context_alignment: bool = False, alignment_layer: Optional[int] = None,
                         alignment_heads: Optional[int] = None):
        # valid until the next forward: activation checkpointing recomputes the layers in the backward pass
        self._begin_forward(prev_output_tokens, encoder_out, incremental_state)
        return super().extract_features(prev_output_tokens, encoder_out, incremental_state,
                                        full_context_alignment, alignment_layer, alignment_heads)


@register_model("rfa_doc_transformer")
class RFADocTransformerModel(DocTransformerModel):
    """The concatenation transformer with RFA in decoder causal and cross attention (Wu et al. 2022)."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        parser.add_argument("--rfa-cross-proj-dim", type=int, metavar="D",
                            help="random projections of cross attention (φ has 2D features with the "
                                 "Fourier map); paper: 256 (with 32 causal) or 128 (with 64 causal)")
        parser.add_argument("--rfa-causal-proj-dim", type=int, metavar="D",
                            help="random projections of decoder causal attention; paper: 32 or 64")
        parser.add_argument("--rfa-gate", choices=GATE_VARIANTS,
                            help="gate of causal attention: none (RFA), sgate (decay the previous "
                                 "sentences at each sentence start, paper §3.2), sgate-avg (weighted "
                                 "average of previous and current sentence), token (a gate per head at "
                                 "every token, Peng et al. 2021 §3.3) or feature (a decay per feature of "
                                 "the state at every token, GLA's low-rank gate, Yang et al. 2024)")
        parser.add_argument("--rfa-gate-bias-init", type=float, metavar="B",
                            help="initial gate bias b_f (paper: searched in {1, 2}); default 2 for "
                                 "sgate, 0 for sgate-avg, token and feature")
        parser.add_argument("--rfa-gate-rank", type=int, metavar="R",
                            help=f"feature gate: rank of its projection x W_1 W_2 (default "
                                 f"{FEATURE_GATE_RANK}, as GLA)")
        parser.add_argument("--rfa-gate-temperature", type=float, metavar="T",
                            help=f"feature gate: temperature τ of α = σ(x W_1 W_2 + b)^(1/τ) (default "
                                 f"{FEATURE_GATE_TEMPERATURE:g}, as GLA; larger keeps α nearer 1)")
        parser.add_argument("--rfa-cross-gate", action="store_true",
                            help="also gate cross attention over the source's sentences (paper A.2: "
                                 "hurt BLEU by about 1 on IWSLT)")
        parser.add_argument("--rfa-feature-map", choices=FEATURE_MAPS,
                            help="random feature map: fourier (sin/cos, Peng et al. 2021) or positive "
                                 "(exp, Choromanski et al. 2021)")
        # SUPPRESS: when neither flag is given the architecture's default applies
        parser.add_argument("--rfa-learned-tau", action="store_true", default=argparse.SUPPRESS,
                            help="learn the feature map's temperature τ per head, in causal and cross "
                                 "attention (the default, as the authors' release trains every model)")
        parser.add_argument("--rfa-fixed-tau", dest="rfa_learned_tau", action="store_false", default=argparse.SUPPRESS,
                            help="keep τ = 1 (models trained before learned τ became the default)")
        parser.add_argument("--rfa-tau-init", type=float, metavar="T",
                            help="initial value of the learned τ (default 1, as the release)")
        parser.add_argument("--rfa-attention", metavar="LIST",
                            help="decoder attentions that use RFA, a subset of causal,cross (default both, "
                                 "as the paper); the others keep softmax attention (for ablations)")
        parser.add_argument("--rfa-update", choices=STATE_UPDATES,
                            help="how causal attention updates its state: add (RFA: S_t = f_t S_{t-1} + "
                                 "phi(k_t) [v_t, 1]^T, read normalised; the default) or delta (the delta rule, "
                                 "Schlag et al. 2021, Yang et al. 2024 (delta rule): S_t = a_t (I - b_t k_t "
                                 "k_t^T) S_{t-1} + b_t k_t v_t^T with unit-norm features k_t and a write strength "
                                 "b_t = sigmoid(w.x_t + c) per head, read as S_t^T q_t without a normaliser; the "
                                 "gate a_t of --rfa-gate none, sgate or token, as Gated Delta Networks, Yang et "
                                 "al. 2025)")
        parser.add_argument("--rfa-causal-local-heads", type=int, metavar="N",
                            help="decoder causal attention: N of its heads are causal softmax attention over "
                                 "the current target sentence so far, the others RFA over the window "
                                 "(Arora et al. 2024, Zhang et al. 2020; default 0)")
        parser.add_argument("--rfa-cross-local-heads", type=int, metavar="N",
                            help="cross attention: N of its heads are softmax attention over the source "
                                 "sentence of the same index as the current target sentence (the last "
                                 "one when the target has more), the others RFA over the whole source "
                                 "(Arora et al. 2024, Zhang et al. 2020; default 0)")
        parser.add_argument("--rfa-init-scale", type=float, metavar="S",
                            help="initialise RFA's projections as the release's --init-scale S (it trains with "
                                 "6): Xavier gain S^-½, cross attention's query and output normal with standard "
                                 "deviation 0.02·S^-½; default 0, fairseq's initialisation")
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
    """Every RFA option the arguments lack, from :class:`RFAOptions`."""
    for field in fields(RFAOptions):
        if field.name != "seed":
            setattr(args, f"rfa_{field.name}", safe_getattr(args, f"rfa_{field.name}", field.default))
    if args.rfa_gate_bias_init is None:
        args.rfa_gate_bias_init = DEFAULT_GATE_BIAS[args.rfa_gate]


@register_model_architecture("rfa_doc_transformer", "rfa_doc_transformer")
def rfa_doc_transformer(args):
    """Wu et al. 2022 sizes (those of ``doc_transformer``), RFA projections 256 (cross) + 32 (causal)."""
    _rfa_defaults(args)
    doc_transformer(args)


@register_model_architecture("rfa_doc_transformer", "rfa_doc_transformer_tiny")
def rfa_doc_transformer_tiny(args):
    """``doc_transformer_tiny`` sizes (head dim 32) with 64 + 16 random projections."""
    args.rfa_cross_proj_dim = safe_getattr(args, "rfa_cross_proj_dim", 64)
    args.rfa_causal_proj_dim = safe_getattr(args, "rfa_causal_proj_dim", 16)
    _rfa_defaults(args)
    doc_transformer_tiny(args)
