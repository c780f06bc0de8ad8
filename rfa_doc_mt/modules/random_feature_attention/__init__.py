"""Random feature attention (RFA) with a sentential gate: Wu et al. 2022, §3, Peng et al. (2021).

RFA replaces ``exp(q·k)`` by a dot product of random features, ``φ(q)·φ(k)`` (Rahimi and
Recht, 2008), so that attention becomes (Wu et al. 2022, §3.1)::

    RFA(q_t, {k_i}, {v_i}) = φ(q_t)·S_t / φ(q_t)·z_t,   S_t = Σ_i w_ti φ(k_i) v_iᵀ,  z_t = Σ_i w_ti φ(k_i)

* **Cross attention**: S and z summarise the whole source once (``w = 1`` on real tokens).
* **Causal attention**: S and z summarise the target prefix and follow a recurrence. With
  the sentential gate (§3.2, "sgate")::

      f_t = σ(w_f·e_{t-1} + b_f) if x_t starts a sentence, else 1        (one gate per head)
      S_t = f_t S_{t-1} + φ(k_t) v_tᵀ,   z_t = f_t z_{t-1} + φ(k_t)

  and with the weighted-average variant of Miculicich et al. (2018) / Peng et al. (2021)
  that the paper compares against ("sgate-avg"), the tokens of a sentence that starts
  with gate f are added with weight (1 - f)::

      S_t = f_t S_{t-1} + c_t φ(k_t) v_tᵀ,   z_t = f_t z_{t-1} + c_t φ(k_t),
      c_t = 1 - f_s  where s is the first token of t's sentence (c_t = 1 in the first sentence)

  so that, at every sentence start, the memory becomes ``f · previous + (1 - f) · current``.
  Both are the general recurrence ``S_t = f_t S_{t-1} + c_t φ(k_t) v_tᵀ`` with per-token
  ``log_forget = log f_t`` and ``key_weight = c_t``; padding is ``f = 1, c = 0``. Every gate
  depends only on its own example: nothing is shared between the rows of a batch.

  RFA's successors gate at every token. Peng et al.'s own gated RFA (2021 §3.3, "token"), one
  gate per head from the token's input representation x_t, is the same recurrence with
  ``f_t = g_t = σ(w_g·x_t + b_g)`` and ``c_t = 1 - g_t`` (head-wise decay, as Mamba-2's scalar
  decay, Dao and Gu 2024). GLA (Yang et al. 2024, "feature") decays each feature of the state::

      α_t = σ(x_t W_1 W_2 + b)^{1/τ},   S_t = Diag(α_t) S_{t-1} + φ(k_t) [v_t, 1]ᵀ

  which is ``log_forget`` [batch, heads, time, F] with no key weight (:mod:`.gates`); every form
  takes it, the training form through :func:`.training.chunked_per_feature_causal_rfa`.

  The delta rule (Schlag et al. 2021; Yang et al. 2024, delta rule; gated, Yang et al. 2025) replaces the
  additive update: ``S_t = α_t (I - β_t k̂_t k̂_tᵀ) S_{t-1} + β_t k̂_t v_tᵀ`` with unit-norm features,
  read as ``S_tᵀ q̂_t`` without a normaliser (:mod:`.delta`, its three forms in one file).

The package, by form (docs/design.md, "Three forms, one truth"):

* :mod:`.features`: the random matrices (a seeded bank, a fixed evaluation matrix), the
  feature maps and the release's key norm-rescale;
* :mod:`.gates`: the gates as ``log_forget`` and ``key_weight`` (sentential, token, feature);
* :mod:`.state`: the state every form carries, ``[batch, heads, F, dv + 1]`` (S with z as its
  last column; decoding stores it column-major, the same values with a faster readout), and
  the floored readout;
* :mod:`.reference`: quadratic, masked, written from the formulas for clarity;
* :mod:`.training`: the training forms, linear in time and memory (causal: chunks of
  ``chunk_size`` tokens, quadratic inside a chunk, the recurrent state between chunks; cross:
  the source summary, then a readout, the summary in whichever exact form costs less,
  :func:`.training.cross_rfa_summary`, in training and in decoding);
* :mod:`.incremental`: one token and constant work per step, for beam search (a short causal
  prefix is kept as its keys and values while that is less than the state, 32 tokens at the
  paper's sizes; cross attention reads its cached source summary at every step; the features of
  a step come from :class:`.features.DecodingFeatureMap`, one batched product over heads);
* :mod:`.fused`: the decoding step of both attentions fused into one Triton kernel each
  (:mod:`.triton_kernels`), for GPUs, where the eager step's dozen small operations are bound by
  their launches; chosen on CUDA tensors when Triton is installed, the eager step everywhere else;
* :mod:`.delta`: the delta rule's reference, training (chunked, WY form) and incremental forms;
* :mod:`.local`: local heads, softmax over the current sentence beside RFA over the window (Arora
  et al. 2024; Zhang et al. 2020), in the same three forms; a module's first ``local_heads``
  heads (``--rfa-causal-local-heads``, ``--rfa-cross-local-heads``);
* :mod:`.layers`: the attention modules that fairseq's layers call.

The causal forms share one signature, ``(phi_q, phi_k, v, log_forget, key_weight,
initial_state) -> (out, final_state)``, and the cross forms ``(phi_q, phi_k, v, key_weight) ->
(out, state)``, so the tests compare them directly (outputs, final states, gradients). The delta
rule's forms take its write strength after the values, ``(phi_q, phi_k, v, beta, log_forget,
key_weight, initial_state) -> (out, final_state)``, their state ``[batch, heads, F, dv]``.

The feature maps and the kernel they estimate are described in :mod:`.features`.

Numerics: feature maps, states, normalisers and gates are computed in fp32 whatever the
input dtype (autocast off inside the op); the output is cast back. The normaliser
``φ(q)·z`` (an estimate of the attention mass, which Fourier features can make small or
negative) is floored at :data:`NORMALISER_FLOOR`. Decays are applied as ``exp`` of sums of
``log f`` that are never positive, so no term can overflow, per head or per feature, whatever the
gates (the per-feature training form's bound: :func:`.training.chunked_per_feature_causal_rfa`).

Shapes: ops take ``[batch, heads, time, dim]``; the modules take fairseq's ``[time, batch,
embed_dim]``.
"""

