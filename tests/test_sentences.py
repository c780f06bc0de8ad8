import torch

from rfa_doc_mt.modules.sentences import (
    same_sentence_mask,
    sentence_ids,
    sentence_starts,
)

PAD, EOS, SEP = 1, 2, 3


def test_sentence_ids_count_separators_before_each_token():
    tokens = torch.tensor([[7, 8, SEP, 9, SEP, 10, EOS, PAD],
                           [EOS, 7, SEP, 8, 9, PAD, PAD, PAD]])
    assert sentence_ids(tokens, SEP).tolist() == [[0, 0, 0, 1, 1, 2, 2, 2],
                                                  [0, 0, 0, 1, 1, 1, 1, 1]]
    assert sentence_starts(tokens, SEP).tolist() == [
        [False, False, False, True, False, True, False, False],
        [False, False, False, True, False, False, False, False]]


def test_same_sentence_mask_never_leaves_a_row_empty():
    tokens = torch.tensor([[7, SEP, SEP, 9, EOS, PAD]])
    ids = sentence_ids(tokens, SEP)
    mask = same_sentence_mask(ids, ids)
    assert mask.diagonal(dim1=-2, dim2=-1).all()
    assert mask[0, 3].tolist() == [False, False, False, True, True, True]
