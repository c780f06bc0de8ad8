"""Recurrent memory of a document (Feng et al. 2022, "Learn To Remember", §3).

The model reads a document one sentence at a time. A memory ``M`` of ``d_M`` slots of model
width (default 16, §3.1) carries the document from one sentence to the next:

* Output Attention (eq. 5): the states of sentence t query ``M^t``; the result joins the
  layer with a residual connection and a norm (see :class:`MemorySelfAttention`).
* Update Attention (eq. 2-3): the memory slots query the sentence states (padding masked),
  AddNorm, feed-forward, AddNorm: ``M^{t+1}``.
* Slot positions (eq. 4): sinusoidal encodings over the slots are added to the memory each time
  it is read or updated, so that the slots, which have no order of their own, differ.
* ``M^0`` is a learned parameter, layer-normalised, the same for every document.
* Stop-gradient (§4.2): the update reads ``M^t`` detached, so the loss of sentence t reaches
  sentence t-1's computation (through ``M^t``) but nothing earlier.

The memory is one sentence's worth of state, not a cache of tokens: decoding sentence t costs
what a sentence-level transformer costs, plus attention over ``d_M`` slots.

Shapes: sentence states are fairseq's time-major ``[time, batch, dim]``; a memory is
``[batch, slots, dim]``.
"""

from typing import Dict, Optional

import torch
from fairseq import utils
from fairseq.modules import LayerNorm, MultiheadAttention
from fairseq.modules.fairseq_dropout import FairseqDropout
from fairseq.modules.sinusoidal_positional_embedding import (
    SinusoidalPositionalEmbedding,
)
from torch import Tensor, nn

from .hand_off import HandOff


def slot_positions(slots: int, embed_dim: int) -> Tensor:
    """[slots, dim] sinusoidal encodings of the slot indices (Feng et al. 2022 eq. 4; Vaswani et al.)."""
    return SinusoidalPositionalEmbedding.get_embedding(slots, embed_dim)


# standard deviation of the memory read's output projection at initialisation (the release's)
READ_OUTPUT_INIT_STD = 0.02


class RecurrentMemory(nn.Module):
    """One layer's memory: its initial value, Update Attention and Output Attention.

    Args:
        embed_dim: model width (the memory has the same width)
        num_heads: heads of both memory attentions
        slots: ``d_M``, the number of memory vectors (paper: 16)
        ffn_embed_dim: inner width of the update's feed-forward network (eq. 3)
        dropout: on the residual branches of the update
        attention_dropout: on the attention probabilities of both attentions
    """

    def __init__(self, embed_dim: int, num_heads: int, slots: int = 16, ffn_embed_dim: Optional[int] = None,
                 dropout: float = 0.0, attention_dropout: float = 0.0, activation_dropout: float = 0.0,
                 activation_fn: str = "relu"):
        super().__init__()
        if slots < 1:
            raise ValueError(f"the memory needs at least one slot, got {slots}")
        self.embed_dim = embed_dim
        self.slots = slots
        self.initial_memory = nn.Parameter(torch.empty(slots, embed_dim))
        nn.init.normal_(self.initial_memory, std=1.0)
        self.initial_memory_norm = LayerNorm(embed_dim)
        # not random, not learned: rebuilt from the shape, never stored in checkpoints
        self.register_buffer("slot_positions", slot_positions(slots, embed_dim), persistent=False)
        # the sentence states both attentions use (queries of eq. 5, keys/values of eq. 2)
        self.state_norm = LayerNorm(embed_dim)
        self.update_attention = MultiheadAttention(embed_dim, num_heads, dropout=attention_dropout,
                                                   encoder_decoder_attention=True)
        self.update_attention_norm = LayerNorm(embed_dim)
        self.fc1 = nn.Linear(embed_dim, ffn_embed_dim or 4 * embed_dim)
        self.fc2 = nn.Linear(ffn_embed_dim or 4 * embed_dim, embed_dim)
        self.update_ffn_norm = LayerNorm(embed_dim)
        self.output_attention = MultiheadAttention(embed_dim, num_heads, dropout=attention_dropout,
                                                   encoder_decoder_attention=True)
        # The read is added to a pretrained sentence model's residual stream: it starts small
        # (N(0, 0.02), the BART initialisation of the authors' release) so that fine-tuning starts
        # from the sentence model's behaviour instead of a random perturbation of it.
        nn.init.normal_(self.output_attention.out_proj.weight, mean=0.0, std=READ_OUTPUT_INIT_STD)
        nn.init.zeros_(self.output_attention.out_proj.bias)
        self.activation_fn = utils.get_activation_fn(activation_fn)
        self.dropout_module = FairseqDropout(dropout, module_name=self.__class__.__name__)
        self.activation_dropout_module = FairseqDropout(activation_dropout, module_name=self.__class__.__name__)

    def initial(self, batch_size: int) -> Tensor:
        """``M^0`` for ``batch_size`` documents: [batch, slots, dim]."""
        memory = self.initial_memory_norm(self.initial_memory)
        return memory.unsqueeze(0).expand(batch_size, -1, -1)

    def positioned(self, memory: Tensor) -> Tensor:
        """[batch, slots, dim] -> [slots, batch, dim]: the memory plus slot positions (eq. 4),
        time-major as fairseq's attention takes keys and queries."""
        return (memory + self.slot_positions.to(memory.dtype)).transpose(0, 1)

    def read(self, states: Tensor, memory: Tensor,
             incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None) -> Tensor:
        """Output Attention (eq. 5): ``MHA(h^t, M^t, M^t)``.

        ``states`` [time, batch, dim] (one token per call while decoding incrementally),
        ``memory`` [batch, slots, dim] -> [time, batch, dim]. Every slot is a valid key.
        While decoding incrementally the memory is fixed for the whole sentence, so its projected
        keys and values are computed once and kept in ``incremental_state`` (as fairseq keeps
        those of the encoder output for cross attention; beam search reorders them alike).
        """
        slots = self.positioned(memory)
        read, _ = self.output_attention(query=self.state_norm(states), key=slots, value=slots,
                                        incremental_state=incremental_state,
                                        static_kv=incremental_state is not None, need_weights=False)
        return read

    def update(self, states: Tensor, padding_mask: Optional[Tensor], memory: Tensor) -> Tensor:
        """Update Attention (eq. 2-4): ``M^{t+1}`` from ``M^t`` and the sentence states.

        ``states`` [time, batch, dim] of one complete sentence per row, ``padding_mask``
        [batch, time] (True at padding) or None, ``memory`` [batch, slots, dim]
        -> [batch, slots, dim]. ``M^t`` enters detached: the stop-gradient of §4.2.
        """
        queries = self.positioned(memory.detach())
        keys = self.state_norm(states)
        attended, _ = self.update_attention(query=queries, key=keys, value=keys, key_padding_mask=padding_mask,
                                            need_weights=False)
        memory = self.update_attention_norm(queries + self.dropout_module(attended))  # eq. 2
        hidden = self.activation_dropout_module(self.activation_fn(self.fc1(memory)))
        memory = self.update_ffn_norm(memory + self.dropout_module(self.fc2(hidden)))  # eq. 3
        return memory.transpose(0, 1)