from .delta import (
    DELTA_CHUNK_SIZE,
    DELTA_GATES,
    STATE_UPDATES,
    chunked_delta_rule,
    delta_rule_step,
    incremental_delta_rule,
    reference_delta_rule,
)
from .features import (
    FEATURE_MAPS,
    MIN_TAU,
    RANDOM_MATRIX_BANK_SIZE,
    RandomMatrices,
    feature_map_function,
    feature_size,
    l2_normalise,
    module_seed,
    norm_rescale_weights,
    orthogonal_random_matrices,
    positive_random_features,
    random_fourier_features,
)
from .gates import (
    FEATURE_GATE_RANK,
    FEATURE_GATE_TEMPERATURE,
    GATE_VARIANTS,
    SENTENCE_GATES,
    LowRankFeatureGate,
    feature_gates,
    final_key_weights,
    sentence_gates,
    token_gates,
)
from .incremental import causal_decoding_step, causal_rfa_step, incremental_causal_rfa
from .layers import RandomFeatureCausalAttention, RandomFeatureCrossAttention
from .local import (
    incremental_local_causal_attention,
    incremental_local_cross_attention,
    local_attention,
    local_causal_step,
    local_cross_cache,
    local_cross_step,
    reference_causal_module,
    reference_cross_module,
    reference_local_attention,
)
from .reference import reference_causal_rfa, reference_cross_rfa, reference_per_feature_causal_rfa
from .state import NORMALISER_FLOOR, join_state, split_state
from .training import (
    CHUNK_SIZE,
    PER_FEATURE_CHUNK_SIZE,
    cheapest_chunk_size,
    chunked_causal_rfa,
    chunked_per_feature_causal_rfa,
    cross_rfa,
    cross_rfa_read,
    cross_rfa_readout,
    cross_rfa_state,
    cross_rfa_summary,
)

__all__ = [
    "CHUNK_SIZE", "DELTA_CHUNK_SIZE", "DELTA_GATES", "FEATURE_GATE_RANK", "FEATURE_GATE_TEMPERATURE", "FEATURE_MAPS",
    "GATE_VARIANTS", "MIN_TAU", "NORMALISER_FLOOR", "PER_FEATURE_CHUNK_SIZE", "RANDOM_MATRIX_BANK_SIZE",
    "SENTENCE_GATES", "STATE_UPDATES",
    "LowRankFeatureGate", "RandomFeatureCausalAttention", "RandomFeatureCrossAttention", "RandomMatrices",
    "causal_decoding_step", "causal_rfa_step",
    "cheapest_chunk_size", "chunked_causal_rfa", "chunked_delta_rule", "chunked_per_feature_causal_rfa", "cross_rfa",
    "cross_rfa_read", "cross_rfa_readout", "cross_rfa_summary", "cross_rfa_state", "delta_rule_step",
    "feature_gates", "feature_map_function", "feature_size", "final_key_weights", "incremental_causal_rfa",
    "incremental_delta_rule", "incremental_local_causal_attention", "incremental_local_cross_attention",
    "join_state", "l2_normalise", "local_attention", "local_causal_step", "local_cross_cache", "local_cross_step",
    "module_seed", "norm_rescale_weights", "orthogonal_random_matrices", "positive_random_features",
    "random_fourier_features", "reference_causal_module", "reference_causal_rfa", "reference_cross_module",
    "reference_cross_rfa", "reference_delta_rule", "reference_local_attention", "reference_per_feature_causal_rfa",
    "sentence_gates", "split_state", "token_gates",
]
