"""Locality-sensitive hashing (LSH) attention: Petrick et al. 2022 (Petrick et al., 2022, §3) after
Kitaev et al. (2020, "Reformer").

Two numbers name the hashing, and they are easy to confuse:

* ``hash_classes`` (``--lsh-hash-classes``, the paper's ``n_hash``): how many buckets one hash
  function has. Angular LSH (Andoni et al., 2015) takes ``argmax([xR; -xR])`` for a random
  rotation ``R`` of ``hash_classes / 2`` columns, so ``hash_classes`` must be even.
* ``rounds`` (``--lsh-rounds``): how many independent hash functions (rotations) are used; a
  query may attend to a key that shares its class in *any* round (Petrick et al. 2022, §3, "Multi-round
  LSH attention").

Each mechanism comes in three forms (docs/design.md, "Three forms, one truth"), one module each:

* :mod:`.reference`: :func:`reference_lsh_self_attention`, :func:`reference_lsh_cross_attention`,
  quadratic full attention restricted to the key sets ``P_i`` that the paper defines;
* :mod:`.training`: :func:`lsh_self_attention`, :func:`lsh_cross_attention` (the same arguments),
  sort by hash class, cut into fixed-size chunks, attend within a chunk and its neighbours,
  O(T * chunk) memory (``windowed_*``); on sequences so short that all pairs are no more than
  the rounds' windows (``T <= rounds * window``, e.g. one sentence in chunks of 8 with 4
  rounds) the same key sets are applied to all pairs at once (``dense_*``): less arithmetic, no
  per-round sorting and gathering, and no more memory; the ops choose by size alone;
* :mod:`.layers`: the modules :class:`LSHSelfAttention` and :class:`LSHCrossAttention`, whose
  ``incremental_state`` path is the incremental form, one target position at a time;

and :mod:`.hashing` draws the rotations and hashes (and holds the paper's rule for the number
of hash classes, :func:`paper_hash_classes`).

Multi-round attention is one softmax over the union of the rounds' key sets: every round
computes a softmax over its own window and its log-normaliser, and the rounds are combined by
log-sum-exp; a key that several rounds (or neighbouring chunks) would both offer is counted
once by subtracting ``log(count)`` from its logit in every round that sees it (as Kitaev et
al.'s multi-round LSH attention does). Tensors are ``[batch, heads, time, dim]`` and hash
classes ``[batch, heads, rounds, time]`` unless a docstring says otherwise.

Memory: the windowed training forms keep for the backward pass only the unsorted inputs, integer
indices and the per-round attention weights (``rounds * time * window`` floats); the sorted,
windowed copies of queries, keys and values (2-3 chunks of keys per chunk of queries) are
rebuilt in the backward pass (:class:`_WindowScores`, :class:`_WindowWeightedSum`). At a fixed
number of tokens this memory does not depend on the sequence length (tested).

What the incremental forms compute, exactly (tests hold them to it):

* causal self-attention: the new position attends to *all* earlier, non-padded positions that
  share its hash class in at least one round (itself only when there are none). Chunk
  boundaries of the training form come from sorting the *whole* sequence by class, so they
  depend on later positions' classes and cannot be known while decoding; the incremental form
  is therefore the training form with a chunk large enough to hold the whole sequence, i.e.
  :func:`reference_lsh_self_attention` with ``chunk_size=None``. (The same dependence means
  that in the training form the *set* of keys of position ``i`` can change when a later
  position changes class; no value or gradient flows from later positions.)
* cross-attention: every query is its own query chunk (``query_chunk_size=1``): its aligned key
  chunk is the middle of the first key chunk holding its class and the last one holding it.
  The training form aligns chunks of ``chunk_size`` queries by their class range instead; with
  ``query_chunk_size=1`` the training form gives exactly the incremental outputs.
"""

from .hashing import (
    PAD_CLASS,
    check_hash_classes,
    hash_vectors,
    paper_hash_classes,
    random_ranks,
    random_rotations,
)
from .layers import LSHCrossAttention, LSHSelfAttention, _LSHAttention
from .reference import reference_lsh_cross_attention, reference_lsh_self_attention
from .training import lsh_cross_attention, lsh_self_attention

__all__ = [
    "PAD_CLASS", "LSHCrossAttention", "LSHSelfAttention", "_LSHAttention", "check_hash_classes", "hash_vectors",
    "lsh_cross_attention", "lsh_self_attention", "paper_hash_classes", "random_ranks", "random_rotations",
    "reference_lsh_cross_attention", "reference_lsh_self_attention",
]
