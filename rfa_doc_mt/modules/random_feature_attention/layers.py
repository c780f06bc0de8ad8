"""The RFA attention modules: fairseq's ``MultiheadAttention`` call signature, the training
form in ``forward`` and the incremental form with an ``incremental_state``."""

import contextlib
import math
from typing import Dict, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from fairseq.incremental_decoding_utils import with_incremental_state
from torch import Tensor, nn

from ..hand_off import HandOff
from ..sentences import sentence_ids_from_starts
from .delta import DELTA_GATES, STATE_UPDATES, chunked_delta_rule, delta_rule_step
from .features import (
    FEATURE_MAPS,
    DecodingFeatureMap,
    RandomMatrices,
    feature_map_function,
    feature_size,
    norm_rescale_weights,
    projection_of,
    unit_vectors,
)
from .fused import (
    DECODING_PATHS,
    fused_causal_step,
    fused_cross_read,
    fused_local_causal_step,
    fused_local_cross_step,
    uses_fused_decoding,
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
from .incremental import PREFIX_NAMES, causal_decoding_step
from .local import (
    LOCAL_CROSS_NAMES,
    aligned_ids,
    local_attention,
    local_causal_step,
    local_cross_cache,
    local_cross_step,
    source_key_ids,
)
from .state import column_major_state, is_column_major, normalised, select_rows
from .training import (
    CHUNK_SIZE,
    PER_FEATURE_CHUNK_SIZE,
    cheapest_chunk_size,
    chunked_causal_rfa,
    cross_rfa_read,
    cross_rfa_state,
    cross_rfa_summary,
    fourier_keys_numerator,
    keys_form_is_cheaper,
    weighted_values,
)

# what a decoding cross attention keeps of its source (training.cross_rfa_summary)
SUMMARY_NAMES = ("state", "keys", "values")
# φ(K) of one part of a decoding batch's sources while their state is built, per device type: on
# a CPU 4 MB in fp32 (a part stays in the caches); on a GPU 256 MB, since every part costs kernel
# launches (about 36 operators a layer): one source per part made the first step of a batch of 1024
# IWSLT15 sentences (8 heads, 512 features, padded to 163 tokens) some 200,000 launches
SUMMARY_PART_FLOATS = {"cpu": 1 << 20, "cuda": 1 << 26}
# the device types whose training read of the source through its keys (Fourier map) makes and uses
# the features one head at a time (training.fourier_keys_numerator: a head's features stay in a CPU's
# caches); elsewhere, as on a GPU where a loop over heads costs launches, every head in one product
PER_HEAD_KEYS_READ = {"cpu"}
# what decoding keeps of the feature map (DecodingFeatureMap): one for every row, never reordered
DECODING_FEATURE_NAMES = ("feature_weight", "feature_offset")


def full_precision(x: Tensor):
    """Autocast off for what follows (RFA computes its features and states in fp32); nothing to
    switch, and nothing entered, when autocast is not on, as in fp32 decoding, once per layer
    and token."""
    device = x.device.type
    if torch.is_autocast_enabled(device):
        return torch.autocast(device_type=device, enabled=False)
    return contextlib.nullcontext()


class _RandomFeatureAttentionBase(HandOff, nn.Module):
    """What causal and cross RFA share: projections, random matrices, τ, feature map, gate.

    With ``local_heads = N`` the first N heads are softmax attention over the current sentence
    (:mod:`.local`) and the other ``rfa_heads`` are RFA: the random matrices, τ and the gates are
    the RFA heads' only; the projections serve every head."""

    # the gate reads the query input (causal) or the encoder output (cross, ``kdim`` wide)
    gate_on_keys = False
    # "auto", "eager" or "fused" (set_decoding_path): which decoding step runs
    decoding_path = "auto"
    # how causal attention updates its state: "add" (RFA) or "delta" (.delta); cross attention adds
    state_update = "add"

    def __init__(self, embed_dim: int, num_heads: int, num_projections: int, seed: int, kdim: Optional[int] = None,
                 feature_map: str = "fourier", learned_tau: bool = False, gate: str = "none",
                 gate_bias_init: float = 0.0, use_gate: bool = False, gate_rank: int = FEATURE_GATE_RANK,
                 gate_temperature: float = FEATURE_GATE_TEMPERATURE, local_heads: int = 0):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not divisible by {num_heads} heads")
        if not 0 <= local_heads < num_heads:
            raise ValueError(f"{local_heads} local heads of {num_heads}: expected 0 to {num_heads - 1} (at least one "
                             f"head stays RFA)")
        if feature_map not in FEATURE_MAPS:
            raise ValueError(f"unknown feature map {feature_map!r}; expected one of {FEATURE_MAPS}")
        if gate not in GATE_VARIANTS:
            raise ValueError(f"unknown gate {gate!r}; expected one of {GATE_VARIANTS}")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.local_heads, self.rfa_heads = local_heads, num_heads - local_heads
        self.head_dim = embed_dim // num_heads
        self.kdim = kdim or embed_dim
        self.feature_map = feature_map
        self.features = feature_size(feature_map, num_projections)
        self.random_matrices = RandomMatrices(self.rfa_heads, num_projections, self.head_dim, seed)
        self.tau = nn.Parameter(torch.ones(self.rfa_heads)) if learned_tau else None
        self.gate_variant = gate if use_gate else "none"
        # one gate per head: w_f, b_f of §3.2 (sentential, from the representation of the token
        # before) or w_g, b_g of Peng et al. (2021) §3.3 (token, from the token's own)
        self.gate_proj = nn.Linear(self.kdim if self.gate_on_keys else embed_dim, self.rfa_heads) \
            if self.gate_variant in SENTENCE_GATES + ("token",) else None
        # GLA's low-rank gate (Yang et al. 2024 §4.4): one decay per head and feature, σ(·)^{1/τ}
        self.feature_gate = LowRankFeatureGate(embed_dim, self.rfa_heads, self.features, gate_rank, gate_bias_init) \
            if self.gate_variant == "feature" else None
        self.gate_temperature = gate_temperature
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        self.gate_bias_init = gate_bias_init
        # the decoder hands in each forward's sentence starts (modules/hand_off.py)

    def _reset_common(self):
        nn.init.xavier_uniform_(self.out_proj.weight)
        nn.init.constant_(self.out_proj.bias, 0.0)
        if self.gate_proj is not None:
            nn.init.xavier_uniform_(self.gate_proj.weight)
            nn.init.constant_(self.gate_proj.bias, self.gate_bias_init)
        if self.feature_gate is not None:
            self.feature_gate.reset_parameters()

    def gate_logits(self, x: Tensor) -> Tensor:
        """[..., embed_dim] → [..., heads] fp32: w_f·e + b_f, in fp32 whatever the module's dtype."""
        weight, bias = self.gate_proj.weight, self.gate_proj.bias
        return F.linear(x.float(), weight.float(), bias.float())

    def features_of(self, x: Tensor, random_matrix: Tensor, projection: Optional[Tensor] = None) -> Tensor:
        """[..., heads, time, head_dim] → [..., heads, time, F] fp32, the training form (decoding's
        per-token features: :meth:`decoding_features`). ``projection``: W/τ of ``random_matrix``
        (:func:`.features.projection_of`) where one forward makes features twice."""
        return feature_map_function(self.feature_map)(x, random_matrix, self.tau, projection=projection)

    def decoding_features(self, buffer: Dict[str, Optional[Tensor]]) -> DecodingFeatureMap:
        """The feature map of decoding (:class:`.features.DecodingFeatureMap`): built from the
        evaluation matrix and τ on a batch's first step and kept in the decoding buffer, since
        the parameters do not change while a batch decodes; shared by every row."""
        if buffer.get(DECODING_FEATURE_NAMES[0]) is None:
            feature_map = DecodingFeatureMap.build(self.feature_map, self.random_matrices.evaluation_matrix, self.tau)
            buffer.update(zip(DECODING_FEATURE_NAMES, (feature_map.weight, feature_map.offset)))
            return feature_map
        return DecodingFeatureMap(self.feature_map, *(buffer[name] for name in DECODING_FEATURE_NAMES))

    def evaluate_with_bank(self, indices: Optional[Sequence[int]]) -> None:
        """For analysis: evaluate (and decode, on the eager path only) with the bank's matrices
        ``indices`` stacked in place of the evaluation matrix, or with it again (None):
        :meth:`.features.RandomMatrices.evaluate_with`."""
        if self.feature_gate is not None and indices is not None:
            raise ValueError("the per-feature gate is sized for the configured features: no other matrices")
        self.features = feature_size(self.feature_map, self.random_matrices.evaluate_with(indices))

    def _require_sentence_starts(self, expected_shape) -> Tensor:
        return self.handed("sentence_starts", expected_shape, f"its gate {self.gate_variant!r}")

    def _get_input_buffer(self, incremental_state) -> Dict[str, Optional[Tensor]]:
        result = self.get_incremental_state(incremental_state, "rfa_state")
        return result if result is not None else {}

    def _set_input_buffer(self, incremental_state, buffer: Dict[str, Optional[Tensor]]):
        return self.set_incremental_state(incremental_state, "rfa_state", buffer)

    def _merge_heads(self, x: Tensor, dtype: torch.dtype) -> Tensor:
        """[batch, heads, time, head_dim] → [time, batch, embed_dim]."""
        batch, heads, time, dim = x.shape
        return x.permute(2, 0, 1, 3).reshape(time, batch, heads * dim).to(dtype)


@with_incremental_state
class RandomFeatureCausalAttention(_RandomFeatureAttentionBase):
    """Decoder self-attention as causal RFA (§3.1), optionally gated: at sentence starts (§3.2,
    ``sgate``, ``sgate-avg``), at every token per head (``token``, Peng et al. 2021 §3.3) or per
    feature (``feature``, GLA's gate with rank ``gate_rank`` and temperature ``gate_temperature``),
    :mod:`.gates`.

    Called like fairseq's ``MultiheadAttention`` by ``TransformerDecoderLayerBase``:
    ``forward(query=x, key=x, value=x, key_padding_mask, incremental_state, attn_mask)`` with
    x [time, batch, embed_dim]; causality is built in (``attn_mask``, the future mask, is
    implied). Incremental state per layer: ``state`` [batch, heads, F, dv + 1] (S and z), or
    while the prefix is short, ``keys`` and ``values`` [batch, heads, t, F / dv + 1] (the same sums
    re-associated, :func:`.incremental.causal_decoding_step`, with their ``rows`` and spares),
    ``gate_logit`` [batch, heads] (logit of the last token, used when the next token starts a
    sentence), ``key_weight`` [batch, heads] (sgate-avg: the current sentence's weight) and
    the feature map's tensors (shared by every row, :meth:`decoding_features`). The token and
    feature gates read only the current token: they keep nothing more.

    With ``update="delta"`` the state follows the delta rule (:mod:`.delta`):
    ``S_t = α_t (I - β_t k̂_t k̂_tᵀ) S_{t-1} + β_t k̂_t v_tᵀ``, read as ``S_tᵀ q̂_t`` with no normaliser,
    β_t = σ(w_β·x_t + b_β) per head from the token's input (``beta_proj``), α_t the gate per head
    (``none``, ``sgate`` or ``token``; 1 without one). The gates' key weights, which make additive
    RFA's state a weighted average, are not applied (the delta rule has its own write strength β,
    and Gated Delta Networks decay and write independently): only padding weighs 0, where α = 1,
    so that padding leaves the state as it was. This is why ``sgate-avg``, which differs from
    ``sgate`` by its key weight only, and the per-feature gate are refused. Its incremental state:
    ``delta_state`` [batch, heads, F, dv] (beside the gates' entries and the feature map's); the
    fused decoding step (:mod:`.fused`) is never taken for it.

    ``local_heads`` (:mod:`.local`): the first heads are causal softmax over the current sentence
    so far (the sentence starts handed in, ``hand_in(sentence_starts=...)``); decoding keeps the
    current sentence's keys and values for them (:data:`.local.LOCAL_CAUSAL_NAMES`), dropped when a
    new sentence starts; on the fused path in the form of its kernel (:data:`.fused.FUSED_LOCAL_CAUSAL_NAMES`),
    read at the ``rows`` that beam search's reorders recorded for the state. The RFA heads keep what
    is listed above, ``heads`` being theirs.
    """

    def __init__(self, embed_dim: int, num_heads: int, num_projections: int, seed: int, feature_map: str = "fourier",
                 learned_tau: bool = False, gate: str = "none", gate_bias_init: float = 2.0,
                 chunk_size: int = CHUNK_SIZE, gate_rank: int = FEATURE_GATE_RANK,
                 gate_temperature: float = FEATURE_GATE_TEMPERATURE, update: str = "add",
                 local_heads: int = 0):
        if update not in STATE_UPDATES:
            raise ValueError(f"unknown state update {update!r}; expected one of {STATE_UPDATES}")
        if update == "delta" and gate not in DELTA_GATES:
            raise ValueError(f"the delta rule takes a gate per head, one of {DELTA_GATES}, not {gate!r} (sgate-avg "
                             "differs from sgate only by the key weight of its weighted average, which the delta "
                             "rule does not apply; feature decays each feature)")
        super().__init__(embed_dim, num_heads, num_projections, seed, feature_map=feature_map,
                         learned_tau=learned_tau, gate=gate, gate_bias_init=gate_bias_init, use_gate=gate != "none",
                         gate_rank=gate_rank, gate_temperature=gate_temperature, local_heads=local_heads)
        self.chunk_size = chunk_size
        self.state_update = update
        self.in_proj = nn.Linear(embed_dim, 3 * embed_dim)  # q, k, v in one matmul
        # the delta rule's write strength β_t = σ(w_β·x_t + b_β), one per RFA head
        self.beta_proj = nn.Linear(embed_dim, self.rfa_heads) if update == "delta" else None
        self.reset_parameters()

    def reset_parameters(self):
        # as fairseq's MultiheadAttention initialises its (then fused) q, k, v projections
        nn.init.xavier_uniform_(self.in_proj.weight, gain=1 / math.sqrt(2))
        nn.init.constant_(self.in_proj.bias, 0.0)
        if self.beta_proj is not None:  # β ≈ 0.5 at the start, as DeltaNet's σ(x W_β) without a bias
            nn.init.xavier_uniform_(self.beta_proj.weight)
            nn.init.constant_(self.beta_proj.bias, 0.0)
        self._reset_common()

    def write_strengths(self, x: Tensor) -> Tensor:
        """The delta rule's β = σ(w_β·x + b_β): [..., embed_dim] → [..., RFA heads] fp32."""
        return torch.sigmoid(F.linear(x.float(), self.beta_proj.weight.float(), self.beta_proj.bias.float()))

    def forward(self, query: Tensor, key: Optional[Tensor] = None, value: Optional[Tensor] = None,
                key_padding_mask: Optional[Tensor] = None,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
                need_weights: bool = False, attn_mask: Optional[Tensor] = None, **unused) -> Tuple[Tensor, None]:
        """query [time, batch, embed_dim] → ([time, batch, embed_dim], None); RFA has no weights to return."""
        if incremental_state is not None:
            return self._step(query, key_padding_mask, incremental_state), None
        time, batch, _ = query.shape
        q, k, v = self._split_qkv(query)
        local = self.local_heads
        rfa_q, rfa_k, rfa_v = (x[:, local:] for x in (q, k, v)) if local else (q, k, v)
        with full_precision(query):
            random_matrix = self.random_matrices()
            projection = projection_of(random_matrix, self.tau)  # one for the queries and the keys
            phi_q, phi_k = (self.features_of(x, random_matrix, projection) for x in (rfa_q, rfa_k))
            log_forget, key_weight = self._gates(query, key_padding_mask)
            if self.state_update == "delta":  # only padding weighs its write (class docstring)
                beta = self.write_strengths(query).permute(1, 2, 0)  # [batch, RFA heads, time]
                out, _ = chunked_delta_rule(phi_q, phi_k, rfa_v, beta, log_forget,
                                            self._padding_weights(key_padding_mask), chunk_size=self.chunk_size,
                                            final_state=False)
            else:
                if self.gate_variant == "feature":  # chunks of a power of two (chunked_per_feature_causal_rfa)
                    chunk_size = min(self.chunk_size, PER_FEATURE_CHUNK_SIZE)
                else:
                    chunk_size = cheapest_chunk_size(time, phi_q.size(-1), self.head_dim, longest=self.chunk_size)
                out, _ = chunked_causal_rfa(phi_q, phi_k, rfa_v, log_forget, key_weight,
                                            chunk_size=chunk_size, final_state=False)
        if local:
            ids = sentence_ids_from_starts(self.handed("sentence_starts", (batch, time), "its local heads"))
            local_out = local_attention(q[:, :local], k[:, :local], v[:, :local], ids, ids, key_padding_mask,
                                        causal=True)
            out = torch.cat([local_out, out.to(local_out.dtype)], 1)
        return self.out_proj(self._merge_heads(out, v.dtype)), None

    def _split_qkv(self, query: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        time, batch, _ = query.shape
        qkv = self.in_proj(query).view(time, batch, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 1, 3, 0, 4).unbind(0)  # each [batch, heads, time, head_dim]
        return q, k, v

    def _gates(self, query: Tensor, key_padding_mask: Optional[Tensor]):
        """log_forget [batch, heads, time] (the feature gate: [batch, heads, time, F]) and key_weight
        [batch, heads, time] for the whole sequence (:mod:`.gates`), of the RFA heads."""
        time, batch, _ = query.shape
        if self.gate_variant == "none":
            return None, self._padding_weights(key_padding_mask)
        padding = key_padding_mask.bool() if key_padding_mask is not None else None
        if self.gate_variant == "token":
            return token_gates(self.gate_logits(query).permute(1, 2, 0), padding)
        if self.gate_variant == "feature":
            return feature_gates(self.feature_gate(query).permute(1, 2, 0, 3), self.gate_temperature, padding)
        starts = self._require_sentence_starts((batch, time))
        logits = self.gate_logits(query).permute(1, 2, 0)  # [batch, heads, time]
        return sentence_gates(logits, starts, self.gate_variant, padding)

    def _padding_weights(self, key_padding_mask: Optional[Tensor]) -> Optional[Tensor]:
        """[batch, RFA heads, time]: 0 at padding, 1 elsewhere (None without padding)."""
        if key_padding_mask is None or not key_padding_mask.any():
            return None
        batch, time = key_padding_mask.shape
        return (~key_padding_mask.bool()).unsqueeze(1).float().expand(batch, self.rfa_heads, time)

    def _step(self, query: Tensor, key_padding_mask: Optional[Tensor], incremental_state) -> Tensor:
        """One token: query [1, batch, embed_dim] → [1, batch, embed_dim]."""
        if query.size(0) != 1:
            raise ValueError("incremental RFA takes one token per call")
        batch = query.size(1)
        buffer = self._get_input_buffer(incremental_state)
        qkv = self.in_proj(query[0]).view(batch, 3, self.num_heads, self.head_dim)
        local = self.local_heads
        # one kernel from q, k, v to the output for the RFA heads, one for the local heads (fused.py),
        # both writing into one output of every head
        fused = uses_fused_decoding(self, qkv)
        local_out = fused_out = None
        if fused:
            fused_out = qkv.new_empty(batch, self.num_heads, self.head_dim)
        if local:
            if fused:
                self._fused_local_step(qkv[:, :, :local], key_padding_mask, buffer, fused_out[:, :local])
            else:
                local_out = self._local_step(qkv[:, :, :local], key_padding_mask, buffer)
        rfa_qkv = qkv[:, :, local:]
        with full_precision(query):
            if not fused:
                # decoding is inference: the fixed evaluation matrix, whatever the mode. q̂ and k̂
                # head-major, [heads, batch x (q, k), head_dim]: one product for both
                units = unit_vectors(rfa_qkv[:, :2].permute(2, 0, 1, 3))
                phi = self.decoding_features(buffer)(units.view(self.rfa_heads, 2 * batch, self.head_dim))
                phi = phi.view(self.rfa_heads, batch, 2, -1).transpose(0, 1)  # [batch, heads, (q, k), F]
                phi_q, phi_k = phi[:, :, 0], phi[:, :, 1]
                v = rfa_qkv[:, 2].float()
            forget = key_weight = None
            if self.gate_variant in ("token", "feature"):  # from this token alone: the training form's gates
                log_forget, key_weight = self._gates(query, None)
                forget = log_forget[:, :, 0].exp()  # [batch, heads] or [batch, heads, F]
                key_weight = None if key_weight is None else key_weight[:, :, 0]
            elif self.gate_variant != "none":
                starts = self._require_sentence_starts((batch, 1))[:, 0].unsqueeze(-1)  # [batch, 1]
                previous_logit = buffer.get("gate_logit")
                if previous_logit is not None:
                    forget = torch.where(starts, torch.sigmoid(previous_logit), torch.ones_like(previous_logit))
                    if self.gate_variant == "sgate-avg":
                        key_weight = torch.where(starts, torch.sigmoid(-previous_logit), buffer["key_weight"])
                buffer["gate_logit"] = self.gate_logits(query[0])
                if self.gate_variant == "sgate-avg":
                    if key_weight is None:
                        key_weight = torch.ones_like(buffer["gate_logit"])
                    buffer["key_weight"] = key_weight
            keep = None
            if key_padding_mask is not None and key_padding_mask.any():
                keep = (~key_padding_mask[:, -1].bool()).float().unsqueeze(-1).expand(batch, self.rfa_heads)
                key_weight = keep if key_weight is None else key_weight * keep
                if forget is not None:  # a gate of 1 on padding (per head, or for every feature of it)
                    rows = keep.bool().view(batch, self.rfa_heads, *([1] * (forget.dim() - 2)))
                    forget = torch.where(rows, forget, torch.ones_like(forget))
            if self.state_update == "delta":  # eager (uses_fused_decoding: never fused); only padding weighs
                beta = self.write_strengths(query[0])
                out, buffer["delta_state"] = delta_rule_step(phi_q, phi_k, v, beta, buffer.get("delta_state"),
                                                             forget, keep)
            else:
                prefix = {name: buffer.get(name) for name in PREFIX_NAMES}
                if fused:
                    fused_causal_step(rfa_qkv, self.decoding_features(buffer), prefix, forget, key_weight,
                                      out=fused_out[:, local:])
                    out = fused_out
                else:
                    out = causal_decoding_step(phi_q, phi_k, v, prefix, forget, key_weight)
                buffer.update(prefix)
        self._set_input_buffer(incremental_state, buffer)
        out = out.to(qkv.dtype)
        if local_out is not None:
            out = torch.cat([local_out, out], 1)
        return self.out_proj(out.reshape(1, batch, self.embed_dim))

    def _local_step(self, qkv: Tensor, key_padding_mask: Optional[Tensor], buffer: Dict[str, Optional[Tensor]]
                    ) -> Tensor:
        """The local heads' step (:func:`.local.local_causal_step`): qkv [batch, 3, local heads,
        head_dim] → [batch, local heads, head_dim]; their keys live in ``buffer``."""
        batch = qkv.size(0)
        starts = self.handed("sentence_starts", (batch, 1), "its local heads")[:, 0]
        real = None if key_padding_mask is None else ~key_padding_mask[:, -1].bool()
        q, k, v = qkv.unbind(1)
        return local_causal_step(q, k, v, buffer, starts, real)

    def _fused_local_step(self, qkv: Tensor, key_padding_mask: Optional[Tensor], buffer: Dict[str, Optional[Tensor]],
                          out: Tensor) -> None:
        """The local heads' step in one kernel (:func:`.fused.fused_local_causal_step`), written into
        ``out`` [batch, local heads, head_dim]; it reads the rows that beam search's reorders recorded
        for the RFA state (``rows``, cleared by the RFA heads' step that follows)."""
        batch = qkv.size(0)
        starts = self.handed("sentence_starts", (batch, 1), "its local heads")[:, 0]
        real = None if key_padding_mask is None else ~key_padding_mask[:, -1].bool()
        fused_local_causal_step(qkv, buffer, starts, real, buffer.get("rows"), out)

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        """Beam search: rows of every state tensor follow ``new_order`` (over batch*beam).

        The prefix is the largest tensor of a decoding step and is gathered on every step. A
        state is gathered into the buffer the previous step left free (``spare_state``), so
        decoding does not allocate (and page-fault) a fresh one per layer per token; keys and
        values only record the rows to take (``rows``), which the next step gathers in the copy
        that extends them (:func:`.incremental.causal_keys_step`)."""
        buffer = self._get_input_buffer(incremental_state)
        if not buffer:
            return incremental_state
        rows = new_order.size(0)
        # the fused steps read their state and their local heads' keys at the recorded rows
        # (fused.py), as the keys form does
        deferred = buffer.get("keys") is not None or uses_fused_decoding(self, buffer.get("state")) or \
            buffer.get("fused_local_keys") is not None
        if deferred:
            taken = buffer.get("rows")
            buffer["rows"] = new_order if taken is None else taken.index_select(0, new_order)
        for name, value in list(buffer.items()):
            if value is None or name in DECODING_FEATURE_NAMES or name.startswith(("spare_", "fused_local_")) or \
                    name in ("keys", "values", "rows") or (deferred and name == "state"):
                continue  # the feature map: one for every row; the keys, a fused state and fused local keys: above
            if name != "state" or value.requires_grad:
                buffer[name] = value.index_select(0, new_order)
                continue
            spare = buffer.get("spare_state")
            # finished sentences only ever shrink the batch: the first rows of the spare do
            fits = spare is not None and spare.shape[0] >= rows and spare.shape[1:] == value.shape[1:] \
                and spare.dtype == value.dtype and is_column_major(spare) == is_column_major(value)
            buffer[name] = select_rows(value, new_order, out=spare[:rows] if fits else None)
            buffer["spare_state"] = value
        return self._set_input_buffer(incremental_state, buffer)


def summary_part_size(device: torch.device, heads: int, source: int, features: int) -> int:
    """How many sources a part of :meth:`RandomFeatureCrossAttention._decoding_summary` holds: as
    many as keep φ(K) within ``SUMMARY_PART_FLOATS`` of the device type, at least one."""
    budget = SUMMARY_PART_FLOATS.get(device.type, SUMMARY_PART_FLOATS["cpu"])
    return max(1, budget // (heads * source * features))


def part_spans(real: Tensor, part: int) -> list:
    """The columns where the sources of each part of ``part`` rows of ``real`` [batch, source]
    (True: a token, False: padding) have a token: ``(first, end)`` per part, None for a part of
    padding only. Computed on ``real``'s device and read with one transfer, not one per part."""
    batch, source = real.shape
    count = -(-batch // part)
    padded = real.new_zeros(count * part, source)
    padded[:batch] = real
    present = padded.view(count, part, source).any(1)
    columns = torch.arange(source, device=real.device)
    first = torch.where(present, columns, source).amin(1)
    last = torch.where(present, columns, -1).amax(1)
    return [None if end < 0 else (start, end + 1) for start, end in torch.stack([first, last], 1).tolist()]


@with_incremental_state
class RandomFeatureCrossAttention(_RandomFeatureAttentionBase):
    """Encoder-decoder attention as RFA: S and z summarise the source once (§3.1).

    Called like fairseq's ``MultiheadAttention`` with ``static_kv=True``. During decoding,
    (S, z) are computed on the first step, kept in the incremental state and reused; as in
    fairseq's own encoder-decoder attention (``set_beam_size``), they are kept once per source
    sentence, not once per beam, and reordered only when sentences leave the batch.

    With ``cross_gate`` the source summary is the final state of the gated recurrence over
    the source (sentence starts of the source, gates from the encoder output of the token
    before); the paper found it hurt BLEU, so it is off by default (appendix A.2).

    ``local_heads`` (:mod:`.local`): the first heads are softmax over the source sentence aligned
    with the target sentence of the token each query predicts; the model hands in where those
    sentences start (a query whose input token is a separator starts the next one) and the
    source's sentence ids (``hand_in(target_sentence_starts=..., source_sentence_ids=...)``, the
    ids needed until the source is cached). Decoding keeps, once per source, their keys and values
    and the source's per-sentence index (:data:`.local.LOCAL_CROSS_NAMES`), and per row the target
    sentence of its last token (``local_sentence``; on the fused path one per row and local head,
    with the reorders not yet gathered: :data:`.fused.FUSED_LOCAL_CROSS_NAMES`).
    """

    gate_on_keys = True

    def __init__(self, embed_dim: int, num_heads: int, num_projections: int, seed: int, kdim: Optional[int] = None,
                 feature_map: str = "fourier", learned_tau: bool = False, gate: str = "none",
                 gate_bias_init: float = 2.0, cross_gate: bool = False, norm_rescale: bool = False,
                 local_heads: int = 0):
        if cross_gate and gate not in SENTENCE_GATES:
            raise ValueError(f"cross gating needs a sentential gate (sgate or sgate-avg), not {gate!r}")
        super().__init__(embed_dim, num_heads, num_projections, seed, kdim=kdim, feature_map=feature_map,
                         learned_tau=learned_tau, gate=gate, gate_bias_init=gate_bias_init, use_gate=cross_gate,
                         local_heads=local_heads)
        self.norm_rescale = norm_rescale
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.kv_proj = nn.Linear(self.kdim, 2 * embed_dim)
        self.beam_size = 1
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.xavier_uniform_(self.q_proj.weight, gain=1 / math.sqrt(2))
        nn.init.xavier_uniform_(self.kv_proj.weight, gain=1 / math.sqrt(2))
        nn.init.constant_(self.q_proj.bias, 0.0)
        nn.init.constant_(self.kv_proj.bias, 0.0)
        self._reset_common()

    def set_beam_size(self, beam_size: int):
        """fairseq's SequenceGenerator announces the beam: beams of a sentence share S, z."""
        self.beam_size = beam_size

    def source_state(self, key: Tensor, key_padding_mask: Optional[Tensor], random_matrix: Tensor,
                     sentence_starts: Optional[Tensor] = None) -> Tensor:
        """key [source, batch, kdim] → state [batch, heads, F, dv + 1] fp32.

        ``sentence_starts`` [batch, source] (source side) is needed only with the cross gate.
        """
        return cross_rfa_state(*self._source_keys(key, key_padding_mask, random_matrix, sentence_starts))

    def _source_keys(self, key: Tensor, key_padding_mask: Optional[Tensor], random_matrix: Tensor,
                     sentence_starts: Optional[Tensor]) -> Tuple[Tensor, Tensor, Optional[Tensor]]:
        """φ(k) [batch, heads, source, F], v [batch, heads, source, dv] and the keys' weights
        [batch, heads, source] (padding, cross gate, norm-rescale; None: all 1), fp32."""
        k, v, key_weight = self._source_projections(key, key_padding_mask, sentence_starts)
        with full_precision(key):
            return self.features_of(k, random_matrix), v, key_weight

    def _source_projections(self, key: Tensor, key_padding_mask: Optional[Tensor],
                            sentence_starts: Optional[Tensor]) -> Tuple[Tensor, Tensor, Optional[Tensor]]:
        """k [batch, heads, source, head_dim] (before the feature map), v fp32 and the keys'
        weights (as :meth:`_source_keys`), of the RFA heads."""
        return self._rfa_source(*self._source_heads(key), key, key_padding_mask, sentence_starts)

    def _source_heads(self, key: Tensor) -> Tuple[Tensor, Tensor]:
        """key [source, batch, kdim] → k, v [batch, heads, source, head_dim] of every head."""
        source, batch, _ = key.shape
        kv = self.kv_proj(key).view(source, batch, 2, self.num_heads, self.head_dim)
        k, v = kv.permute(2, 1, 3, 0, 4).unbind(0)
        return k, v

    def _rfa_source(self, k: Tensor, v: Tensor, key: Tensor, key_padding_mask: Optional[Tensor],
                    sentence_starts: Optional[Tensor]) -> Tuple[Tensor, Tensor, Optional[Tensor]]:
        """The RFA heads' part of :meth:`_source_heads` (k, v of every head), as :meth:`_source_projections`."""
        if self.local_heads:
            k, v = k[:, self.local_heads:], v[:, self.local_heads:]
        batch, _, source, _ = k.shape
        with full_precision(key):
            padding = key_padding_mask.bool() if key_padding_mask is not None and key_padding_mask.any() else None
            if self.gate_variant != "none":
                if sentence_starts is None or tuple(sentence_starts.shape) != (batch, source):
                    raise RuntimeError("the cross gate needs source sentence starts [batch, source]: use it inside "
                                       "RFATransformerDecoder, which provides them")
                logits = self.gate_logits(key).permute(1, 2, 0)
                log_forget, key_weight = sentence_gates(logits, sentence_starts, self.gate_variant, padding)
                key_weight = final_key_weights(log_forget, key_weight)
            else:
                key_weight = None if padding is None else \
                    (~padding).unsqueeze(1).float().expand(batch, self.rfa_heads, source)
            if self.norm_rescale:
                rescale = norm_rescale_weights(k, self.tau, padding)
                key_weight = rescale if key_weight is None else key_weight * rescale
            return k, v.float(), key_weight

    def _decoding_summary(self, key: Tensor, key_padding_mask: Optional[Tensor],
                          sentence_starts: Optional[Tensor],
                          source_heads: Optional[Tuple[Tensor, Tensor]] = None) -> Dict[str, Tensor]:
        """What decoding keeps of the sources (:func:`.training.cross_rfa_summary`), with the
        evaluation matrix (``source_heads``: :meth:`_source_heads` of ``key``, if computed already).

        The state is built a few sources at a time: φ(K) of a whole batch can be many times its
        states (96 sources of 375 tokens: 590 MB against 102 MB), and each part drops the columns
        where all its sources are padding (weight 0: they add nothing to the sums)."""
        random_matrix = self.random_matrices.evaluation_matrix
        k, v, key_weight = self._rfa_source(*(source_heads or self._source_heads(key)), key, key_padding_mask,
                                            sentence_starts)
        batch, heads, source, _ = k.shape
        with full_precision(key):
            # the fused step reads the state form only (fused.py)
            if keys_form_is_cheaper(source, self.features, self.head_dim + 1) and not uses_fused_decoding(self, k):
                return cross_rfa_summary(self.features_of(k, random_matrix), v, key_weight)
            # column-major (state.py): [S, z]ᵀ = [w v, w]ᵀ φ(K) per head
            stored = v.new_empty(batch, heads, self.head_dim + 1, self.features)
            real = None if key_padding_mask is None else ~key_padding_mask.bool()
            part = summary_part_size(k.device, heads, source, self.features)
            spans = [(0, source)] * -(-batch // part) if real is None else part_spans(real, part)
            for first, span in zip(range(0, batch, part), spans):
                last = min(first + part, batch)
                if span is None:  # sources of padding only: nothing to sum
                    stored[first:last] = 0.0
                    continue
                columns = slice(*span)
                weight = None if key_weight is None else key_weight[first:last, :, columns]
                phi_k = self.features_of(k[first:last, :, columns], random_matrix)
                values = weighted_values(v[first:last, :, columns], weight).transpose(-1, -2)
                if torch.is_grad_enabled() and (values.requires_grad or phi_k.requires_grad):
                    stored[first:last] = values @ phi_k
                    continue
                # decoding: written straight into the summary, not copied there
                torch.bmm(values.reshape(-1, values.size(-2), values.size(-1)),
                          phi_k.reshape(-1, phi_k.size(-2), self.features),
                          out=stored[first:last].view(-1, values.size(-2), self.features))
            return {"state": column_major_state(stored)}

    def forward(self, query: Tensor, key: Optional[Tensor], value: Optional[Tensor] = None,
                key_padding_mask: Optional[Tensor] = None,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
                need_weights: bool = False, static_kv: bool = True, **unused) -> Tuple[Tensor, None]:
        """query [time, batch, embed_dim], key [source, batch, kdim] → ([time, batch, embed_dim], None).

        The source is summarised in whichever exact form costs less (:func:`.training.cross_rfa_summary`):
        in training for the ``time`` queries that read it once, in decoding for every step."""
        time, batch, _ = query.shape
        q = self.q_proj(query)
        local_width = self.local_heads * self.head_dim
        q_rfa = q[..., local_width:] if local_width else q  # the local heads come first
        if incremental_state is None:
            random_matrix = self.random_matrices()
            projection = projection_of(random_matrix, self.tau)  # one for the keys and the queries
            starts = self.handed_or_none("sentence_starts")
            k_all, v_all = self._source_heads(key)
            k, v, key_weight = self._rfa_source(k_all, v_all, key, key_padding_mask, starts)
            if self.feature_map == "fourier" and k.device.type in PER_HEAD_KEYS_READ and \
                    keys_form_is_cheaper(k.size(2), self.features, self.head_dim + 1, reads=time):
                out = self._fourier_keys_read(q_rfa, k, v, key_weight, projection)
            else:
                with full_precision(key):
                    summary = cross_rfa_summary(self.features_of(k, random_matrix, projection), v, key_weight,
                                                reads=time)
                out = self._read(q_rfa, summary, random_matrix=random_matrix, projection=projection)
            if self.local_heads:
                out = torch.cat([self._local_attention(q[..., :local_width], k_all, v_all, key_padding_mask), out], -1)
            return self.out_proj(out), None
        # decoding is inference: the fixed evaluation matrix, whatever the mode
        buffer = self._get_input_buffer(incremental_state)
        summary = {name: buffer[name] for name in SUMMARY_NAMES if buffer.get(name) is not None}
        if not summary:
            if key is None:
                raise ValueError("cross attention needs the encoder output on its first call")
            starts = self.handed_or_none("sentence_starts")
            source_ids = self.handed("source_sentence_ids", (batch, key.size(0)), "its local heads") \
                if self.local_heads else None
            if self.beam_size > 1:
                # rows are [sentence, beam] with equal sources: one summary per sentence
                if batch % self.beam_size:
                    raise ValueError(f"batch of {batch} rows is not [sentences x beam {self.beam_size}]")
                key = key[:, ::self.beam_size]
                key_padding_mask = key_padding_mask[::self.beam_size] if key_padding_mask is not None else None
                starts = starts[::self.beam_size] if starts is not None else None
                source_ids = source_ids[::self.beam_size] if source_ids is not None else None
            k_all, v_all = self._source_heads(key)
            summary = self._decoding_summary(key, key_padding_mask, starts, source_heads=(k_all, v_all))
            buffer.update(summary)
            if self.local_heads:
                buffer.update(local_cross_cache(k_all[:, :self.local_heads], v_all[:, :self.local_heads],
                                                source_key_ids(source_ids, key_padding_mask)))
            self._set_input_buffer(incremental_state, buffer)
        rows = buffer.get("rows")
        if time == 1 and uses_fused_decoding(self, q):
            # one kernel for the RFA heads, one for the local heads (fused.py), into one output
            heads_q = q.view(batch, self.num_heads, self.head_dim)
            out = heads_q.new_empty(batch, self.num_heads, self.head_dim)
            local = self.local_heads
            if local:
                starts = self.handed("target_sentence_starts", (batch, 1), "its local heads")[:, 0]
                fused_local_cross_step(heads_q[:, :local], buffer, starts, rows, out[:, :local])
            fused_cross_read(heads_q[:, local:], self.decoding_features(buffer), summary, rows, out[:, local:])
            self._set_input_buffer(incremental_state, buffer)
            return self.out_proj(out.view(1, batch, self.embed_dim)), None
        out = self._read(q_rfa, summary, rows=rows, feature_map=self.decoding_features(buffer))
        if self.local_heads:
            out = torch.cat([self._local_step(q[..., :local_width], buffer), out], -1)
            self._set_input_buffer(incremental_state, buffer)
        return self.out_proj(out), None

    def has_source(self, incremental_state) -> bool:
        """Whether decoding has read the source already (it is then cached, and the source's
        sentence ids need not be handed in again)."""
        buffer = self._get_input_buffer(incremental_state)
        return any(buffer.get(name) is not None for name in SUMMARY_NAMES)

    def _local_attention(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Optional[Tensor]) -> Tensor:
        """The local heads' training form (:func:`.local.local_attention`): q [time, batch, local
        heads x head_dim], k and v of every head (:meth:`_source_heads`) → [time, batch, local heads x head_dim]."""
        time, batch, width = q.shape
        local = self.local_heads
        target_ids = sentence_ids_from_starts(self.handed("target_sentence_starts", (batch, time), "its local heads"))
        source_ids = self.handed("source_sentence_ids", (batch, k.size(2)), "its local heads")
        query_ids, key_ids = aligned_ids(target_ids, source_ids, key_padding_mask)
        heads_q = q.view(time, batch, local, self.head_dim).permute(1, 2, 0, 3)
        out = local_attention(heads_q, k[:, :local], v[:, :local], query_ids, key_ids, key_padding_mask)
        return out.permute(2, 0, 1, 3).reshape(time, batch, width)

    def _local_step(self, q: Tensor, buffer: Dict[str, Optional[Tensor]]) -> Tensor:
        """The local heads' decoding step (:func:`.local.local_cross_step`): q [1, batch, local heads
        x head_dim] → the same shape; the row's target sentence advances at the starts handed in."""
        time, batch, width = q.shape
        if time != 1:
            raise ValueError("incremental cross attention with local heads takes one token per call")
        starts = self.handed("target_sentence_starts", (batch, 1), "its local heads")[:, 0].long()
        sentence = buffer.get("local_sentence")
        sentence = starts if sentence is None else sentence + starts
        buffer["local_sentence"] = sentence
        rows = buffer.get("rows")
        stored = buffer[LOCAL_CROSS_NAMES[0]].size(0)
        sources = stored if rows is None else rows.numel()
        source_of_row = torch.arange(batch, device=q.device) // (batch // sources)
        if rows is not None:
            source_of_row = rows.index_select(0, source_of_row)
        cache = {name: buffer[name] for name in LOCAL_CROSS_NAMES}
        out = local_cross_step(q.view(batch, self.local_heads, self.head_dim), cache, source_of_row, sentence)
        return out.reshape(1, batch, width)

    def _fourier_keys_read(self, q: Tensor, k: Tensor, v: Tensor, key_weight: Optional[Tensor],
                           projection: Tensor) -> Tensor:
        """The training form's read through the source's keys with the Fourier map
        (:func:`.training.fourier_keys_numerator`: features made and used one head at a time):
        the RFA heads' queries q [time, batch, heads x head_dim] (projected), k and v [batch, heads,
        source, head_dim], the keys' weights (as :meth:`_source_projections`) and W/τ → [time, batch,
        heads x head_dim]."""
        time, batch, width = q.shape
        with full_precision(q):
            q_units = unit_vectors(q.view(time, batch, self.rfa_heads, self.head_dim).permute(2, 1, 0, 3))
            k_units = unit_vectors(k.transpose(0, 1))
            values = weighted_values(v, key_weight).transpose(0, 1)
            out = normalised(fourier_keys_numerator(q_units, k_units, values, projection.float()))  # heads first
            out = out.permute(2, 1, 0, 3).reshape(time, batch, width)
        return out.to(q.dtype)

    def _read(self, q: Tensor, summary: Dict[str, Tensor], rows: Optional[Tensor] = None,
              random_matrix: Optional[Tensor] = None, feature_map: Optional[DecodingFeatureMap] = None,
              projection: Optional[Tensor] = None) -> Tensor:
        """The RFA heads' queries q [time, batch, heads x head_dim] (projected), a source summary of
        ``stored`` sources → [time, batch, heads x head_dim].

        The batch holds ``batch // sources`` consecutive rows (beams) per source; source i reads
        summary row ``rows[i]`` (``rows`` None: row i). The features of the queries come from
        ``feature_map`` (decoding) or else from ``random_matrix`` (the training form; ``projection``
        its W/τ where the caller made it)."""
        time, batch, width = q.shape
        heads = self.rfa_heads
        stored = next(iter(summary.values())).size(0)
        sources = stored if rows is None else rows.numel()
        beams = batch // sources
        with full_precision(q):
            heads_q = q.view(time, sources, beams, heads, self.head_dim)
            # phi_q [sources, heads, beams*time, F]: the beams of a source read the same summary
            if feature_map is None:
                heads_q = heads_q.permute(1, 3, 2, 0, 4).reshape(sources, heads, -1, self.head_dim)
                phi_q = self.features_of(heads_q, random_matrix, projection)
            else:  # head-major for one product over heads, then viewed per source
                units = unit_vectors(heads_q.permute(3, 1, 2, 0, 4)).view(heads, -1, self.head_dim)
                phi_q = feature_map(units).view(heads, sources, beams * time, -1).transpose(0, 1)
            if rows is None:
                out = cross_rfa_read(phi_q, summary)
            else:
                # queries of finished sentences are zero (their output, 0 / floor, is dropped)
                all_rows = phi_q.new_zeros((stored,) + phi_q.shape[1:]).index_copy_(0, rows, phi_q)
                out = cross_rfa_read(all_rows, summary).index_select(0, rows)
            out = out.view(sources, heads, beams, time, self.head_dim)
            out = out.permute(3, 0, 2, 1, 4).reshape(time, batch, width)
        return out.to(q.dtype)

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        """Reorder per source sentence: nothing to do unless sentences left the batch.

        When sentences finish, their summaries are not copied away at once: ``rows`` records
        which stored summary each remaining sentence reads, and the summary is compacted only once
        a quarter of it is unused. Gathering it on every step a sentence finishes would copy it
        nearly every step (a state is [sentences, heads, F, dv + 1]); this way the copies stay a
        bounded multiple of one summary and each step reads at most 4/3 of the summaries it needs.
        The local heads' source cache goes with the summary; the target sentence of each row
        follows the beams: gathered at once on the eager path (``local_sentence``), recorded on
        the fused one (``fused_sentence_order``, composed over reorders: the next step's kernel
        gathers on read)."""
        buffer = self._get_input_buffer(incremental_state)
        names = [name for name in SUMMARY_NAMES + LOCAL_CROSS_NAMES if buffer.get(name) is not None]
        if not names:
            return incremental_state
        if buffer.get("local_sentence") is not None:
            buffer["local_sentence"] = buffer["local_sentence"].index_select(0, new_order)
            self._set_input_buffer(incremental_state, buffer)
        if buffer.get("fused_sentence") is not None:
            taken = buffer.get("fused_sentence_order")
            buffer["fused_sentence_order"] = new_order if taken is None else taken.index_select(0, new_order)
            self._set_input_buffer(incremental_state, buffer)
        stored = buffer[names[0]].size(0)
        rows = buffer.get("rows")
        active = stored if rows is None else rows.numel()
        if active * self.beam_size == new_order.size(0):
            return incremental_state  # beams only moved within their sentence
        order = new_order.view(-1, self.beam_size)[:, 0] // self.beam_size if self.beam_size > 1 else new_order
        rows = order if rows is None else rows.index_select(0, order)
        if 4 * rows.numel() <= 3 * stored:
            for name in names:
                buffer[name] = select_rows(buffer[name], rows)
            rows = None
        buffer["rows"] = rows
        return self._set_input_buffer(incremental_state, buffer)


def set_decoding_path(model: nn.Module, path: str) -> int:
    """Set the decoding path (``"auto"``, ``"eager"`` or ``"fused"``: :mod:`.fused`) of every RFA
    attention module in ``model``; returns how many modules it set."""
    if path not in DECODING_PATHS:
        raise ValueError(f"unknown decoding path {path!r}; expected one of {DECODING_PATHS}")
    modules = [m for m in model.modules() if isinstance(m, (RandomFeatureCausalAttention, RandomFeatureCrossAttention))]
    for module in modules:
        module.decoding_path = path
    return len(modules)
