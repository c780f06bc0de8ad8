"""The LSH attention modules: fairseq's ``MultiheadAttention`` call signature, the training
forms in ``forward`` and the incremental forms with an ``incremental_state``."""

import math
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq.incremental_decoding_utils import with_incremental_state
from torch import Tensor, nn

from .hashing import fp32_math, hash_vectors, random_ranks, random_rotations
from .reference import masked_softmax_or
from .training import lsh_cross_attention, lsh_self_attention


class _LSHAttention(nn.Module):
    """Projections, rotations and incremental-state plumbing shared by both LSH modules."""

    def __init__(self, embed_dim: int, num_heads: int, *, chunk_size: int, hash_classes: int, rounds: int,
                 dropout: float = 0.0, seed: int = 0, bias: bool = True):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        if chunk_size < 1:
            raise ValueError(f"the LSH chunk size must be >= 1, got {chunk_size}")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.chunk_size, self.hash_classes, self.rounds = chunk_size, hash_classes, rounds
        self.dropout = dropout
        self.seed = seed
        self.num_updates = 0
        # persistent: a checkpoint carries the exact rotations it was trained with
        self.register_buffer("rotations", random_rotations(num_heads, rounds, self.head_dim, hash_classes, seed))
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def _init_projection(self, projection: nn.Linear, gain: float):
        # fairseq's MultiheadAttention initialisation (xavier, 1/sqrt(2) for the input projections)
        nn.init.xavier_uniform_(projection.weight, gain=gain)
        if projection.bias is not None:
            nn.init.constant_(projection.bias, 0.0)

    def seed_rotations(self, seed: int) -> None:
        """Redraw the rotations from ``seed`` (the model gives every layer its own seed)."""
        self.seed = seed
        with torch.no_grad():
            self.rotations.copy_(random_rotations(self.num_heads, self.rounds, self.head_dim, self.hash_classes, seed))

    def set_num_updates(self, num_updates: int) -> None:
        """Called by fairseq every update: training-time randomness is a function of (seed, update)."""
        self.num_updates = num_updates

    def _split_heads(self, x: Tensor) -> Tensor:
        """[time, batch, embed] -> [batch, heads, time, head_dim]."""
        time, batch, _ = x.shape
        return x.view(time, batch, self.num_heads, self.head_dim).permute(1, 2, 0, 3)

    def _merge_heads(self, x: Tensor) -> Tensor:
        """[batch, heads, time, head_dim] -> [time, batch, embed]."""
        batch, _, time, _ = x.shape
        return x.permute(2, 0, 1, 3).reshape(time, batch, self.embed_dim)

    def _get_input_buffer(self, incremental_state) -> Dict[str, Optional[Tensor]]:
        result = self.get_incremental_state(incremental_state, "attn_state")
        return result if result is not None else {}

    def _set_input_buffer(self, incremental_state, buffer: Dict[str, Optional[Tensor]]):
        return self.set_incremental_state(incremental_state, "attn_state", buffer)

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        """Beam search: every buffered tensor has batch * beam first; select the surviving rows."""
        buffer = self._get_input_buffer(incremental_state)
        if buffer:
            for name, value in buffer.items():
                if value is not None:
                    buffer[name] = value.index_select(0, new_order)
            incremental_state = self._set_input_buffer(incremental_state, buffer)
        return incremental_state

    def extra_repr(self) -> str:
        return (f"embed_dim={self.embed_dim}, heads={self.num_heads}, chunk_size={self.chunk_size}, "
                f"hash_classes={self.hash_classes}, rounds={self.rounds}, seed={self.seed}")


