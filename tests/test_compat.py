import argparse

import numpy as np
import pytest
import torch
from fairseq import checkpoint_utils
from fairseq.data import data_utils

import rfa_doc_mt  # noqa: F401  (applies rfa_doc_mt.compat)


def test_fairseq_checkpoints_load_without_environment_variables(tmp_path):
    # fairseq checkpoints pickle their configs; torch >= 2.6 refuses those with weights_only=True
    path = tmp_path / "checkpoint.pt"
    torch.save({"args": argparse.Namespace(arch="doc_transformer_tiny"), "model": {"w": torch.ones(2)}}, path)
    with pytest.raises(Exception):
        torch.load(path)  # torch itself keeps its safe default for every other caller
    state = checkpoint_utils.torch.load(path, map_location="cpu")  # what fairseq's loader calls
    assert state["args"].arch == "doc_transformer_tiny"
    assert state["model"]["w"].tolist() == [1.0, 1.0]


def test_batch_by_size_keeps_the_last_partial_batch():
    indices = np.arange(57, dtype=np.int64)
    batches = data_utils.batch_by_size(indices, num_tokens_fn=lambda i: 5, num_tokens_vec=np.full(57, 5),
                                       max_sentences=16, required_batch_size_multiple=8)
    assert sorted(np.concatenate(batches).tolist()) == list(range(57))
