import numpy as np
import pytest
import torch

from rfa_doc_mt.data.io import DataError, Document
from rfa_doc_mt.data.windows import (
    DocumentWindowDataset,
    build_window_index,
    current_sentence_mask,
    document_ordered_batches,
    join_window,
    last_sentence,
)
from rfa_doc_mt.tasks.doc_translation import keep_last_sentence

PAD, EOS, SEP = 1, 2, 3


class Sentences(list):
    """A list of token tensors with the ``sizes`` attribute of fairseq's indexed datasets."""

    @property
    def sizes(self):
        return np.array([len(s) for s in self])


def sentence(*tokens):
    return torch.tensor(list(tokens) + [EOS])


def make_dataset(documents, context_size, **kwargs):
    total = sum(d.num_sentences for d in documents)
    # sentence k is [10 + k] * (k % 3 + 1): distinct, lengths 2..4 with EOS
    source = Sentences(sentence(*([10 + k] * (k % 3 + 1))) for k in range(total))
    target = Sentences(sentence(*([100 + k] * (k % 2 + 1))) for k in range(total))
    return DocumentWindowDataset(source, target, documents, context_size, SEP, SEP, PAD, EOS, **kwargs)


DOCS = [Document("a", 3), Document("b", 1), Document("c", 4)]


def test_sliding_windows_are_shorter_at_document_starts():
    index = build_window_index(DOCS, context_size=2)
    assert index.current_sentence.tolist() == list(range(8))
    assert index.first_sentence.tolist() == [0, 0, 0, 3, 4, 4, 4, 5]
    assert index.document.tolist() == [0, 0, 0, 1, 2, 2, 2, 2]
    assert index.position.tolist() == [0, 1, 2, 0, 0, 1, 2, 3]


def test_fixed_window_mode_gives_one_window_per_document():
    index = build_window_index(DOCS, context_size=1, fixed_window=True)
    assert index.current_sentence.tolist() == [2, 3, 7]
    assert index.first_sentence.tolist() == [1, 3, 6]


def test_window_tokens_join_sentences_with_the_separator():
    dataset = make_dataset(DOCS, context_size=2)
    item = dataset[2]  # sentences 0, 1, 2 of document a
    assert item["source"].tolist() == [10, SEP, 11, 11, SEP, 12, 12, 12, EOS]
    assert item["target"].tolist() == [100, SEP, 101, 101, SEP, 102, EOS]
    assert dataset[3]["source"].tolist() == [13, EOS]  # a one-sentence document: no context
    assert dataset.source_sizes.tolist() == [len(dataset[i]["source"]) for i in range(len(dataset))]
    assert dataset.target_sizes.tolist() == [len(dataset[i]["target"]) for i in range(len(dataset))]


def test_collater_supervises_window_or_current_sentence():
    window = make_dataset(DOCS, context_size=2).collater([make_dataset(DOCS, 2)[2]])
    current = make_dataset(DOCS, context_size=2, supervise_window=False).collater([make_dataset(DOCS, 2)[2]])
    assert window["target"][0].tolist() == [100, SEP, 101, 101, SEP, 102, EOS]
    assert current["target"][0].tolist() == [PAD] * 5 + [102, EOS]
    # the decoder input is the whole window either way
    assert current["net_input"]["prev_output_tokens"][0].tolist() == [EOS, 100, SEP, 101, 101, SEP, 102]
    assert window["ntokens"] == 7 and current["ntokens"] == 2
    assert current["window"]["first_sentence"].tolist() == [0]


def test_current_sentence_mask_and_last_sentence():
    tokens = torch.tensor([[5, SEP, 6, 7, SEP, 8, EOS], [9, 9, EOS, PAD, PAD, PAD, PAD]])
    assert current_sentence_mask(tokens, SEP).tolist() == [
        [False, False, False, False, False, True, True], [True] * 7]
    assert last_sentence(tokens[0], SEP) == slice(5, 7)
    assert last_sentence(tokens[1, :3], SEP) == slice(0, 3)


def test_keep_last_sentence_cuts_tokens_and_scores():
    hypothesis = {"tokens": torch.tensor([5, SEP, 6, 7, SEP, 8, EOS]),
                  "positional_scores": torch.arange(7.0), "attention": torch.zeros(4, 7)}
    keep_last_sentence(hypothesis, SEP)
    assert hypothesis["tokens"].tolist() == [8, EOS]
    assert hypothesis["positional_scores"].tolist() == [5.0, 6.0]
    assert hypothesis["attention"].shape == (4, 2)


def test_join_window_requires_eos():
    with pytest.raises(ValueError):
        join_window([torch.tensor([4, 5])], SEP, EOS)


def test_document_ordered_batches_keep_sentence_order_within_documents():
    documents = [Document(str(d), n) for d, n in enumerate([3, 1, 4, 2, 5])]
    index = build_window_index(documents, context_size=1)
    batches = document_ordered_batches(index, np.arange(len(index)), np.full(len(index), 5), None, 2)
    seen = set()
    for batch in batches:
        for window in batch:
            if index.position[window] > 0:
                assert window - 1 in seen, "a sentence came before its predecessor was decoded"
        # a batch never holds two sentences of one document
        assert len(set(index.document[batch])) == len(batch) <= 2
        seen.update(batch.tolist())
    assert sorted(seen) == list(range(len(index)))


def test_position_limit_names_document_and_sentence():
    dataset = make_dataset(DOCS, context_size=3)
    with pytest.raises(DataError, match=r"test\.docs: the source window of document 'c' \(document 3\), "
                                        r"sentence 4 has 12 tokens"):
        dataset.check_positions(9, 100, "test.docs")
    dataset.check_positions(100, 100, "test.docs")
