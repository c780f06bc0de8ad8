"""Random feature attention (RFA) with a sentential gate: paper 000 §3, Peng et al. (2021).

RFA replaces ``exp(q·k)`` by a dot product of random features, ``φ(q)·φ(k)`` (Rahimi and
Recht, 2008), so that attention becomes (paper 000 §3.1)::

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

Three forms of the causal op, which the tests check against each other (outputs, final
states, gradients):

* :func:`reference_causal_rfa`: quadratic, masked, written for clarity;
* :func:`chunked_causal_rfa`: the training form, linear in time and memory (chunks of
  ``chunk_size`` tokens, quadratic inside a chunk, the recurrent state between chunks);
* :func:`causal_rfa_step`: the incremental form, one token and constant work per step.

Feature maps (inputs are L2-normalised, as in Peng et al.; ``τ`` a per-head temperature)::

    fourier:   φ(x) = [sin(W x̂/τ), cos(W x̂/τ)] / √D        φ(x)·φ(y) ≈ exp((x̂·ŷ - 1)/τ²)
    positive:  φ(x) = exp(W x̂/τ - 1/τ²) / √D               φ(x)·φ(y) ≈ exp((x̂·ŷ - 1)/τ²)

with the D rows of W drawn N(0, I) (orthogonal random features). Both estimate the same
kernel, which lies in [exp(-2/τ²), 1], so attention approximates ``softmax(q̂·k̂ / τ²)``.

Numerics: feature maps, states, normalisers and gates are computed in fp32 whatever the
input dtype (autocast off inside the op); the output is cast back. The normaliser
``φ(q)·z`` (an estimate of the attention mass, which Fourier features can make small or
negative) is floored at :data:`NORMALISER_FLOOR`. Decays are applied as ``exp`` of sums of
``log f`` that are never positive, so no term can overflow.

Shapes: ops take ``[batch, heads, time, dim]``; the modules take fairseq's ``[time, batch,
embed_dim]``.
"""

import math
import random
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq.incremental_decoding_utils import with_incremental_state
from torch import Tensor, nn

# Smallest value of the normaliser φ(q)·z. In kernel units (φ(x)·φ(y) ≈ kernel ≤ 1) one
# key contributes at least exp(-2/τ²) ≈ 0.135 at τ = 1: a normaliser below 0.1 is estimator
# noise, and dividing by it would blow the output up (Peng et al. floor it too).
NORMALISER_FLOOR = 0.1
# Training-form chunk length: quadratic work inside a chunk, recurrent state between chunks.
CHUNK_SIZE = 64
# Random matrices per attention module that training draws from (one per forward).
RANDOM_MATRIX_BANK_SIZE = 16
# τ is clamped here so that a learned temperature can never divide by ~0.
MIN_TAU = 0.05
GATE_VARIANTS = ("none", "sgate", "sgate-avg")
FEATURE_MAPS = ("fourier", "positive")


# ---------------------------------------------------------------------------------------
# Random matrices


def orthogonal_random_matrices(generator: torch.Generator, count: int, num_heads: int, num_projections: int,
                               head_dim: int) -> Tensor:
    """[count, heads, num_projections, head_dim] fp32: rows marginally N(0, I), orthogonal in
    blocks of ``head_dim`` (orthogonal random features lower the kernel estimate's variance).

    Drawn in fp64 on CPU from ``generator`` only, so a seed always gives the same matrices.
    """
    blocks = -(-num_projections // head_dim)
    shape = (count * num_heads * blocks, head_dim, head_dim)
    gaussian = torch.randn(shape, generator=generator, dtype=torch.float64)
    q, r = torch.linalg.qr(gaussian)
    # sign fix: makes q Haar-distributed (QR alone is biased by its sign convention)
    q = q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1)).unsqueeze(-2)
    # row lengths of Gaussian vectors (chi with head_dim degrees of freedom)
    lengths = torch.randn(shape, generator=generator, dtype=torch.float64).norm(dim=-1)
    rows = q.transpose(-1, -2) * lengths.unsqueeze(-1)
    rows = rows.reshape(count, num_heads, blocks * head_dim, head_dim)[:, :, :num_projections]
    return rows.float().contiguous()


