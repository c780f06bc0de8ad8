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


def test_ddp_gets_fairseqs_buffer_option_without_the_deprecated_argument(tmp_path):
    """fairseq constructs DDP with ``broadcast_buffers`` (torch 2.13 deprecates it with a FutureWarning
    in every worker); compat passes the value as ``forward_sync_buffers`` and drops a CPU module's
    device ids."""
    import warnings

    import torch.distributed as dist
    from fairseq.models import distributed_fairseq_model

    from rfa_doc_mt.compat import CPUDistributedDataParallel

    assert distributed_fairseq_model.DistributedDataParallel is CPUDistributedDataParallel
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", FutureWarning)
            for value in (False, True):
                module = torch.nn.Linear(2, 2)
                module.register_buffer("table", torch.arange(2.0))
                # as fairseq's distributed_fairseq_model calls it for --ddp-backend pytorch_ddp
                ddp = CPUDistributedDataParallel(module=module, device_ids=[0], output_device=0,
                                                 broadcast_buffers=value, bucket_cap_mb=25,
                                                 find_unused_parameters=False)
                assert ddp.broadcast_buffers is value and ddp.device_ids is None
                assert ddp(torch.ones(1, 2)).shape == (1, 2)
    finally:
        dist.destroy_process_group()
