"""The concatenation transformer with locality-sensitive hashing attention (Petrick et al. 2022,
Petrick et al. 2022): the baseline, with LSH swapped in for any of encoder self-attention,
decoder self-attention and encoder-decoder (cross) attention.

Petrick et al. 2022's systems (§5.2, Table 2): LSH in the encoder and decoder self-attention with one hash
round, or in all three attentions with four rounds; chunks of 10; as many hash classes as
concatenated sentences (k + 1), rounded up to an even number. See configs/lsh/.
"""

from fairseq import utils
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

from ..modules.lsh_attention import LSHCrossAttention, LSHSelfAttention, check_hash_classes, paper_hash_classes
from .doc_transformer import (
    DocTransformerModel,
    doc_transformer,
    doc_transformer_tiny,
    wrap_layer,
)

LSH_ATTENTIONS = ("encoder-self", "decoder-self", "cross")

# every LSH module gets its own rotations: seed = --lsh-seed + offset + layer index
_SEED_OFFSETS = {"encoder-self": 0, "decoder-self": 1000, "cross": 2000}


def lsh_attentions(cfg) -> set:
    """The attentions that use LSH, from ``--lsh-attention`` ('none' or a comma list)."""
    value = utils.safe_getattr(cfg, "lsh_attention", "none") or "none"
    chosen = {name.strip() for name in value.split(",") if name.strip()} - {"none"}
    unknown = chosen - set(LSH_ATTENTIONS)
    if unknown:
        raise ValueError(f"--lsh-attention: unknown attention(s) {sorted(unknown)}; "
                         f"choose from {', '.join(LSH_ATTENTIONS)} or 'none'")
    return chosen


def _lsh_options(cfg, dropout: float) -> dict:
    return dict(chunk_size=cfg.lsh_chunk_size, hash_classes=cfg.lsh_hash_classes, rounds=cfg.lsh_rounds,
                dropout=dropout)




class LSHEncoderLayer(TransformerEncoderLayerBase):
    def build_self_attention(self, embed_dim, cfg):
        if "encoder-self" not in lsh_attentions(cfg):
            return super().build_self_attention(embed_dim, cfg)
        return LSHSelfAttention(embed_dim, cfg.encoder.attention_heads, causal=False,
                                **_lsh_options(cfg, cfg.attention_dropout))


class LSHDecoderLayer(TransformerDecoderLayerBase):
    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        if "decoder-self" not in lsh_attentions(cfg):
            return super().build_self_attention(embed_dim, cfg, add_bias_kv, add_zero_attn)
        if add_bias_kv or add_zero_attn or cfg.cross_self_attention:
            raise ValueError("LSH decoder self-attention supports neither bias_kv/zero_attn nor --cross-self-attention")
        return LSHSelfAttention(embed_dim, cfg.decoder.attention_heads, causal=True,
                                **_lsh_options(cfg, cfg.attention_dropout))

    def build_encoder_attention(self, embed_dim, cfg):
        if "cross" not in lsh_attentions(cfg):
            return super().build_encoder_attention(embed_dim, cfg)
        return LSHCrossAttention(embed_dim, cfg.decoder.attention_heads, kdim=cfg.encoder.embed_dim,
                                 vdim=cfg.encoder.embed_dim, **_lsh_options(cfg, cfg.attention_dropout))


def _seed_layers(layers, cfg, attribute: str, kind: str) -> None:
    """Give the LSH module ``attribute`` of every layer its own rotations."""
    for index, layer in enumerate(layers):
        module = getattr(layer, attribute, None)
        if hasattr(module, "seed_rotations"):
            module.seed_rotations(cfg.lsh_seed + _SEED_OFFSETS[kind] + index)


class LSHTransformerEncoder(TransformerEncoderBase):
    def __init__(self, args, dictionary, embed_tokens):
        cfg = TransformerConfig.from_namespace(args)
        super().__init__(cfg, dictionary, embed_tokens)
        _seed_layers(self.layers, cfg, "self_attn", "encoder-self")

    def build_encoder_layer(self, cfg):
        return wrap_layer(LSHEncoderLayer(cfg, return_fc=self.return_fc), cfg)


