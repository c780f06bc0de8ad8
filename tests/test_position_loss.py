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


def test_bank_matrices_are_named_by_indices_and_ranges():
    assert position_loss.bank_indices("5") == [5]
    assert position_loss.bank_indices("0,3,7-9") == [0, 3, 7, 8, 9]
    assert position_loss.bank_indices("0-15") == list(range(16))
    for bad in ("3-1", "a", "1,1", "2-", "-2", ""):
        with pytest.raises(ValueError):
            position_loss.bank_indices(bad)


def test_the_evaluation_matrix_named_as_a_bank_index_changes_nothing_and_another_does():
    dictionary, separator = toy_dictionary(20)
    windows = Windows(separator)
    pad = dictionary.pad()

    def read(indices, attention="both"):
        model = build_model("rfa_doc_transformer_tiny", dictionary_task(dictionary, separator), seed=1).eval()
        changed = position_loss.use_bank_matrices(model, indices, attention) if indices is not None else 0
        return changed, position_loss.window_loss(model, windows, separator, pad)

    _, own = read(None)
    changed, first = read([0])
    assert changed == 2 * 2 and first == own  # two decoder layers, causal and cross: bank 0 is the same matrix
    assert read([0], "causal")[0] == 2
    _, other = read([4], "cross")
    assert any(abs(other[place]["bits"] - own[place]["bits"]) > 1e-4 for place in own)
    transformer = build_model("doc_transformer_tiny", dictionary_task(dictionary, separator), seed=1)
    assert position_loss.use_bank_matrices(transformer, [3]) == 0
