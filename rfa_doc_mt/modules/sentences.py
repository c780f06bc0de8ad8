"""Sentence positions inside a window, from its separator tokens.

One convention for every model (RFA's sentential gate, long-short term masks, ...): a token's
sentence id is the number of separators *before* it. So a separator belongs to the sentence
it closes, EOS to the last sentence, and right padding to the last sentence too (padded
positions are masked as keys elsewhere; giving them a real id means no query row is ever
fully masked). For decoder inputs (``prev_output_tokens``, which start with EOS) the leading
EOS belongs to the first sentence.
"""

import torch


def sentence_ids(tokens: torch.Tensor, separator: int) -> torch.Tensor:
    """[batch, time] token ids -> [batch, time] sentence index (0 for the first sentence)."""
    is_separator = tokens.eq(separator).long()
    return is_separator.cumsum(-1) - is_separator


def sentence_starts(tokens: torch.Tensor, separator: int) -> torch.Tensor:
    """[batch, time] bool: the token right after a separator (it starts a new sentence)."""
    starts = torch.zeros_like(tokens, dtype=torch.bool)
    starts[..., 1:] = tokens[..., :-1].eq(separator)
    return starts


def sentence_ids_from_starts(starts: torch.Tensor) -> torch.Tensor:
    """[batch, time] bool sentence starts (:func:`sentence_starts`) -> the ids :func:`sentence_ids`
    gives the same tokens: the starts up to a token are the separators before it."""
    return starts.long().cumsum(-1)


def same_sentence_mask(query_ids: torch.Tensor, key_ids: torch.Tensor) -> torch.Tensor:
    """[batch, time_q], [batch, time_k] -> [batch, time_q, time_k] bool: same sentence."""
    return query_ids.unsqueeze(-1).eq(key_ids.unsqueeze(-2))
