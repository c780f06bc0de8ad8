"""The recurrent-memory transformer (Feng et al. 2022, "Learn To Remember"): the sentence-level
transformer with a memory in chosen layers that carries the document from one sentence to the
next.

The baseline with the self-attention of the memory layers swapped for
:class:`~rfa_doc_mt.modules.recurrent_memory.MemorySelfAttention`: by default the top encoder
layer and the top decoder layer (paper Table 3's best), each with its own memory. Every other
parameter has the baseline's name, so a sentence-level ``doc_transformer`` checkpoint loads into
this model (two-stage training, §4.2: ``--finetune-from-model``; the memory parameters the
checkpoint lacks keep their fresh initialisation and are logged).

The model reads one sentence per row. Its memories travel in a plain dict::

    document_memory = {"source": [M, ...], "target": [M, ...]}   # one [batch, slots, dim] per memory layer

``model(src_tokens, src_lengths, prev_output_tokens, document_memory=...)`` reads those (None,
or empty lists: the learned initial memories) and returns, in ``extra["document_memory"]``, the
memories after this sentence (``M^{t+1}``): the source memory from the encoder states, the
target memory from the decoder states of ``prev_output_tokens``. The task carries them from one
batch to the next (``--recurrent-memory``, tasks/memory_steps.py, generation/memory_decoding.py).

In the encoder output, ``target_memory`` holds the decoder's memory for this sentence, so beam
search repeats and reorders it with the encoder output (``reorder_encoder_out``); the decoder
reads it at every step and never updates it while decoding incrementally.

Its parameters are tagged new or pretrained for ``finetune_adam`` (optim/finetune_adam.py), which
gives the pretrained ones a fraction of the learning rate.
"""

import logging
from typing import Dict, List, Optional, Sequence

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

from ..data.windows import collate_sentences
from ..modules.recurrent_memory import MemorySelfAttention, RecurrentMemory
from ..optim.finetune_adam import PRETRAINED_PARAMETERS
from .doc_transformer import (
    DocTransformerModel,
    doc_transformer,
    doc_transformer_tiny,
    wrap_layer,
)

logger = logging.getLogger(__name__)

DocumentMemory = Dict[str, List[Tensor]]
# the parameter groups of two-stage training (fairseq's ``param_group`` attribute convention)
NEW_PARAMETERS = "memory"  # the tag of the parameters the memory adds; the others: PRETRAINED_PARAMETERS


def memory_layer_indices(value: Optional[str], num_layers: int, option: str) -> List[int]:
    """Layer indices from a comma-separated list (negative counts from the top; 'none': no layer)."""
    if value is None or str(value).strip() in ("", "none"):
        return []
    indices = []
    for item in str(value).split(","):
        try:
            index = int(item)
        except ValueError:
            raise ValueError(f"{option} {value!r}: expected comma-separated layer indices, or 'none'") from None
        if not -num_layers <= index < num_layers:
            raise ValueError(f"{option} {value!r}: layer {index} does not exist ({num_layers} layers)")
        indices.append(index % num_layers)
    return sorted(set(indices))


def build_memory(cfg, side) -> RecurrentMemory:
    return RecurrentMemory(side.embed_dim, side.attention_heads, slots=cfg.memory_slots,
                           ffn_embed_dim=side.ffn_embed_dim, dropout=cfg.dropout,
                           attention_dropout=cfg.attention_dropout,
                           activation_dropout=cfg.activation_dropout, activation_fn=cfg.activation_fn)




def memory_attentions(module: torch.nn.Module) -> List[MemorySelfAttention]:
    """The memory layers' self-attentions under ``module``, bottom layer first."""
    return [m for m in module.modules() if isinstance(m, MemorySelfAttention)]


class MemoryEncoderLayer(TransformerEncoderLayerBase):
    """fairseq's encoder layer whose self-attention reads and updates a memory."""

    def build_self_attention(self, embed_dim, cfg):
        return MemorySelfAttention(embed_dim, cfg.encoder.attention_heads, memory=build_memory(cfg, cfg.encoder),
                                   dropout=cfg.attention_dropout, self_attention=True,
                                   q_noise=self.quant_noise, qn_block_size=self.quant_noise_block_size)