class RandomMatrices(nn.Module):
    """The random projections of one attention module: a seeded bank, a fixed eval matrix.

    * training: every forward draws a new matrix from a bank of
      :data:`RANDOM_MATRIX_BANK_SIZE` seeded matrices; the draw depends only on the module's
      seed, the update number and the number of draws since fairseq's ``set_num_updates``
      (called before every micro-batch), never on global RNG. So every micro-batch of an update,
      on every distributed worker and with any ``--update-freq``, draws the same matrices: an
      update's batch sees one sample of the random features however it is split, and a resumed
      run draws what an uninterrupted one does;
    * evaluation: always the same matrix (``eval_matrix``), so the training form, the
      incremental form and beam search see identical features.

    ``seed`` and ``eval_matrix`` are persistent buffers: a checkpoint restores them exactly,
    and loading a checkpoint whose seed differs rebuilds the bank from that seed. The bank
    itself is derived from the seed and not saved (it would be 16x the module's matrices).
    """

    def __init__(self, num_heads: int, num_projections: int, head_dim: int, seed: int,
                 bank_size: int = RANDOM_MATRIX_BANK_SIZE):
        super().__init__()
        self.num_heads, self.num_projections, self.head_dim = num_heads, num_projections, head_dim
        self.bank_size = bank_size
        bank = self._build_bank(seed)
        self.register_buffer("seed", torch.tensor(seed, dtype=torch.long))
        self.register_buffer("eval_matrix", bank[0].clone())
        self.register_buffer("bank", bank, persistent=False)
        self._bank_seed = seed
        self.num_updates = 0
        self.draws_in_update = 0
        self.holding, self.held = False, None  # see begin_forward

    def _build_bank(self, seed: int) -> Tensor:
        generator = torch.Generator().manual_seed(seed)
        return orthogonal_random_matrices(generator, self.bank_size, self.num_heads, self.num_projections,
                                          self.head_dim)

    def set_num_updates(self, num_updates: int) -> None:
        # fairseq calls this before every micro-batch (FairseqTask.train_step): the draws restart
        self.num_updates = num_updates
        self.draws_in_update = 0
        self.held = None

    def begin_forward(self) -> None:
        """Called by the model at the start of each forward pass: the first draw of the pass is
        held, and every later call in it (activation checkpointing's recomputation in the
        backward pass) returns that matrix, until the next :meth:`begin_forward`."""
        self.holding, self.held = True, None

    def draw_index(self) -> int:
        """Bank index of the next training draw: a hash of (seed, update, draw), no global RNG."""
        rng = random.Random(f"{self._bank_seed}:{self.num_updates}:{self.draws_in_update}")
        return rng.randrange(self.bank_size)

    def forward(self) -> Tensor:
        """[heads, num_projections, head_dim]"""
        if not self.training:
            return self.eval_matrix
        if self.holding and self.held is not None:
            return self.held
        index = self.draw_index()
        self.draws_in_update += 1
        if self.holding:
            self.held = self.bank[index]
        return self.bank[index]

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        seed = int(self.seed.item())
        if seed != self._bank_seed:
            self.bank = self._build_bank(seed).to(self.eval_matrix.device)
            self._bank_seed = seed

    def extra_repr(self) -> str:
        return (f"heads={self.num_heads}, projections={self.num_projections}, head_dim={self.head_dim}, "
                f"bank={self.bank_size}, seed={self._bank_seed}")


def module_seed(base_seed: int, layer_index: int, role: str) -> int:
    """Distinct seed per layer and per attention role ("causal", "cross")."""
    return (int(base_seed) * 1_000_003 + layer_index * 101 + {"causal": 1, "cross": 2}[role]) % (2 ** 62)


# ---------------------------------------------------------------------------------------
# Feature maps


def l2_normalise(x: Tensor) -> Tensor:
    return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-6)


def _projection(random_matrix: Tensor, tau: Optional[Tensor]) -> Tensor:
    """W / τ: [heads, D, head_dim]."""
    if tau is None:
        return random_matrix
    return random_matrix / tau.clamp_min(MIN_TAU).view(-1, 1, 1)


def _project(x: Tensor, projection: Tensor) -> Tensor:
    """x [..., heads, time, head_dim] (heads third from the end) → [..., heads, time, D].

    einsum turns this into one bmm over heads without expanding W over the batch."""
    return torch.einsum("...htd,hkd->...htk", l2_normalise(x.float()), projection.float())


def random_fourier_features(x: Tensor, random_matrix: Tensor, tau: Optional[Tensor] = None) -> Tensor:
    """[..., heads, time, head_dim] → [..., heads, time, 2D] fp32: [sin(Wx̂/τ), cos(Wx̂/τ)] / √D.

    φ(x)·φ(y) = mean_i cos(w_i·(x̂ - ŷ)/τ) ≈ exp(-|x̂ - ŷ|²/2τ²) = exp((x̂·ŷ - 1)/τ²).
    """
    projected = _project(x, _projection(random_matrix, tau))
    num_projections = projected.size(-1)
    scale = 1.0 / math.sqrt(num_projections)
    if torch.is_grad_enabled() and projected.requires_grad:
        return torch.cat([torch.sin(projected), torch.cos(projected)], dim=-1) * scale
    # inference (decoding): the same values written into one tensor, without temporaries
    features = projected.new_empty(projected.shape[:-1] + (2 * num_projections,))
    torch.sin(projected, out=features[..., :num_projections])
    torch.cos(projected, out=features[..., num_projections:])
    return features.mul_(scale)