@with_incremental_state
class LSHSelfAttention(_LSHAttention):
    """LSH self-attention with shared query/key projection (Petrick et al. 2022, §3; Kitaev et al. 2020).

    Called like fairseq's ``MultiheadAttention`` with ``query`` = ``key`` = ``value``
    ([time, batch, embed]). ``causal=True`` for decoder self-attention: causality is built in,
    so the decoder's future mask (``attn_mask``) is not needed and ignored. With an
    ``incremental_state`` every new position attends to all earlier positions of its own class
    in any round (see the module docstring for why this is what decoding can compute).
    """

    def __init__(self, embed_dim: int, num_heads: int, *, causal: bool, chunk_size: int, hash_classes: int,
                 rounds: int, dropout: float = 0.0, seed: int = 0, bias: bool = True):
        super().__init__(embed_dim, num_heads, chunk_size=chunk_size, hash_classes=hash_classes, rounds=rounds,
                         dropout=dropout, seed=seed, bias=bias)
        self.causal = causal
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)  # shared query/key projection
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self._init_projection(self.q_proj, 1 / math.sqrt(2))
        self._init_projection(self.v_proj, 1 / math.sqrt(2))
        self._init_projection(self.out_proj, 1.0)

    def forward(self, query: Tensor, key: Optional[Tensor] = None, value: Optional[Tensor] = None,
                key_padding_mask: Optional[Tensor] = None, incremental_state=None, need_weights: bool = False,
                static_kv: bool = False, attn_mask: Optional[Tensor] = None, before_softmax: bool = False,
                need_head_weights: bool = False) -> Tuple[Tensor, None]:
        """query: [time, batch, embed]; key_padding_mask: [batch, time], True at padding.
        Returns ([time, batch, embed], None): LSH attention has no dense weights to return."""
        if attn_mask is not None and not self.causal:
            raise ValueError("LSH self-attention takes no attention mask (only padding) when not causal")
        if before_softmax:
            raise NotImplementedError("LSH attention has no dense attention logits")
        shared_qk = self._split_heads(self.q_proj(query))
        values = self._split_heads(self.v_proj(query))
        classes = hash_vectors(shared_qk, self.rotations)
        if incremental_state is not None:
            if not self.causal:
                raise ValueError("incremental decoding needs causal LSH self-attention")
            context = self._decoding_step(shared_qk, values, classes, key_padding_mask, incremental_state)
        else:
            context = lsh_self_attention(shared_qk, values, classes, self.chunk_size, causal=self.causal,
                                         key_padding_mask=key_padding_mask, dropout_p=self.dropout,
                                         training=self.training)
        return self.out_proj(self._merge_heads(context)), None

    @fp32_math
    def _decoding_step(self, shared_qk, values, classes, key_padding_mask, incremental_state) -> Tensor:
        """New positions [batch, heads, new, dim] attend to every earlier position that shares their
        class in at least one round (= :func:`reference_lsh_self_attention` with ``chunk_size=None``)."""
        batch, _, new, _ = shared_qk.shape
        keys = F.normalize(shared_qk.float(), dim=-1)
        padding = torch.zeros(batch, new, dtype=torch.bool, device=shared_qk.device) if key_padding_mask is None \
            else key_padding_mask[:, -new:].to(torch.bool)
        buffer = self._get_input_buffer(incremental_state)
        if buffer.get("prev_key") is not None:
            keys = torch.cat([buffer["prev_key"], keys], dim=2)
            values = torch.cat([buffer["prev_value"], values], dim=2)
            classes = torch.cat([buffer["prev_classes"], classes], dim=3)
            padding = torch.cat([buffer["prev_key_padding_mask"], padding], dim=1)
        self._set_input_buffer(incremental_state, {
            "prev_key": keys, "prev_value": values, "prev_classes": classes, "prev_key_padding_mask": padding})

        time = keys.shape[2]
        query_positions = torch.arange(time - new, time, device=keys.device)
        earlier = query_positions.unsqueeze(-1) > torch.arange(time, device=keys.device)
        query_classes = classes[..., time - new:]
        shares_class = (query_classes.unsqueeze(-1) == classes.unsqueeze(-2)).any(2)  # [b, h, new, time]
        allowed = shares_class & earlier & ~padding[:, None, None, :]
        scores = shared_qk.float() @ keys.transpose(-1, -2) / math.sqrt(self.head_dim)
        own_values = values[:, :, time - new:].float()
        return masked_softmax_or(scores, allowed, values.float(), own_values).to(values.dtype)


