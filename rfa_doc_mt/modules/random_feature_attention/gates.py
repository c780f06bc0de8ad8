"""The sentential gates of causal RFA (paper 000 §3.2) as per-token ``log_forget`` and
``key_weight``, and the weight each key keeps after the gated recurrence has run to the end."""

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

GATE_VARIANTS = ("none", "sgate", "sgate-avg")


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