class MemoryDecoderLayer(TransformerDecoderLayerBase):
    """fairseq's decoder layer whose (causal) self-attention reads and updates a memory."""

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        if cfg.cross_self_attention:
            raise NotImplementedError("memory_doc_transformer does not support --cross-self-attention")
        return MemorySelfAttention(embed_dim, cfg.decoder.attention_heads, memory=build_memory(cfg, cfg.decoder),
                                   dropout=cfg.attention_dropout, add_bias_kv=add_bias_kv,
                                   add_zero_attn=add_zero_attn, self_attention=True,
                                   q_noise=self.quant_noise, qn_block_size=self.quant_noise_block_size)


class MemoryTransformerEncoder(TransformerEncoderBase):
    """fairseq's encoder with memory layers at ``cfg.encoder_memory_layers``.

    ``forward(..., document_memory)`` reads ``document_memory["source"]`` and returns, beside
    fairseq's fields, ``source_memory`` (the memories after this sentence) and ``target_memory``
    (``document_memory["target"]`` passed on to the decoder), lists of [batch, slots, dim].
    """

    def __init__(self, cfg, dictionary, embed_tokens, return_fc=False):
        self.memory_layers = memory_layer_indices(cfg.encoder_memory_layers, cfg.encoder.layers,
                                                  "--encoder-memory-layers")
        self.layers_built = 0
        super().__init__(cfg, dictionary, embed_tokens, return_fc=return_fc)
        self.memory_attentions = memory_attentions(self)

    def build_encoder_layer(self, cfg):
        index, self.layers_built = self.layers_built, self.layers_built + 1
        if index not in self.memory_layers:
            return super().build_encoder_layer(cfg)
        return wrap_layer(MemoryEncoderLayer(cfg, return_fc=self.return_fc), cfg, checkpoint_allowed=False)

    def forward(self, src_tokens, src_lengths: Optional[Tensor] = None, return_all_hiddens: bool = False,
                token_embeddings: Optional[Tensor] = None, document_memory: Optional[DocumentMemory] = None):
        memories = (document_memory or {}).get("source") or [None] * len(self.memory_attentions)
        if len(memories) != len(self.memory_attentions):
            raise ValueError(f"{len(memories)} source memories for {len(self.memory_attentions)} memory layers")
        for attention, memory in zip(self.memory_attentions, memories):
            attention.hand_in(memory=attention.memory.initial(src_tokens.size(0)) if memory is None else memory)
        try:
            encoder_out = super().forward(src_tokens, src_lengths, return_all_hiddens, token_embeddings)
        finally:
            next_memories = [attention.take_next_memory() for attention in self.memory_attentions]
        encoder_out["source_memory"] = next_memories
        encoder_out["target_memory"] = list((document_memory or {}).get("target") or [])
        return encoder_out

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order):
        reordered = super().reorder_encoder_out(encoder_out, new_order)
        for name in ("source_memory", "target_memory"):
            reordered[name] = [memory.index_select(0, new_order) for memory in encoder_out.get(name, [])]
        return reordered


class MemoryTransformerDecoder(TransformerDecoderBase):
    """fairseq's incremental decoder with memory layers at ``cfg.decoder_memory_layers``.

    Reads ``encoder_out["target_memory"]`` (missing or empty: the initial memories); a full
    forward pass returns the memories after the sentence in ``extra["target_memory"]``.
    Nothing of the memory lives in the incremental state: it is fixed for the whole sentence
    and reordered with the encoder output.
    """

    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        self.memory_layers = memory_layer_indices(cfg.decoder_memory_layers, cfg.decoder.layers,
                                                  "--decoder-memory-layers")
        self.layers_built = 0
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn,
                         output_projection=output_projection)
        self.memory_attentions = memory_attentions(self)

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        index, self.layers_built = self.layers_built, self.layers_built + 1
        if index not in self.memory_layers:
            return super().build_decoder_layer(cfg, no_encoder_attn)
        return wrap_layer(MemoryDecoderLayer(cfg, no_encoder_attn), cfg, checkpoint_allowed=False)

    def extract_features(self, prev_output_tokens, encoder_out: Optional[Dict[str, List[Tensor]]],
                         incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
                         full_context_alignment: bool = False, alignment_layer: Optional[int] = None,
                         alignment_heads: Optional[int] = None):
        memories = (encoder_out or {}).get("target_memory") or [None] * len(self.memory_attentions)
        if len(memories) != len(self.memory_attentions):
            raise ValueError(f"{len(memories)} target memories for {len(self.memory_attentions)} memory layers")
        for attention, memory in zip(self.memory_attentions, memories):
            attention.hand_in(memory=attention.memory.initial(prev_output_tokens.size(0)) if memory is None else memory)
        try:
            x, extra = super().extract_features(prev_output_tokens, encoder_out, incremental_state,
                                                full_context_alignment, alignment_layer, alignment_heads)
        finally:
            next_memories = [attention.take_next_memory() for attention in self.memory_attentions]
        extra["target_memory"] = [] if incremental_state is not None else next_memories
        return x, extra