@with_incremental_state
class LSHCrossAttention(_LSHAttention):
    """LSH encoder-decoder attention (Petrick et al. 2022, §3, "LSH cross-attention").

    Called like fairseq's ``MultiheadAttention`` for encoder attention: ``query`` [Tq, batch,
    embed] from the decoder, ``key`` = ``value`` = encoder output [Tk, batch, kdim]. In training
    the order of queries and of keys inside a hash class is shuffled before sorting (Petrick et al. 2022
    §4: "crucial for training stability"); the shuffle is drawn from a generator seeded by
    (layer seed, update number), so recomputing a layer (activation checkpointing) repeats it,
    and the global RNG is never touched. Inference sorts by position. With an
    ``incremental_state`` the projected and hashed encoder keys are computed once per sentence
    and every query is its own query chunk (``query_chunk_size=1``).
    """

    def __init__(self, embed_dim: int, num_heads: int, *, kdim: Optional[int] = None, vdim: Optional[int] = None,
                 chunk_size: int, hash_classes: int, rounds: int, dropout: float = 0.0, seed: int = 0,
                 shuffle_in_training: bool = True, bias: bool = True):
        super().__init__(embed_dim, num_heads, chunk_size=chunk_size, hash_classes=hash_classes, rounds=rounds,
                         dropout=dropout, seed=seed, bias=bias)
        self.shuffle_in_training = shuffle_in_training
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(kdim or embed_dim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(vdim or embed_dim, embed_dim, bias=bias)
        for projection in (self.q_proj, self.k_proj, self.v_proj):
            self._init_projection(projection, 1 / math.sqrt(2))
        self._init_projection(self.out_proj, 1.0)

    def shuffle_generator(self, device) -> torch.Generator:
        """The training shuffle's generator: a function of (layer seed, update number) only."""
        generator = torch.Generator(device=device)
        generator.manual_seed((self.seed * 1_000_003 + self.num_updates) % (2**63 - 1))
        return generator

    def _keys(self, key: Tensor, key_padding_mask: Optional[Tensor]):
        keys, values = self._split_heads(self.k_proj(key)), self._split_heads(self.v_proj(key))
        return keys, values, hash_vectors(keys, self.rotations), key_padding_mask

    def forward(self, query: Tensor, key: Optional[Tensor], value: Optional[Tensor] = None,
                key_padding_mask: Optional[Tensor] = None, incremental_state=None, need_weights: bool = False,
                static_kv: bool = True, attn_mask: Optional[Tensor] = None, before_softmax: bool = False,
                need_head_weights: bool = False) -> Tuple[Tensor, None]:
        """query: [Tq, batch, embed]; key: [Tk, batch, kdim] (``value`` is ``key``);
        key_padding_mask: [batch, Tk]. Returns ([Tq, batch, embed], None)."""
        if attn_mask is not None or before_softmax:
            raise NotImplementedError("LSH cross-attention takes only a key padding mask")
        queries = self._split_heads(self.q_proj(query))
        query_classes = hash_vectors(queries, self.rotations)
        if incremental_state is not None:
            buffer = self._get_input_buffer(incremental_state)
            if buffer.get("prev_key") is not None:
                keys, values = buffer["prev_key"], buffer["prev_value"]
                key_classes, key_padding_mask = buffer["key_classes"], buffer.get("key_padding_mask")
            else:
                keys, values, key_classes, key_padding_mask = self._keys(key, key_padding_mask)
                self._set_input_buffer(incremental_state, {
                    "prev_key": keys, "prev_value": values, "key_classes": key_classes,
                    "key_padding_mask": key_padding_mask})
            context = lsh_cross_attention(queries, keys, values, query_classes, key_classes, self.chunk_size,
                                          query_chunk_size=1, key_padding_mask=key_padding_mask)
            return self.out_proj(self._merge_heads(context)), None

        keys, values, key_classes, key_padding_mask = self._keys(key, key_padding_mask)
        query_order = key_order = None
        if self.training and self.shuffle_in_training:
            generator = self.shuffle_generator(queries.device)
            query_order = random_ranks(query_classes.shape, generator, queries.device)
            key_order = random_ranks(key_classes.shape, generator, queries.device)
        context = lsh_cross_attention(queries, keys, values, query_classes, key_classes, self.chunk_size,
                                      key_padding_mask=key_padding_mask, query_order=query_order,
                                      key_order=key_order, dropout_p=self.dropout, training=self.training)
        return self.out_proj(self._merge_heads(context)), None