def positive_random_features(x: Tensor, random_matrix: Tensor, tau: Optional[Tensor] = None) -> Tensor:
    """[..., heads, time, head_dim] → [..., heads, time, D] fp32: exp(Wx̂/τ - 1/τ²) / √D.

    Positive random features (Choromanski et al., 2021) of the same kernel as the Fourier map:
    E[φ(x)·φ(y)] = exp(x̂·ŷ/τ²) exp(-1/τ²). The exponent is at most |w|/τ - 1/τ² ≤ |w|²/4,
    bounded for every τ, so no max-subtraction is needed for fp32.
    """
    projection = _projection(random_matrix, tau)
    projected = _project(x, projection)
    if tau is None:
        offset = 1.0
    else:
        offset = tau.clamp_min(MIN_TAU).float().pow(-2).view(-1, 1, 1)
    scale = 1.0 / math.sqrt(random_matrix.size(-2))
    return torch.exp(projected - offset) * scale


def feature_map_function(name: str):
    return {"fourier": random_fourier_features, "positive": positive_random_features}[name]


def feature_size(name: str, num_projections: int) -> int:
    return 2 * num_projections if name == "fourier" else num_projections


# ---------------------------------------------------------------------------------------
# Gates (paper 000 §3.2)


def sentence_gates(gate_logits: Tensor, sentence_starts: Tensor, variant: str,
                   padding_mask: Optional[Tensor] = None) -> Tuple[Optional[Tensor], Optional[Tensor]]:
    """Per-token ``log_forget`` and ``key_weight`` ([batch, heads, time] fp32, or None).

    Args:
        gate_logits: [batch, heads, time]: ``w_f·e_t + b_f`` of each token t (the gate of
            a sentence start t uses the logit of token t - 1, the separator before it)
        sentence_starts: [batch, time] bool, from :func:`..sentences.sentence_starts`
        variant: "none", "sgate" or "sgate-avg"
        padding_mask: [batch, time] bool, True at padding (f = 1, c = 0 there)
    """
    batch, heads, time = gate_logits.shape
    if variant not in GATE_VARIANTS:
        raise ValueError(f"unknown gate {variant!r}; expected one of {GATE_VARIANTS}")
    log_forget = key_weight = None
    if variant != "none":
        logits = gate_logits.float()
        previous = torch.cat([logits.new_zeros(batch, heads, 1), logits[..., :-1]], dim=-1)
        starts = sentence_starts.unsqueeze(1)
        if padding_mask is not None:
            starts = starts & ~padding_mask.unsqueeze(1)
        # log σ(x) is finite for every finite x (σ itself underflows to 0 in fp32 below -88)
        log_forget = torch.where(starts, F.logsigmoid(previous), torch.zeros_like(previous))
        if variant == "sgate-avg":
            # weight of the current sentence: 1 - f of its first token, carried forward
            positions = torch.arange(time, device=logits.device).expand(batch, heads, time)
            last_start = torch.where(starts, positions, torch.full_like(positions, -1)).cummax(dim=-1).values
            weight_at_start = torch.sigmoid(-previous)
            key_weight = torch.where(last_start >= 0, weight_at_start.gather(-1, last_start.clamp_min(0)),
                                     torch.ones_like(previous))
    if padding_mask is not None:
        keep = (~padding_mask).unsqueeze(1).float().expand(batch, heads, time)
        key_weight = keep if key_weight is None else key_weight * keep
    return log_forget, key_weight


# ---------------------------------------------------------------------------------------
# Causal RFA: three forms


def _normalised(numerator_and_mass: Tensor) -> Tensor:
    """[..., dv + 1] (last column: φ(q)·z) → [..., dv], with the documented floor."""
    numerator, mass = numerator_and_mass[..., :-1], numerator_and_mass[..., -1:]
    return numerator / mass.clamp_min(NORMALISER_FLOOR)


def _with_ones(v: Tensor) -> Tensor:
    """[..., dv] → [..., dv + 1]: the extra column of ones accumulates z next to S."""
    return torch.cat([v, v.new_ones(v.shape[:-1] + (1,))], dim=-1)


def split_state(state: Tensor) -> Tuple[Tensor, Tensor]:
    """[batch, heads, F, dv + 1] → S [batch, heads, F, dv], z [batch, heads, F]."""
    return state[..., :-1], state[..., -1]


def reference_causal_rfa(phi_q: Tensor, phi_k: Tensor, v: Tensor, log_forget: Optional[Tensor] = None,
                         key_weight: Optional[Tensor] = None) -> Tuple[Tensor, Tuple[Tensor, Tensor]]:
    """Quadratic masked form, for clarity: returns out [batch, heads, time, dv] and the final (S, z).

    The weight of key i for query t ≥ i is ``φ(q_t)·φ(k_i) · Π_{i<j≤t} f_j · c_i``.

    Args:
        phi_q, phi_k: [batch, heads, time, F]; v: [batch, heads, time, dv]
        log_forget: [batch, heads, time] (log f_t ≤ 0) or None (f = 1)
        key_weight: [batch, heads, time] (c_t ≥ 0) or None (c = 1)
    """
    batch, heads, time, _ = phi_q.shape
    phi_q, phi_k, v = phi_q.float(), phi_k.float(), v.float()
    if log_forget is None:
        log_forget = phi_q.new_zeros(batch, heads, time)
    if key_weight is None:
        key_weight = phi_q.new_ones(batch, heads, time)
    cumulative = log_forget.float().cumsum(-1)
    causal = torch.ones(time, time, dtype=torch.bool, device=phi_q.device).tril()
    # log Π_{i<j≤t} f_j = C_t - C_i, only for i ≤ t
    log_decay = (cumulative.unsqueeze(-1) - cumulative.unsqueeze(-2)).masked_fill(~causal, float("-inf"))
    weights = (phi_q @ phi_k.transpose(-1, -2)) * log_decay.exp() * key_weight.float().unsqueeze(-2)
    out = (weights @ v) / weights.sum(-1, keepdim=True).clamp_min(NORMALISER_FLOOR)
    # final state: weights of the last query without φ(q)
    final_weights = (log_decay[..., -1, :].exp() * key_weight.float()).unsqueeze(-1)  # [batch, heads, time, 1]
    S = (phi_k * final_weights).transpose(-1, -2) @ v
    z = (phi_k * final_weights).sum(-2)
    return out, (S, z)


