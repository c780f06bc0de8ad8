"""The loss by the place of a target sentence in its window (rfa_doc_mt.scoring.position_loss):
each token counted once, with the sentence its separator closes, and the places' losses adding up
to the model's own loss over the windows."""

import math

import pytest
import torch
from conftest import build_model
from test_attention_share import Windows

from rfa_doc_mt.models.build import dictionary_task, toy_dictionary
from rfa_doc_mt.scoring import position_loss

pytestmark = pytest.mark.usefixtures("one_thread")
SEPARATOR, PAD = 3, 1


def test_each_token_counts_with_the_sentence_its_separator_closes():
    target = torch.tensor([[5, SEPARATOR, 6, 7, 2], [8, 2, PAD, PAD, PAD]])
    # the reference token's log-probability: -(1 + its column) in the first row, -10 in the second
    lprobs = torch.full((2, 5, 12), -50.0)
    for column in range(5):
        lprobs[0, column, target[0, column]] = -(1.0 + column)
        lprobs[1, column, target[1, column]] = -10.0
    found = position_loss.loss_by_place(lprobs, target, SEPARATOR, PAD)
    # place 1: 5 and the separator of row 0, 8 and the end of row 1; place 2: 6, 7 and the end of row 0
    assert found == {1: [1.0 + 2.0 + 10.0 + 10.0, 4], 2: [3.0 + 4.0 + 5.0, 3]}


def test_the_places_losses_add_up_to_the_models_loss_over_the_windows():
    dictionary, separator = toy_dictionary(20)
    model = build_model("doc_transformer_tiny", dictionary_task(dictionary, separator), seed=1).eval()
    windows = Windows(separator)
    pad = dictionary.pad()
    with torch.no_grad():
        found = position_loss.window_loss(model, windows, separator, pad, batch_size=3)
        sample = windows.collater([windows[i] for i in range(len(windows))])
        lprobs = model.get_normalized_probs(model(**sample["net_input"]), log_probs=True)
    whole = torch.nn.functional.nll_loss(lprobs.transpose(1, 2), sample["target"], ignore_index=pad,
                                         reduction="sum").item()
    tokens = int(sample["target"].ne(pad).sum())
    # six windows of two target sentences (4 words and the separator; 3 or 4 words and the end) and
    # one of one sentence (a word and the end)
    assert {place: cell["tokens"] for place, cell in found.items()} == {1: 6 * 5 + 2, 2: 3 * 4 + 3 * 5}
    assert sum(cell["tokens"] for cell in found.values()) == tokens
    summed = sum(cell["bits"] * cell["tokens"] for cell in found.values()) * math.log(2)
    # fp32 log-probabilities of magnitude about ln 24, summed over 59 tokens in another order
    assert summed == pytest.approx(whole, rel=59 * 2 ** -23)
    first_two = position_loss.window_loss(model, windows, separator, pad, windows=2)
    assert {place: cell["tokens"] for place, cell in first_two.items()} == {1: 2 * 5, 2: 4 + 5}


def test_the_table_gives_each_checkpoints_difference_from_the_first():
    results = [{"name": "a", "by_place": {1: {"tokens": 10, "bits": 2.0}, 2: {"tokens": 8, "bits": 3.0}}},
               {"name": "b", "by_place": {1: {"tokens": 10, "bits": 2.5}, 2: {"tokens": 8, "bits": 2.75}}}]
    lines = position_loss.format_table(results).splitlines()
    assert lines[0] == "| place in window | tokens | bits/token: a | bits/token: b | Δ b |"
    assert lines[2:] == ["| 1 | 10 | 2.000 | 2.500 | +0.500 |", "| 2 | 8 | 3.000 | 2.750 | -0.250 |"]
