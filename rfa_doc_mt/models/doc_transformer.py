"""The concatenation transformer (paper 000's baseline): fairseq's transformer over windows.

Every other model family of the project subclasses :class:`DocTransformerModel` and swaps
in its own attention or layer; the windows, separators and decoding live in the task.
"""

from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerModel
from fairseq.models.transformer.transformer_legacy import base_architecture


@register_model("doc_transformer")
class DocTransformerModel(TransformerModel):
    """Softmax attention over L-sentence windows joined by a separator token."""


@register_model_architecture("doc_transformer", "doc_transformer")
def doc_transformer(args):
    """Paper 000's setting: 6+6 layers, width 512, 8 heads, FFN 1024, tied decoder embeddings."""
    args.encoder_embed_dim = getattr(args, "encoder_embed_dim", 512)
    args.encoder_ffn_embed_dim = getattr(args, "encoder_ffn_embed_dim", 1024)
    args.encoder_attention_heads = getattr(args, "encoder_attention_heads", 8)
    args.encoder_layers = getattr(args, "encoder_layers", 6)
    args.decoder_embed_dim = getattr(args, "decoder_embed_dim", 512)
    args.decoder_ffn_embed_dim = getattr(args, "decoder_ffn_embed_dim", 1024)
    args.decoder_attention_heads = getattr(args, "decoder_attention_heads", 8)
    args.decoder_layers = getattr(args, "decoder_layers", 6)
    args.share_decoder_input_output_embed = getattr(args, "share_decoder_input_output_embed", True)
    args.dropout = getattr(args, "dropout", 0.3)
    base_architecture(args)


@register_model_architecture("doc_transformer", "doc_transformer_tiny")
def doc_transformer_tiny(args):
    """A small model for CPU demos and tests."""
    args.encoder_embed_dim = getattr(args, "encoder_embed_dim", 128)
    args.encoder_ffn_embed_dim = getattr(args, "encoder_ffn_embed_dim", 256)
    args.encoder_attention_heads = getattr(args, "encoder_attention_heads", 4)
    args.encoder_layers = getattr(args, "encoder_layers", 2)
    args.decoder_embed_dim = getattr(args, "decoder_embed_dim", 128)
    args.decoder_ffn_embed_dim = getattr(args, "decoder_ffn_embed_dim", 256)
    args.decoder_attention_heads = getattr(args, "decoder_attention_heads", 4)
    args.decoder_layers = getattr(args, "decoder_layers", 2)
    args.dropout = getattr(args, "dropout", 0.1)
    doc_transformer(args)