def chunked_causal_rfa(phi_q: Tensor, phi_k: Tensor, v: Tensor, log_forget: Optional[Tensor] = None,
                       key_weight: Optional[Tensor] = None, initial_state: Optional[Tensor] = None,
                       chunk_size: int = CHUNK_SIZE) -> Tuple[Tensor, Tensor]:
    """Training form, linear in time and memory: out [batch, heads, time, dv], final state.

    The state is ``[batch, heads, F, dv + 1]`` (S with z as its last column, see
    :func:`split_state`). Inside a chunk the quadratic form runs with decays relative to the
    chunk start; the state carries everything before it (same arguments as
    :func:`reference_causal_rfa`).
    """
    batch, heads, time, features = phi_q.shape
    phi_q, phi_k = phi_q.float(), phi_k.float()
    values = _with_ones(v.float())
    if key_weight is not None:
        phi_k = phi_k * key_weight.float().unsqueeze(-1)
    state = initial_state if initial_state is not None else values.new_zeros(batch, heads, features, values.size(-1))
    outputs = []
    for start in range(0, time, chunk_size):
        end = min(start + chunk_size, time)
        q, k, val = phi_q[:, :, start:end], phi_k[:, :, start:end], values[:, :, start:end]
        causal = torch.ones(end - start, end - start, dtype=torch.bool, device=q.device).tril()
        if log_forget is None:
            scores = (q @ k.transpose(-1, -2)).masked_fill(~causal, 0.0)
            outputs.append(scores @ val + q @ state)
            state = state + k.transpose(-1, -2) @ val
        else:
            cumulative = log_forget[:, :, start:end].float().cumsum(-1)  # log Π f from the chunk start
            log_decay = (cumulative.unsqueeze(-1) - cumulative.unsqueeze(-2)).masked_fill(~causal, float("-inf"))
            scores = (q @ k.transpose(-1, -2)) * log_decay.exp()
            outputs.append(scores @ val + (q * cumulative.exp().unsqueeze(-1)) @ state)
            total = cumulative[..., -1:]  # [batch, heads, 1]
            decayed_keys = k * (total - cumulative).exp().unsqueeze(-1)
            state = state * total.exp().unsqueeze(-1) + decayed_keys.transpose(-1, -2) @ val
    return _normalised(torch.cat(outputs, dim=2)), state