class LSHTransformerDecoder(TransformerDecoderBase):
    def __init__(self, args, dictionary, embed_tokens, no_encoder_attn=False):
        cfg = TransformerConfig.from_namespace(args)
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn)
        _seed_layers(self.layers, cfg, "self_attn", "decoder-self")
        _seed_layers(self.layers, cfg, "encoder_attn", "cross")

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        return wrap_layer(LSHDecoderLayer(cfg, no_encoder_attn), cfg)


@register_model("lsh_doc_transformer")
class LSHDocTransformerModel(DocTransformerModel):
    """The concatenation transformer with LSH attention where ``--lsh-attention`` says."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        parser.add_argument("--lsh-attention", type=str, metavar="LIST",
                            help="which attentions use LSH: 'none' or a comma-separated subset of "
                                 f"{', '.join(LSH_ATTENTIONS)} (Petrick et al. 2022: 'encoder-self,decoder-self' "
                                 "or all three)")
        parser.add_argument("--lsh-chunk-size", type=int, metavar="N",
                            help="length of the chunks the hash-sorted sequence is cut into; a query sees "
                                 "its chunk and its neighbours (Petrick et al. 2022: 10)")
        parser.add_argument("--lsh-hash-classes", type=int, metavar="N",
                            help="number of hash classes (buckets) of one hash function, even; default: "
                                 "Petrick et al. 2022's rule, the number of concatenated sentences "
                                 "(--context-size + 1) rounded up to even")
        parser.add_argument("--lsh-rounds", type=int, metavar="N",
                            help="number of independent hash functions; a query sees keys sharing its class "
                                 "in any round (Petrick et al. 2022: 1 for LSH self-attention only, 4 for all three)")
        parser.add_argument("--lsh-seed", type=int, metavar="N",
                            help="seed of the random rotations (layer i of each attention adds its own offset)")

    @classmethod
    def build_model(cls, args, task):
        lsh_attentions(args)  # fail early on a misspelled --lsh-attention
        if args.lsh_hash_classes is None:
            context_size = utils.safe_getattr(getattr(task, "cfg", args), "context_size", 0)
            args.lsh_hash_classes = paper_hash_classes(context_size)
        try:
            check_hash_classes(args.lsh_hash_classes)
        except ValueError as error:
            raise ValueError(f"--lsh-hash-classes: {error}") from None
        return super().build_model(args, task)

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return LSHTransformerEncoder(args, src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        return LSHTransformerDecoder(args, tgt_dict, embed_tokens,
                                     no_encoder_attn=utils.safe_getattr(args, "no_cross_attention", False))


def _lsh_defaults(args):
    args.lsh_attention = utils.safe_getattr(args, "lsh_attention", "encoder-self,decoder-self")
    args.lsh_chunk_size = utils.safe_getattr(args, "lsh_chunk_size", 10)
    args.lsh_hash_classes = utils.safe_getattr(args, "lsh_hash_classes", None)  # None: paper_hash_classes
    args.lsh_rounds = utils.safe_getattr(args, "lsh_rounds", 1)
    args.lsh_seed = utils.safe_getattr(args, "lsh_seed", 1)


@register_model_architecture("lsh_doc_transformer", "lsh_doc_transformer")
def lsh_doc_transformer(args):
    """Paper sizes (as ``doc_transformer``) with Petrick et al. 2022's LSH self-attention setting."""
    _lsh_defaults(args)
    doc_transformer(args)


@register_model_architecture("lsh_doc_transformer", "lsh_doc_transformer_tiny")
def lsh_doc_transformer_tiny(args):
    """``doc_transformer_tiny`` sizes, for CPU demos and tests."""
    _lsh_defaults(args)
    doc_transformer_tiny(args)