class MemorySelfAttention(HandOff, MultiheadAttention):
    """Self-attention of a memory layer: fairseq's self-attention, plus the memory read from and
    written to by the sentence states it produces (Feng et al. 2022 eq. 1).

    The sentence state is the self-attention sublayer's residual stream ``h = x + SelfAttn(x)``
    (``x`` the attention's query input). The memory's Output Attention reads with
    ``LayerNorm(h)`` as queries; its result is added to the self-attention output, so it enters
    the rest of the layer through the layer's own residual connection and norm::

        post-norm layer:  LN(x + Dropout(SelfAttn(x) + OutputAttention(LN_h(h), M^t)))

    With the Output Attention's output projection at zero this is exactly the stock layer, so a
    sentence-level checkpoint computes the same function before finetuning (§4.2, two-stage
    training) and the tests can compare with the baseline exactly.

    The Update Attention reads the same states of complete sentences: in a full forward pass
    (training, teacher-forced passes, the encoder) the next memory is left in
    :attr:`next_memory`; while decoding incrementally (``incremental_state`` given) the memory
    is only read, never updated, because the sentence is not finished (§4.2 "Inference").

    The model hands in the memory before each forward pass (``hand_in(memory=M)``,
    [batch (x beam), slots, dim], ``modules/hand_off.py``) and collects the next memory with
    :meth:`take_next_memory` (which also drops the references, so no graph outlives the step
    that made it). These layers are never activation-checkpointed (models/doc_transformer.py
    wrap_layer): their next memory is an output besides their return value.
    """

    def __init__(self, embed_dim, num_heads, memory: RecurrentMemory, **kwargs):
        super().__init__(embed_dim, num_heads, **kwargs)
        if not self.self_attention:
            raise ValueError("MemorySelfAttention is a self-attention (self_attention=True)")
        self.memory = memory
        self.next_memory: Optional[Tensor] = None

    def take_next_memory(self) -> Optional[Tensor]:
        """``M^{t+1}`` [batch, slots, dim] from the last full forward pass (None when decoding
        incrementally); clears the module's memory references."""
        next_memory, self.next_memory = self.next_memory, None
        self.hand_in()
        return next_memory

    def forward(self, query, key, value, key_padding_mask=None, incremental_state=None, need_weights=True,
                static_kv=False, attn_mask=None, before_softmax=False, need_head_weights=False):
        attention, weights = super().forward(query, key, value, key_padding_mask=key_padding_mask,
                                             incremental_state=incremental_state, need_weights=need_weights,
                                             static_kv=static_kv, attn_mask=attn_mask,
                                             before_softmax=before_softmax, need_head_weights=need_head_weights)
        if before_softmax:
            return attention, weights
        memory = self.handed("memory", needed_for="its memory read")
        if memory.size(0) != query.size(1):
            raise RuntimeError(f"memory for {memory.size(0)} rows, sentence batch of {query.size(1)}")
        states = query + attention
        if incremental_state is None:
            self.next_memory = self.memory.update(states, key_padding_mask, memory)
        return attention + self.memory.read(states, memory, incremental_state), weights