@register_model("memory_doc_transformer")
class MemoryDocTransformerModel(DocTransformerModel):
    """Sentence-level transformer with a recurrent document memory (Feng et al. 2022)."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        parser.add_argument("--memory-slots", type=int, metavar="N",
                            help="d_M, the number of memory vectors per memory layer (Feng et al. 2022: 16)")
        parser.add_argument("--encoder-memory-layers", type=str, metavar="LIST",
                            help="comma-separated encoder layers with a memory, negative from the top, "
                                 "'none' for no source memory (default: -1, the top layer)")
        parser.add_argument("--decoder-memory-layers", type=str, metavar="LIST",
                            help="comma-separated decoder layers with a memory, negative from the top, "
                                 "'none' for no target memory (default: -1, the top layer)")

    @classmethod
    def build_model(cls, args, task):
        task_cfg = getattr(task, "cfg", None)
        if task_cfg is not None and not safe_getattr(task_cfg, "recurrent_memory", False):
            raise ValueError("memory_doc_transformer reads documents sentence by sentence in order: "
                             "run the doc_translation task with --recurrent-memory")
        memory_layer_indices(args.encoder_memory_layers, args.encoder_layers, "--encoder-memory-layers")
        memory_layer_indices(args.decoder_memory_layers, args.decoder_layers, "--decoder-memory-layers")
        model = super().build_model(args, task)
        model.mark_parameter_groups()
        return model

    @classmethod
    def build_encoder(cls, cfg, src_dict, embed_tokens):
        return MemoryTransformerEncoder(TransformerConfig.from_namespace(cfg), src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, cfg, tgt_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(cfg)
        return MemoryTransformerDecoder(cfg, tgt_dict, embed_tokens, no_encoder_attn=cfg.no_cross_attention)

    def forward(self, src_tokens, src_lengths, prev_output_tokens, document_memory: Optional[DocumentMemory] = None,
                return_all_hiddens: bool = True, features_only: bool = False,
                alignment_layer: Optional[int] = None, alignment_heads: Optional[int] = None):
        """One sentence per row, reading ``document_memory`` (None: the initial memories).
        ``extra["document_memory"]`` holds the memories after the sentence."""
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths, return_all_hiddens=return_all_hiddens,
                                   document_memory=document_memory)
        x, extra = self.decoder(prev_output_tokens, encoder_out=encoder_out, features_only=features_only,
                                alignment_layer=alignment_layer, alignment_heads=alignment_heads,
                                src_lengths=src_lengths, return_all_hiddens=return_all_hiddens)
        extra["document_memory"] = {"source": encoder_out["source_memory"], "target": extra.pop("target_memory")}
        return x, extra

    # ---- memories ---------------------------------------------------------------------------

    def initial_document_memory(self, batch_size: int) -> DocumentMemory:
        """The memories every document starts from: lists of [batch, slots, dim]."""
        return {"source": [a.memory.initial(batch_size) for a in self.encoder.memory_attentions],
                "target": [a.memory.initial(batch_size) for a in self.decoder.memory_attentions]}

    def memory_parameter_prefixes(self) -> List[str]:
        return [f"{name}.memory." for name, module in self.named_modules() if isinstance(module, MemorySelfAttention)]

    def mark_parameter_groups(self) -> None:
        """Tag each parameter with fairseq's ``param_group`` attribute: ``memory`` (new in
        this model) or ``pretrained`` (the baseline's), read by ``finetune_adam``."""
        prefixes = tuple(self.memory_parameter_prefixes())
        for name, parameter in self.named_parameters():
            parameter.param_group = NEW_PARAMETERS if name.startswith(prefixes) else PRETRAINED_PARAMETERS

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        """Also loads a sentence-level checkpoint (no memory parameters at all): the memory
        parameters keep their fresh initialisation and are logged. A checkpoint with some
        memory parameters but not all is an error, as usual with ``strict``."""
        prefixes = tuple(self.memory_parameter_prefixes())
        own = self.state_dict()
        memory_keys = [key for key in own if key.startswith(prefixes)]
        if memory_keys and not any(key.startswith(prefixes) for key in state_dict):
            logger.info(f"sentence-level checkpoint: {len(memory_keys)} new memory tensors "
                        f"({sum(own[k].numel() for k in memory_keys)} values) start from their initialisation, "
                        f"under {', '.join(p.rstrip('.') for p in prefixes)}")
            state_dict = dict(state_dict)
            state_dict.update({key: own[key] for key in memory_keys})
        return super().load_state_dict(state_dict, strict=strict, model_cfg=model_cfg, args=args)

    # ---- consistency scoring ----------------------------------------------------------------

    @torch.no_grad()
    def score_candidates(self, sources: Sequence[Sequence[Tensor]], targets: Sequence[Sequence[Tensor]]) -> List[float]:
        """Mean token NLL (no label smoothing) of the last target sentence of each example.

        ``sources[i]`` / ``targets[i]``: the EOS-terminated sentences of example i (context
        sentences, then the current one; the same number on both sides). The context sentences
        are read one by one, teacher-forced on the given targets, to build the memories the
        current sentence reads. Examples with fewer sentences start later, so that every
        example's current sentence is the last step.
        """
        if len(sources) != len(targets):
            raise ValueError("one target sentence list per source sentence list expected")
        for source, target in zip(sources, targets):
            if len(source) != len(target) or not source:
                raise ValueError("each example needs as many source as target sentences, at least one")
        pad = self.decoder.dictionary.pad()
        eos = self.decoder.dictionary.eos()
        device = next(self.parameters()).device
        steps = max(len(source) for source in sources)
        memory = self.initial_document_memory(len(sources))
        losses = torch.zeros(len(sources), device=device)
        for step in range(steps):
            # example i reads its sentence number step - (steps - len(i)), when that exists
            rows = [i for i, source in enumerate(sources) if step >= steps - len(source)]
            sentence = [step - (steps - len(sources[i])) for i in rows]
            batch = collate_sentences([sources[i][k] for i, k in zip(rows, sentence)],
                                      [targets[i][k] for i, k in zip(rows, sentence)], pad, eos, device)
            selected = torch.tensor(rows, device=device)
            row_memory = {side: [m.index_select(0, selected) for m in memories] for side, memories in memory.items()}
            output = self(**batch["net_input"], document_memory=row_memory, features_only=step < steps - 1)
            for side, memories in output[1]["document_memory"].items():
                for layer, new in enumerate(memories):
                    memory[side][layer] = memory[side][layer].index_copy(0, selected, new)
            if step == steps - 1:
                log_probs = self.get_normalized_probs(output, log_probs=True).float()
                target = batch["target"]
                token_nll = -log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
                scored = target.ne(pad)
                losses = (token_nll * scored).sum(-1) / scored.sum(-1).clamp(min=1)
        return losses.tolist()


# ---- architectures -----------------------------------------------------------------------------


def memory_defaults(args):
    args.memory_slots = safe_getattr(args, "memory_slots", 16)
    args.encoder_memory_layers = safe_getattr(args, "encoder_memory_layers", "-1")
    args.decoder_memory_layers = safe_getattr(args, "decoder_memory_layers", "-1")


@register_model_architecture("memory_doc_transformer", "memory_doc_transformer")
def memory_doc_transformer(args):
    """Feng et al. 2022, §4.2: transformer-base (6+6 layers, width 512, 8 heads, FFN 2048, shared
    embeddings), 16 memory slots in the top encoder and the top decoder layer."""
    memory_defaults(args)
    args.encoder_ffn_embed_dim = safe_getattr(args, "encoder_ffn_embed_dim", 2048)
    args.decoder_ffn_embed_dim = safe_getattr(args, "decoder_ffn_embed_dim", 2048)
    doc_transformer(args)


@register_model_architecture("memory_doc_transformer", "memory_doc_transformer_tiny")
def memory_doc_transformer_tiny(args):
    """A small model for CPU demos and tests (``doc_transformer_tiny`` sizes)."""
    memory_defaults(args)
    doc_transformer_tiny(args)
