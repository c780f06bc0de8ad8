import argparse
import json
import os

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

    from conftest import process_group
    from fairseq.models import distributed_fairseq_model

    from rfa_doc_mt.compat import CPUDistributedDataParallel

    assert distributed_fairseq_model.DistributedDataParallel is CPUDistributedDataParallel
    with process_group(tmp_path), warnings.catch_warnings():
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
            del ddp  # before the group is released


def test_the_process_group_is_released_only_once_nothing_holds_it(tmp_path):
    """compat.release_process_group collects what holds the group and destroys it, but leaves it
    (and says so) while a DDP module is alive: destroyed under a DDP, the group's teardown can
    wait for good when the DDP is freed (pytorch/pytorch#75097)."""
    import torch.distributed as dist
    from fairseq.distributed import utils as distributed_utils

    from rfa_doc_mt.compat import CPUDistributedDataParallel, release_process_group

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        distributed_utils.get_global_group()  # fairseq's group of all workers, which it keeps
        ddp = CPUDistributedDataParallel(module=torch.nn.Linear(2, 2))
        cycle = [ddp]
        cycle.append(cycle)  # garbage only a collection frees
        assert not release_process_group() and dist.is_initialized()  # alive: the group stays
        del ddp, cycle
        assert release_process_group() and not dist.is_initialized()  # collected, then destroyed
        assert not hasattr(distributed_utils.get_global_group, "_global_group")
        assert not release_process_group()  # nothing left to release
    finally:
        if dist.is_initialized():
            release_process_group()


DEFERRAL_PROBE = r"""
import sys
import rfa_doc_mt.compat  # before fairseq, as this project's commands import it
print("after import:", sorted(name for name in ("sklearn", "sklearn.metrics", "scipy.stats") if name in sys.modules))
from fairseq.criterions import sentence_prediction
from fairseq.tasks import audio_classification
print("f1:", sentence_prediction.f1_score([0, 1, 1], [0, 1, 0]))
print("pearson:", round(float(sentence_prediction.pearsonr([1, 2, 3], [1, 2, 4])[0]), 4))
print("roc:", [float(x) for x in audio_classification.sklearn_metrics.roc_curve([0, 1], [0.2, 0.8])[1]])
import sklearn.metrics
import scipy.stats
from sklearn.base import BaseEstimator
print("real:", type(sklearn.metrics).__name__, type(scipy.stats).__name__, sklearn.metrics.f1_score.__module__,
      isinstance(BaseEstimator, type))
"""


def test_fairseq_is_imported_without_sklearn_and_its_users_still_work():
    """fairseq's import pulls in scikit-learn and scipy.stats for modules no run here calls:
    imported after this plugin's compat module, they stay unimported; fairseq's callers of them
    still get the real functions on first use, and a later import gets the real modules."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", DEFERRAL_PROBE], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    assert lines["after import"] == "[]"
    assert float(lines["f1"]) == pytest.approx(2 / 3)  # precision 1, recall 1/2
    assert float(lines["pearson"]) == pytest.approx(0.9820, abs=1e-4)  # r of (1,2,3) and (1,2,4)
    assert lines["roc"] == "[0.0, 1.0, 1.0]"  # true positive rate at thresholds inf, 0.8, 0.2
    assert lines["real"] == "module module sklearn.metrics._classification True"


def test_fairseq_command_runs_only_fairseqs_commands(monkeypatch, capsys):
    """``python -m rfa_doc_mt.fairseq_command`` (how train.sh and decode.sh start fairseq): a
    command it does not know is refused with its usage; fairseq's own are run (their --help, with
    this plugin's task: argparse refuses a task fairseq does not know)."""
    import sys

    from rfa_doc_mt.fairseq_command import main

    monkeypatch.setattr(sys, "argv", list(sys.argv))  # main sets the command's own
    assert main(["fairseq-eval-lm"]) == 2
    assert "usage: python -m rfa_doc_mt.fairseq_command {fairseq-train," in capsys.readouterr().err
    with pytest.raises(SystemExit) as shown:  # what data.prepare binarizes with
        main(["fairseq-preprocess", "--help"])
    assert shown.value.code == 0 and capsys.readouterr().out.startswith("usage: fairseq-preprocess")
    with pytest.raises(SystemExit) as shown:
        main(["fairseq-generate", "--user-dir", os.path.dirname(rfa_doc_mt.__file__), "--task", "doc_translation",
              "--help"])
    assert shown.value.code == 0
    printed = capsys.readouterr().out
    assert printed.startswith("usage: fairseq-generate") and "--beam" in printed


def test_fairseq_train_records_its_peak_memory_in_the_save_dir(tmp_path):
    from rfa_doc_mt.fairseq_command import save_dir, write_resources

    assert save_dir(["data", "--save-dir", "runs/a", "--max-update", "3"]) == "runs/a"
    assert save_dir(["data", "--save-dir=runs/b"]) == "runs/b" and save_dir(["data"]) == "checkpoints"
    assert save_dir(["data", "--save-dir", "runs/a", "--save-dir", "runs/c"]) == "runs/c"  # the last one, as argparse
    held = bytearray(64 * 1024 * 1024)  # 64 MB resident in this process: its peak is at least that
    held[::4096] = b"x" * len(held[::4096])
    write_resources(["data", "--save-dir", str(tmp_path)], 12.5)
    resources = json.loads((tmp_path / "train.resources.json").read_text())
    assert resources["peak_resident_mb"] >= resources["this_process_mb"] > 64 and resources["seconds"] == 12.5
    write_resources(["data", "--save-dir", str(tmp_path / "missing")], 1.0)  # no folder: nothing written
    assert not (tmp_path / "missing").exists()
    # a start resumed from a checkpoint adds to the earlier starts: the highest peak, the seconds summed
    (tmp_path / "train.resources.json").write_text(json.dumps({**resources, "peak_resident_mb": 1e6}))
    write_resources(["data", "--save-dir", str(tmp_path)], 2.5, resumed=True)
    combined = json.loads((tmp_path / "train.resources.json").read_text())
    assert combined["peak_resident_mb"] == 1e6 and combined["seconds"] == 15.0
    write_resources(["data", "--save-dir", str(tmp_path)], 2.5)  # a fresh start: its own figures
    assert json.loads((tmp_path / "train.resources.json").read_text())["seconds"] == 2.5
