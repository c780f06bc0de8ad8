"""The gates of causal RFA as ``log_forget`` and ``key_weight``, and the weight each key keeps
after the gated recurrence has run to the end.

From the sentence to the token to the feature:

* ``sgate``, ``sgate-avg``: Wu et al. 2022, §3.2, a gate per head at sentence starts only
  (:func:`sentence_gates`);
* ``token``: Peng et al. (2021) §3.3, a gate per head at every token (:func:`token_gates`);
* ``feature``: Yang et al. (2023), GLA, a decay per feature of the random-feature state at
  every token (:class:`LowRankFeatureGate`, :func:`feature_gates`), ``log_forget`` then
  ``[batch, heads, time, F]``.
"""

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

GATE_VARIANTS = ("none", "sgate", "sgate-avg", "token", "feature")
# the gates applied at sentence starts only, from the token before (they need the sentence starts)
SENTENCE_GATES = ("sgate", "sgate-avg")
# GLA's gate: rank of x W_1 W_2 and temperature τ of σ(·)^{1/τ} (Yang et al. 2024 §4.4)
FEATURE_GATE_RANK = 16
FEATURE_GATE_TEMPERATURE = 16.0


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



def token_gates(gate_logits: Tensor, padding_mask: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """Gated RFA of Peng et al. (2021) §3.3: per-token ``log_forget`` and ``key_weight``
    ([batch, heads, time] fp32)::

        g_t = σ(w_g·x_t + b_g),   S_t = g_t S_{t-1} + (1 - g_t) φ(k_t) [v_t, 1]ᵀ

    one scalar gate per head at every token, from x_t, the token's own input representation
    (the input its query, key and value are projected from; the sentential gate reads the token
    before instead). The key weight 1 - g_t makes every state a weighted average of its past and
    the new token, as in their paper. ``log g = log σ(x)`` and ``1 - g = σ(-x)``, each finite and
    accurate for every finite logit (1 - σ(x) would cancel to 0 above x ≈ 17).

    Args:
        gate_logits: [batch, heads, time]: ``w_g·x_t + b_g`` of each token t
        padding_mask: [batch, time] bool, True at padding (g = 1, key weight 0 there)
    """
    logits = gate_logits.float()
    log_forget, key_weight = F.logsigmoid(logits), torch.sigmoid(-logits)
    if padding_mask is not None:
        padding = padding_mask.unsqueeze(1)
        log_forget = log_forget.masked_fill(padding, 0.0)
        key_weight = key_weight.masked_fill(padding, 0.0)
    return log_forget, key_weight


def feature_gates(gate_logits: Tensor, temperature: float = FEATURE_GATE_TEMPERATURE,
                  padding_mask: Optional[Tensor] = None) -> Tuple[Tensor, Optional[Tensor]]:
    """GLA's data-dependent decay per feature (Yang et al. 2024 §4.4) on RFA's state:
    ``log_forget`` [batch, heads, time, F] and ``key_weight`` [batch, heads, time] (None without
    padding)::

        α_t = σ(x_t W_1 W_2 + b)^{1/τ},   S_t = Diag(α_t) S_{t-1} + φ(k_t) [v_t, 1]ᵀ

    (S with z as its last column, [F, dv + 1]: α_t decays the F rows, S and z alike). No key
    weight (1 - α_t), as GLA applies none: RFA divides by φ(q)·z, so the scale of the keys matters
    only through the normaliser's floor, and without the weight z_t holds φ(k_t) at full weight,
    ``φ(q)·z`` stays as large as in ungated RFA (the weight would shrink it by 1 - α ≈ 0.04 at
    GLA's initial α ≈ 0.96, under the floor). ``log α = log σ(x) / τ``: finite for every finite
    logit, never positive.

    Args:
        gate_logits: [batch, heads, time, F]: ``x_t W_1 W_2 + b``
        temperature: τ (GLA: 16; a larger τ keeps α closer to 1)
        padding_mask: [batch, time] bool, True at padding (α = 1, key weight 0 there)
    """
    log_forget = F.logsigmoid(gate_logits.float()) / temperature
    key_weight = None
    if padding_mask is not None:
        padding = padding_mask.unsqueeze(1)
        log_forget = log_forget.masked_fill(padding.unsqueeze(-1), 0.0)
        key_weight = (~padding).float().expand(log_forget.shape[:3])
    return log_forget, key_weight


class LowRankFeatureGate(nn.Module):
    """The logits of GLA's gate, ``x W_1 W_2 + b`` (Yang et al. 2024 §4.4: rank 16), one per head
    and feature of the random-feature state: [..., embed_dim] → [..., heads, F] fp32.

    Initialised as GLA's layer is: both matrices Xavier-uniform with gain 2^-2.5, the bias
    ``bias_init`` (GLA: 0, so α = 2^{-1/τ} ≈ 0.958 at τ = 16: a time constant 1 / (1 - α) of 24 tokens)."""

    def __init__(self, embed_dim: int, heads: int, features: int, rank: int = FEATURE_GATE_RANK,
                 bias_init: float = 0.0):
        super().__init__()
        self.heads, self.features, self.bias_init = heads, features, bias_init
        self.down = nn.Linear(embed_dim, rank, bias=False)
        self.up = nn.Linear(rank, heads * features)
        self.reset_parameters()

    def reset_parameters(self):
        for linear in (self.down, self.up):
            nn.init.xavier_uniform_(linear.weight, gain=2 ** -2.5)
        nn.init.constant_(self.up.bias, self.bias_init)

    def forward(self, x: Tensor) -> Tensor:
        """fp32 whatever the module's dtype, as every gate of RFA."""
        low_rank = F.linear(x.float(), self.down.weight.float())
        logits = F.linear(low_rank, self.up.weight.float(), self.up.bias.float())
        return logits.view(*x.shape[:-1], self.heads, self.features)