def causal_rfa_step(phi_q: Tensor, phi_k: Tensor, v: Tensor, state: Optional[Tensor],
                    forget: Optional[Tensor] = None, key_weight: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """Incremental form: one token, constant work. Returns out [batch, heads, dv], new state.

    Args:
        phi_q, phi_k: [batch, heads, F]; v: [batch, heads, dv]
        state: [batch, heads, F, dv + 1] or None (empty prefix)
        forget: [batch, heads] f_t (None: 1); key_weight: [batch, heads] c_t (None: 1)
    """
    batch, heads, features = phi_q.shape
    values = _with_ones(v.float())
    phi_k = phi_k.float()
    if key_weight is not None:
        phi_k = phi_k * key_weight.float().unsqueeze(-1)
    # decoding (no autograd) updates the state in place: it is the step's largest tensor, and
    # copying it would cost as much as the update itself
    in_place = state is not None and state.is_contiguous() and not (torch.is_grad_enabled() and (
        state.requires_grad or phi_k.requires_grad or values.requires_grad or
        (forget is not None and forget.requires_grad)))
    if state is None:
        state = values.new_zeros(batch, heads, features, values.size(-1))
    elif forget is not None:
        gate = forget.float().view(batch, heads, 1, 1)
        state = state.mul_(gate) if in_place else state * gate
    # S_t = f_t S_{t-1} + c_t φ(k_t) [v_t, 1]ᵀ, as one batched outer product
    flat_state = state.reshape(batch * heads, features, -1)
    outer = (phi_k.reshape(batch * heads, features, 1), values.reshape(batch * heads, 1, -1))
    flat_state = flat_state.baddbmm_(*outer) if in_place else torch.baddbmm(flat_state, *outer)
    out = torch.bmm(phi_q.float().reshape(batch * heads, 1, features), flat_state)
    return _normalised(out.view(batch, heads, -1)), flat_state.view(batch, heads, features, -1)


def incremental_causal_rfa(phi_q: Tensor, phi_k: Tensor, v: Tensor, log_forget: Optional[Tensor] = None,
                           key_weight: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """:func:`causal_rfa_step` over a whole sequence (what beam search does, one call per token)."""
    state, outputs = None, []
    for t in range(phi_q.size(2)):
        forget = None if log_forget is None else log_forget[:, :, t].exp()
        weight = None if key_weight is None else key_weight[:, :, t]
        out, state = causal_rfa_step(phi_q[:, :, t], phi_k[:, :, t], v[:, :, t], state, forget, weight)
        outputs.append(out)
    return torch.stack(outputs, dim=2), state


# ---------------------------------------------------------------------------------------
# Cross RFA


def final_key_weights(log_forget: Optional[Tensor], key_weight: Optional[Tensor]) -> Optional[Tensor]:
    """[batch, heads, time]: weight of each key in the state after the last token,
    ``Π_{i<j≤T} f_j · c_i`` (the gated recurrence run to the end). None when all ones."""
    weights = key_weight.float() if key_weight is not None else None
    if log_forget is not None:
        log_forget = log_forget.float()
        # Σ_{j>i} log f_j: a reverse cumulative sum that excludes i itself (never positive)
        after = log_forget.flip(-1).cumsum(-1).flip(-1) - log_forget
        decay = after.exp()
        weights = decay if weights is None else weights * decay
    return weights


def cross_rfa_state(phi_k: Tensor, v: Tensor, key_weight: Optional[Tensor] = None) -> Tensor:
    """[batch, heads, F, dv + 1]: S = Σ_i w_i φ(k_i) v_iᵀ with z as the last column.

    Args:
        phi_k: [batch, heads, source, F]; v: [batch, heads, source, dv]
        key_weight: [batch, heads, source] (0 at padding; gate decays when cross-gated)
    """
    values = _with_ones(v.float())
    if key_weight is not None:
        # Σ_i φ(k_i) (w_i [v_i, 1])ᵀ: weighting the dv + 1 columns is cheaper than the F features
        values = values * key_weight.float().unsqueeze(-1)
    return phi_k.float().transpose(-1, -2) @ values


def cross_rfa_readout(phi_q: Tensor, state: Tensor) -> Tensor:
    """φ(q)·S / φ(q)·z: phi_q [batch, heads, time, F], state [batch, heads, F, dv + 1]
    → [batch, heads, time, dv]."""
    return _normalised(phi_q.float() @ state)


def norm_rescale_weights(k: Tensor, tau: Optional[Tensor], padding_mask: Optional[Tensor] = None) -> Tensor:
    """[batch, heads, source] key weights of the release's ``--norm-rescale`` (cross attention).

    The feature map sees only the direction k̂, so it estimates exp((q̂·k̂ - 1)/τ²) and loses
    the key's length, which softmax attention, exp(q·k/√d), uses: a longer key draws more
    attention. The release multiplies each key's features by ``exp(½ (|k|·d^-½ / τ)²)`` to put
    it back (the factor by which exp(-|x - y|²/2) falls short of exp(x·y) for x = k/(d^¼ τ)).

    To keep the factor finite in fp32 the largest exponent over the example's *real* source
    keys (per head) is subtracted: a factor common to every key of a row cancels in
    φ(q)·S / φ(q)·z, so neither the padding, nor the other rows of the batch, nor the beam
    change an example's output (the release took the maximum over padding too). The maximum
    is a constant for the gradient, as in the release.

    Args:
        k: [batch, heads, source, head_dim] keys before the feature map
        tau: [heads] temperatures, or None (τ = 1)
        padding_mask: [batch, source] bool, True at padding (weight 0 there)
    """
    head_dim = k.size(-1)
    scale = k.float().norm(dim=-1) / math.sqrt(head_dim)  # [batch, heads, source]
    if tau is not None:
        scale = scale / tau.float().clamp_min(MIN_TAU).view(-1, 1)
    exponent = 0.5 * scale.pow(2)
    if padding_mask is not None:
        exponent = exponent.masked_fill(padding_mask.bool().unsqueeze(1), float("-inf"))
    largest = exponent.max(dim=-1, keepdim=True).values.detach()
    return torch.exp(exponent - largest)


def reference_cross_rfa(phi_q: Tensor, phi_k: Tensor, v: Tensor, key_weight: Optional[Tensor] = None) -> Tensor:
    """Quadratic form of cross RFA, for clarity: [batch, heads, time, dv]."""
    weights = phi_q.float() @ phi_k.float().transpose(-1, -2)
    if key_weight is not None:
        weights = weights * key_weight.float().unsqueeze(-2)
    return (weights @ v.float()) / weights.sum(-1, keepdim=True).clamp_min(NORMALISER_FLOOR)


# ---------------------------------------------------------------------------------------
# Modules


class _RandomFeatureAttentionBase(nn.Module):
    """What causal and cross RFA share: projections, random matrices, τ, feature map, gate."""

    # the gate reads the query input (causal) or the encoder output (cross, ``kdim`` wide)
    gate_on_keys = False

    def __init__(self, embed_dim: int, num_heads: int, num_projections: int, seed: int, kdim: Optional[int] = None,
                 feature_map: str = "fourier", learned_tau: bool = False, gate: str = "none",
                 gate_bias_init: float = 0.0, use_gate: bool = False):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not divisible by {num_heads} heads")
        if feature_map not in FEATURE_MAPS:
            raise ValueError(f"unknown feature map {feature_map!r}; expected one of {FEATURE_MAPS}")
        if gate not in GATE_VARIANTS:
            raise ValueError(f"unknown gate {gate!r}; expected one of {GATE_VARIANTS}")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.kdim = kdim or embed_dim
        self.feature_map = feature_map
        self.features = feature_size(feature_map, num_projections)
        self.random_matrices = RandomMatrices(num_heads, num_projections, self.head_dim, seed)
        self.tau = nn.Parameter(torch.ones(num_heads)) if learned_tau else None
        self.gate_variant = gate if use_gate else "none"
        # w_f, b_f of §3.2: one gate per head, from the representation of the token before
        self.gate_proj = nn.Linear(self.kdim if self.gate_on_keys else embed_dim, num_heads) \
            if self.gate_variant != "none" else None
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        self.gate_bias_init = gate_bias_init
        # set by the decoder for one forward (fairseq's layer loop passes no token ids)
        self.sentence_starts: Optional[Tensor] = None

    def _reset_common(self):
        nn.init.xavier_uniform_(self.out_proj.weight)
        nn.init.constant_(self.out_proj.bias, 0.0)
        if self.gate_proj is not None:
            nn.init.xavier_uniform_(self.gate_proj.weight)
            nn.init.constant_(self.gate_proj.bias, self.gate_bias_init)

    def gate_logits(self, x: Tensor) -> Tensor:
        """[..., embed_dim] → [..., heads] fp32: w_f·e + b_f, in fp32 whatever the module's dtype."""
        weight, bias = self.gate_proj.weight, self.gate_proj.bias
        return F.linear(x.float(), weight.float(), bias.float())

    def features_of(self, x: Tensor, random_matrix: Tensor) -> Tensor:
        """[..., heads, time, head_dim] → [..., heads, time, F] fp32."""
        return feature_map_function(self.feature_map)(x, random_matrix, self.tau)

    def _require_sentence_starts(self, expected_shape) -> Tensor:
        starts = self.sentence_starts
        if starts is None:
            raise RuntimeError(f"{type(self).__name__} with gate {self.gate_variant!r} needs sentence starts: "
                               "use it inside RFATransformerDecoder, which provides them for every forward")
        if tuple(starts.shape) != tuple(expected_shape):
            raise RuntimeError(f"sentence starts of shape {tuple(starts.shape)}, expected {tuple(expected_shape)}")
        return starts

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
    """Decoder self-attention as causal RFA, optionally with the sentential gate (§3.1-3.2).

    Called like fairseq's ``MultiheadAttention`` by ``TransformerDecoderLayerBase``:
    ``forward(query=x, key=x, value=x, key_padding_mask, incremental_state, attn_mask)`` with
    x [time, batch, embed_dim]; causality is built in (``attn_mask``, the future mask, is
    implied). Incremental state per layer: ``state`` [batch, heads, F, dv + 1] (S and z),
    ``gate_logit`` [batch, heads] (logit of the last token, used when the next token starts a
    sentence), ``key_weight`` [batch, heads] (sgate-avg: the current sentence's weight).
    """

    def __init__(self, embed_dim: int, num_heads: int, num_projections: int, seed: int, feature_map: str = "fourier",
                 learned_tau: bool = False, gate: str = "none", gate_bias_init: float = 2.0,
                 chunk_size: int = CHUNK_SIZE):
        super().__init__(embed_dim, num_heads, num_projections, seed, feature_map=feature_map,
                         learned_tau=learned_tau, gate=gate, gate_bias_init=gate_bias_init, use_gate=gate != "none")
        self.chunk_size = chunk_size
        self.in_proj = nn.Linear(embed_dim, 3 * embed_dim)  # q, k, v in one matmul
        self.reset_parameters()

    def reset_parameters(self):
        # as fairseq's MultiheadAttention initialises its (then fused) q, k, v projections
        nn.init.xavier_uniform_(self.in_proj.weight, gain=1 / math.sqrt(2))
        nn.init.constant_(self.in_proj.bias, 0.0)
        self._reset_common()

    def forward(self, query: Tensor, key: Optional[Tensor] = None, value: Optional[Tensor] = None,
                key_padding_mask: Optional[Tensor] = None,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
                need_weights: bool = False, attn_mask: Optional[Tensor] = None, **unused) -> Tuple[Tensor, None]:
        """query [time, batch, embed_dim] → ([time, batch, embed_dim], None); RFA has no weights to return."""
        if incremental_state is not None:
            return self._step(query, key_padding_mask, incremental_state), None
        time, batch, _ = query.shape
        q, k, v = self._split_qkv(query)
        with torch.autocast(device_type=query.device.type, enabled=False):
            random_matrix = self.random_matrices()
            phi_q, phi_k = self.features_of(q, random_matrix), self.features_of(k, random_matrix)
            log_forget, key_weight = self._gates(query, key_padding_mask)
            out, _ = chunked_causal_rfa(phi_q, phi_k, v, log_forget, key_weight, chunk_size=self.chunk_size)
        return self.out_proj(self._merge_heads(out, v.dtype)), None

    def _split_qkv(self, query: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        time, batch, _ = query.shape
        qkv = self.in_proj(query).view(time, batch, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 1, 3, 0, 4).unbind(0)  # each [batch, heads, time, head_dim]
        return q, k, v

    def _gates(self, query: Tensor, key_padding_mask: Optional[Tensor]):
        """log_forget, key_weight [batch, heads, time] for the whole sequence."""
        time, batch, _ = query.shape
        if self.gate_variant == "none":
            if key_padding_mask is None or not key_padding_mask.any():
                return None, None
            return None, (~key_padding_mask.bool()).unsqueeze(1).float().expand(batch, self.num_heads, time)
        starts = self._require_sentence_starts((batch, time))
        logits = self.gate_logits(query).permute(1, 2, 0)  # [batch, heads, time]
        padding = key_padding_mask.bool() if key_padding_mask is not None else None
        return sentence_gates(logits, starts, self.gate_variant, padding)

    def _step(self, query: Tensor, key_padding_mask: Optional[Tensor], incremental_state) -> Tensor:
        """One token: query [1, batch, embed_dim] → [1, batch, embed_dim]."""
        if query.size(0) != 1:
            raise ValueError("incremental RFA takes one token per call")
        batch = query.size(1)
        buffer = self._get_input_buffer(incremental_state)
        qkv = self.in_proj(query[0]).view(batch, 3, self.num_heads, 1, self.head_dim)
        with torch.autocast(device_type=query.device.type, enabled=False):
            # decoding is inference: the fixed evaluation matrix, whatever the mode
            phi = self.features_of(qkv[:, :2], self.random_matrices.eval_matrix)  # [batch, 2, heads, 1, F]
            phi_q, phi_k = phi[:, 0, :, 0], phi[:, 1, :, 0]
            v = qkv[:, 2, :, 0].float()
            forget = key_weight = None
            if self.gate_variant != "none":
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
            if key_padding_mask is not None and key_padding_mask.any():
                keep = (~key_padding_mask[:, -1].bool()).float().unsqueeze(-1).expand(batch, self.num_heads)
                key_weight = keep if key_weight is None else key_weight * keep
                if forget is not None:
                    forget = torch.where(keep.bool(), forget, torch.ones_like(forget))
            out, buffer["state"] = causal_rfa_step(phi_q, phi_k, v, buffer.get("state"), forget, key_weight)
        self._set_input_buffer(incremental_state, buffer)
        return self.out_proj(out.to(qkv.dtype).reshape(1, batch, self.embed_dim))

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        """Beam search: rows of every state tensor follow ``new_order`` (over batch*beam).

        The state is the largest tensor of a decoding step and is gathered on every step: it
        is gathered into the buffer the previous step left free (``spare``), so decoding does
        not allocate (and page-fault) a fresh state per layer per token."""
        buffer = self._get_input_buffer(incremental_state)
        if buffer:
            spare = buffer.pop("spare", None)
            rows = new_order.size(0)
            for name, value in list(buffer.items()):
                if value is None:
                    continue
                if name != "state" or value.requires_grad:
                    buffer[name] = value.index_select(0, new_order)
                    continue
                # finished sentences only ever shrink the batch: the first rows of the spare do
                fits = spare is not None and spare.shape[0] >= rows and spare.shape[1:] == value.shape[1:] \
                    and spare.dtype == value.dtype
                buffer[name] = torch.index_select(value, 0, new_order, out=spare[:rows]) if fits \
                    else value.index_select(0, new_order)
                spare = value
            if spare is not None:
                buffer["spare"] = spare
            incremental_state = self._set_input_buffer(incremental_state, buffer)
        return incremental_state


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
    """

    gate_on_keys = True

    def __init__(self, embed_dim: int, num_heads: int, num_projections: int, seed: int, kdim: Optional[int] = None,
                 feature_map: str = "fourier", learned_tau: bool = False, gate: str = "none",
                 gate_bias_init: float = 2.0, cross_gate: bool = False, norm_rescale: bool = False):
        if cross_gate and gate == "none":
            raise ValueError("cross gating needs a gate variant (sgate or sgate-avg)")
        super().__init__(embed_dim, num_heads, num_projections, seed, kdim=kdim, feature_map=feature_map,
                         learned_tau=learned_tau, gate=gate, gate_bias_init=gate_bias_init, use_gate=cross_gate)
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
        source, batch, _ = key.shape
        kv = self.kv_proj(key).view(source, batch, 2, self.num_heads, self.head_dim)
        k, v = kv.permute(2, 1, 3, 0, 4).unbind(0)  # [batch, heads, source, head_dim]
        with torch.autocast(device_type=key.device.type, enabled=False):
            phi_k = self.features_of(k, random_matrix)
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
                    (~padding).unsqueeze(1).float().expand(batch, self.num_heads, source)
            if self.norm_rescale:
                rescale = norm_rescale_weights(k, self.tau, padding)
                key_weight = rescale if key_weight is None else key_weight * rescale
            return cross_rfa_state(phi_k, v, key_weight)

    def forward(self, query: Tensor, key: Optional[Tensor], value: Optional[Tensor] = None,
                key_padding_mask: Optional[Tensor] = None,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
                need_weights: bool = False, static_kv: bool = True, **unused) -> Tuple[Tensor, None]:
        """query [time, batch, embed_dim], key [source, batch, kdim] → ([time, batch, embed_dim], None)."""
        time, batch, _ = query.shape
        if incremental_state is None:
            random_matrix = self.random_matrices()
            state = self.source_state(key, key_padding_mask, random_matrix, self.sentence_starts)
        else:
            # decoding is inference: the fixed evaluation matrix, whatever the mode
            random_matrix = self.random_matrices.eval_matrix
            buffer = self._get_input_buffer(incremental_state)
            state = buffer.get("state")
            if state is None:
                if key is None:
                    raise ValueError("cross attention needs the encoder output on its first call")
                starts = self.sentence_starts
                if self.beam_size > 1:
                    # rows are [sentence, beam] with equal sources: one summary per sentence
                    if batch % self.beam_size:
                        raise ValueError(f"batch of {batch} rows is not [sentences x beam {self.beam_size}]")
                    key = key[:, ::self.beam_size]
                    key_padding_mask = key_padding_mask[::self.beam_size] if key_padding_mask is not None else None
                    starts = starts[::self.beam_size] if starts is not None else None
                buffer["state"] = state = self.source_state(key, key_padding_mask, random_matrix, starts)
                self._set_input_buffer(incremental_state, buffer)
        rows = buffer.get("rows") if incremental_state is not None else None
        return self.out_proj(self._read(query, state, random_matrix, rows)), None

    def _read(self, query: Tensor, state: Tensor, random_matrix: Tensor, rows: Optional[Tensor] = None) -> Tensor:
        """query [time, batch, embed_dim], state [stored, heads, F, dv + 1] → [time, batch, embed_dim].

        The batch holds ``batch // sources`` consecutive rows (beams) per source; source i reads
        ``state[rows[i]]`` (``rows`` None: state[i])."""
        time, batch, _ = query.shape
        sources = state.size(0) if rows is None else rows.numel()
        q = self.q_proj(query)
        with torch.autocast(device_type=query.device.type, enabled=False):
            # [sources, heads, beams*time, head_dim]: the beams of a source read the same state
            heads_q = q.view(time, sources, batch // sources, self.num_heads, self.head_dim)
            heads_q = heads_q.permute(1, 3, 2, 0, 4).reshape(sources, self.num_heads, -1, self.head_dim)
            phi_q = self.features_of(heads_q, random_matrix)
            if rows is None:
                out = cross_rfa_readout(phi_q, state)
            else:
                # queries of finished sentences are zero (their output, 0 / floor, is dropped)
                stored = phi_q.new_zeros((state.size(0),) + phi_q.shape[1:]).index_copy_(0, rows, phi_q)
                out = cross_rfa_readout(stored, state).index_select(0, rows)
            out = out.view(sources, self.num_heads, batch // sources, time, self.head_dim)
            out = out.permute(3, 0, 2, 1, 4).reshape(time, batch, self.embed_dim)
        return out.to(q.dtype)

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        """Reorder per source sentence: nothing to do unless sentences left the batch.

        When sentences finish, their summaries are not copied away at once: ``rows`` records
        which stored summary each remaining sentence reads, and the state is compacted only once
        a quarter of it is unused. Gathering the state on every step a sentence finishes would
        copy it nearly every step (it is [sentences, heads, F, dv + 1], far larger than a short
        source's keys and values); this way the copies stay a bounded multiple of one state and
        each step reads at most 4/3 of the summaries it needs."""
        buffer = self._get_input_buffer(incremental_state)
        state = buffer.get("state")
        if state is None:
            return incremental_state
        rows = buffer.get("rows")
        active = state.size(0) if rows is None else rows.numel()
        if active * self.beam_size == new_order.size(0):
            return incremental_state  # beams only moved within their sentence
        order = new_order.view(-1, self.beam_size)[:, 0] // self.beam_size if self.beam_size > 1 else new_order
        rows = order if rows is None else rows.index_select(0, order)
        if 4 * rows.numel() <= 3 * state.size(0):
            buffer["state"], rows = state.index_select(0, rows), None
        buffer["rows"] = rows
        return self._set_input_buffer(incremental_state, buffer)
