"""The concatenation transformer (Wu et al. 2022's baseline): fairseq's transformer over windows.

Every other model family of the project subclasses :class:`DocTransformerModel` and swaps
in its own attention or layer; the windows, separators and decoding live in the task.
"""

from fairseq.distributed import fsdp_wrap
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerModel
from fairseq.models.transformer.transformer_legacy import base_architecture
from fairseq.modules.checkpoint_activations import checkpoint_wrapper


def wrap_layer(layer, cfg, checkpoint_allowed: bool = True):
    """Activation checkpointing and FSDP wrapping, as fairseq's own build_*_layer do.
    ``checkpoint_allowed=False``: a layer with an output besides its return value (the memory
    layers' next memory), which a checkpointed forward (run without autograd) would cut off."""
    checkpoint = cfg.checkpoint_activations and checkpoint_allowed
    if checkpoint:
        layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
    return fsdp_wrap(layer, min_num_params=cfg.min_params_to_wrap if not checkpoint else 0)


@register_model("doc_transformer")
class DocTransformerModel(TransformerModel):
    """Softmax attention over L-sentence windows joined by a separator token."""

    @classmethod
    def build_model(cls, args, task):
        # Families that need sentence positions read the separators from the config: plain
        # attributes of args travel into fairseq's TransformerConfig (from_namespace copies them).
        args.source_separator_index = getattr(task, "source_separator", None)
        args.target_separator_index = getattr(task, "target_separator", None)
        return super().build_model(args, task)


@register_model_architecture("doc_transformer", "doc_transformer")
def doc_transformer(args):
    """Wu et al. 2022's setting: 6+6 layers, width 512, 8 heads, FFN 1024, tied decoder embeddings."""
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
