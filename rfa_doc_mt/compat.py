"""The one place that adapts fairseq 0.12.3.1 (``fairseq-fixed``) to the torch it runs on.

Six adaptations, all small:

1. Checkpoint loading: torch >= 2.6 defaults ``torch.load`` to ``weights_only=True``, which
refuses fairseq checkpoints (they pickle argparse/omegaconf configs). fairseq's
``checkpoint_utils`` module, and its ``distributed.utils`` (where a resumed multi-worker run
receives the checkpoint rank 0 loaded), get a view of torch whose ``load`` defaults to
``weights_only=False``; torch itself is untouched for every other caller. A fairseq
checkpoint is a pickle: load only checkpoints you trust, as with any fairseq release.

2. Batching: fairseq's main branch ``data_utils.batch_by_size`` drops the last batch when its
   size is not a multiple of ``--required-batch-size-multiple`` (default 8). For
   ``fairseq-generate`` and validation that silently loses sentences (one test sentence
   went missing from a decoded document). The wrapper keeps that batch.

3. Distributed training on CPU (``--distributed-world-size N`` without CUDA, or with ``--cpu``):
   fairseq's launcher assumes one process per GPU. It asserts ``world size <= GPU count``,
   computes the device as ``rank % torch.cuda.device_count()`` (a division by zero on a CPU
   machine), spawns ``min(GPU count, world size)`` processes and defaults to the NCCL backend;
   its DDP wrapper passes ``device_ids=[device_id]``, which torch refuses for a CPU module.
   On CPU only, ``call_main`` selects ``gloo`` (when the backend is the default ``nccl``), a
   ``tcp://localhost`` rendezvous on a free port (or ``env://`` under ``torchrun``) and spawns
   one process per worker on this host; each then runs fairseq's own ``distributed_main``, and
   DDP gets ``device_ids=None`` for CPU modules. With CUDA (and no ``--cpu``) both are fairseq's
   unchanged: NCCL, one process per GPU. Every CPU worker (spawned, or torchrun's) ends by
   releasing its process group: the garbage that holds it (the trainer's DDP) is collected first,
   then the group is destroyed (a group destroyed while a DDP still held it hung for good when the
   DDP was freed). A spawned worker that fails or is killed ends the others with an error that
   says how each ended, and a worker stuck after the others ended well is ended after a grace.

4. DDP's buffer option: fairseq passes ``broadcast_buffers`` (default False), which torch 2.13
   deprecates (a FutureWarning in every worker) in favour of ``forward_sync_buffers``; DDP gets
   the replacement, with fairseq's value, where torch has it. One difference: the replacement
   leaves DDP's start-up broadcast of the buffers on. Every buffer of these models (RFA's random
   matrices and their seed, LSH rotations, memory slot positions, fairseq's sinusoidal position
   tables and version markers) is built from a fixed seed or formula and is identical on every
   worker, so that broadcast copies equal values.

5. Start-up: fairseq's import pulls in scikit-learn and scipy.stats for two modules no run
   here calls (``deferred_imports``); where this module is imported before fairseq (this
   project's own commands), they are imported on first use instead.

6. Warnings no user can act on: fairseq's own code, run on torch 2.13 and hydra 1.3, warns in
   every training run of things only fairseq's code could change. Each is silenced here by its
   message (and, where it has one, the module it is issued from), so no other warning is lost:
   ``FAIRSEQ_WARNINGS`` lists them with where each comes from.
"""

import functools
import gc
import inspect
import logging
import os
import signal
import socket
import time
import traceback
import types
import warnings

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel

from .deferred_imports import deferred

with deferred():  # scikit-learn and scipy.stats, which fairseq imports and no run here calls
    from fairseq import checkpoint_utils
    from fairseq.data import data_utils
    from fairseq.distributed import utils as distributed_utils
    from fairseq.models import distributed_fairseq_model

logger = logging.getLogger(__name__)


def _load_fairseq_checkpoint(*args, **kwargs):
    kwargs.setdefault("weights_only", False)
    return torch.load(*args, **kwargs)


class _TorchForCheckpoints(types.ModuleType):
    """torch, except that ``load`` reads full fairseq checkpoints."""

    def __init__(self):
        super().__init__("torch")

    def __getattr__(self, name):
        return getattr(torch, name)

    load = staticmethod(functools.wraps(torch.load)(_load_fairseq_checkpoint))


for _module in (checkpoint_utils, distributed_utils):
    if not isinstance(_module.torch, _TorchForCheckpoints):
        _module.torch = _TorchForCheckpoints()


def _batch_by_size_keeping_remainder(indices, *args, **kwargs):
    batches = _fairseq_batch_by_size(indices, *args, **kwargs)
    batched = sum(len(batch) for batch in batches)
    if batched < len(indices):
        # fairseq dropped the trailing partial batch: its indices are the last ones
        batches = list(batches) + [np.asarray(indices[batched:], dtype=np.int64)]
    return batches


if not getattr(data_utils.batch_by_size, "keeps_remainder", False):
    _fairseq_batch_by_size = data_utils.batch_by_size
    _batch_by_size_keeping_remainder.keeps_remainder = True
    data_utils.batch_by_size = _batch_by_size_keeping_remainder


def trains_on_cpu(cfg) -> bool:
    """Whether fairseq will train ``cfg`` (a FairseqConfig) on the CPU, where its launcher cannot."""
    return not cfg.common.tpu and (cfg.common.cpu or not torch.cuda.is_available())


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("localhost", 0))
        return probe.getsockname()[1]


def _call_main_on_cpu_too(cfg, main, **kwargs):
    training = cfg.distributed_training
    if not trains_on_cpu(cfg) or training.distributed_world_size <= 1 or training.pipeline_model_parallel:
        return _fairseq_call_main(cfg, main, **kwargs)
    if training.distributed_backend == "nccl":  # fairseq's default; NCCL needs GPUs
        training.distributed_backend = "gloo"
    if training.distributed_init_method is None:
        if all(name in os.environ for name in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")):
            # torchrun started this process (fairseq's _infer_torch_distributed_launch_init, minus the GPU)
            training.distributed_init_method = "env://"
            training.distributed_world_size = int(os.environ["WORLD_SIZE"])
            training.distributed_rank = int(os.environ["RANK"])
            training.device_id = int(os.environ.get("LOCAL_RANK", 0))
            training.distributed_no_spawn = True
        else:
            port = training.distributed_port if training.distributed_port > 0 else _free_port()
            training.distributed_init_method = f"tcp://localhost:{port}"
    if training.distributed_no_spawn:  # one worker, in this process (torchrun's, or a caller's)
        return _distributed_main_and_tear_down(training.device_id, main, cfg, kwargs)
    # fairseq spawns one process per visible GPU; on CPU, one per worker
    kwargs["start_rank"] = training.distributed_rank
    training.distributed_rank = None  # distributed_main assigns start_rank + process index
    workers = torch.multiprocessing.start_processes(_distributed_main_and_tear_down, args=(main, cfg, kwargs),
                                                    nprocs=training.distributed_world_size, join=False,
                                                    start_method="spawn")
    join_workers(workers, cfg.checkpoint.save_dir)


# After one worker has ended well, the others have passed the same final barrier of fairseq's
# distributed_main and have only their teardown left: one still running this long after is stuck
# there, and is ended (its training is complete, its checkpoints saved).
WORKER_EXIT_GRACE_SECONDS = 120


def join_workers(workers, save_dir: str, grace: float = WORKER_EXIT_GRACE_SECONDS, poll: float = 1.0) -> None:
    """Wait for the spawned workers (a torch.multiprocessing ProcessContext). A worker that fails or
    is killed stops the others at once (torch's join) and raises an error that says how each ended;
    a worker still running ``grace`` seconds after another ended well is ended with a warning."""
    first_done = None
    try:
        while not workers.join(timeout=poll):
            if first_done is None and len(workers.sentinels) < len(workers.processes):
                first_done = time.monotonic()
            if first_done is not None and time.monotonic() - first_done > grace:
                stuck = [index for index, process in enumerate(workers.processes) if process.is_alive()]
                for index in stuck:
                    workers.processes[index].kill()
                    workers.processes[index].join()
                logger.warning(f"worker(s) {', '.join(map(str, stuck))} still running {grace:.0f} s after another "
                               f"worker ended its training: ended (the training is complete)")
                return
    except (torch.multiprocessing.ProcessExitedException, torch.multiprocessing.ProcessRaisedException) as error:
        endings = "; ".join(f"worker {index}: {how_it_ended(process.exitcode)}"
                            for index, process in enumerate(workers.processes))
        raise RuntimeError(f"distributed training stopped: worker {error.error_index} failed first, and the others "
                           f"were ended ({endings}). The same command resumes from {save_dir}/checkpoint_last.pt, "
                           f"if one was saved.") from error


def how_it_ended(exitcode) -> str:
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return "ended well" if exitcode == 0 else f"exit status {exitcode}"


# What holds a process group: torch's DDP (its reducer) and fairseq's legacy DDP (the memory model's).
# Freed after the group is destroyed, gloo's teardown can wait for good (pytorch/pytorch#75097).
def _process_group_holders() -> tuple:
    from fairseq.distributed import LegacyDistributedDataParallel

    return DistributedDataParallel, LegacyDistributedDataParallel


def release_process_group() -> bool:
    """Destroy this process's process groups once nothing holds them any more: drop fairseq's own
    reference, collect the garbage that still holds them (a finished training's trainer and its
    DDP), then destroy them unless a DDP module is still alive, which would free a group after it
    was destroyed. Returns whether it destroyed them."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return False
    # fairseq keeps the group it makes of all workers (get_global_group) for the process's life: a
    # holder too, and a later training in this process would find it destroyed
    if hasattr(distributed_utils.get_global_group, "_global_group"):
        del distributed_utils.get_global_group._global_group
    gc.collect()
    holders = [type(thing).__name__ for thing in gc.get_objects() if isinstance(thing, _process_group_holders())]
    if holders:
        logger.warning(f"the process group is left to the process's exit: {', '.join(holders)} still referenced")
        return False
    torch.distributed.destroy_process_group()
    return True


def _clear_frames(error: BaseException) -> None:
    """Drop the local variables of the frames an exception (and those it was raised from) passed
    through: they hold the trainer and its DDP, which must be freed before the process group."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        traceback.clear_frames(error.__traceback__)
        error = error.__cause__ or error.__context__


def _distributed_main_and_tear_down(index: int, main, cfg, kwargs):
    """One worker: fairseq's ``distributed_main``, then its process group released, also when
    training raised. Left to the interpreter's exit, gloo's threads were at times torn down while
    still running ("terminate called without an active exception"), and a finished, saved training
    ended with a failed worker; and a group destroyed while a DDP still held it hung for good when
    the DDP was freed. So the DDP goes first (:func:`release_process_group`)."""
    try:
        distributed_utils.distributed_main(index, main, cfg, kwargs)
    except BaseException as error:
        _clear_frames(error)
        raise
    finally:
        release_process_group()


if not getattr(distributed_utils.call_main, "trains_on_cpu_too", False):
    _fairseq_call_main = distributed_utils.call_main
    _call_main_on_cpu_too.trains_on_cpu_too = True
    distributed_utils.call_main = _call_main_on_cpu_too


_DDP_HAS_FORWARD_SYNC_BUFFERS = "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters


class CPUDistributedDataParallel(DistributedDataParallel):
    """torch's DDP as fairseq constructs it, adapted to this torch: fairseq's ``device_ids=[device_id]``
    dropped for a CPU module (torch raises for device ids on a CPU module; GPU modules keep theirs),
    and fairseq's ``broadcast_buffers`` passed as ``forward_sync_buffers`` where torch has that
    (torch 2.13 deprecates the former)."""

    def __init__(self, module, device_ids=None, output_device=None, broadcast_buffers=None, **kwargs):
        if all(parameter.device.type == "cpu" for parameter in module.parameters()):
            device_ids, output_device = None, None
        if broadcast_buffers is not None:
            if _DDP_HAS_FORWARD_SYNC_BUFFERS:
                kwargs.setdefault("forward_sync_buffers", broadcast_buffers)
            else:
                kwargs["broadcast_buffers"] = broadcast_buffers
        super().__init__(module, device_ids=device_ids, output_device=output_device, **kwargs)


distributed_fairseq_model.DistributedDataParallel = CPUDistributedDataParallel


# (category, message regex, regex of the module it is issued from or "" for any), each with where it
# comes from. The hydra deprecations (the last six) come from fairseq's conversion of its options
# into a hydra config (fairseq.dataclass.utils.convert_namespace_to_omegaconf, which calls hydra's
# experimental initialize/compose with fairseq's old-style config files), in every process that
# parses fairseq options; the others from every training process and worker.
FAIRSEQ_WARNINGS = (
    # fairseq's FairseqTask.train_step enters torch.cuda.amp.autocast(enabled=...) at every step
    (FutureWarning, r"`torch\.cuda\.amp\.autocast\(args\.\.\.\)` is deprecated", r"fairseq\.tasks\.fairseq_task"),
    # fairseq's TransformerDecoder passes a float future mask (-inf above the diagonal) with a bool
    # padding mask to its self-attention, which hands both to torch's multi_head_attention_forward
    # (this plugin's own attentions take one kind of mask, or none)
    (UserWarning, r"Support for mismatched key_padding_mask and attn_mask is deprecated", r"torch\.nn\.functional"),
    # fairseq's EpochBatchIterator builds its DataLoader with pin_memory=True, also without a GPU
    (UserWarning, r"'pin_memory' argument is set as true but no accelerator is found", r"torch\.utils\.data"),
    (UserWarning, r"hydra\.experimental\.initialize\(\) is no longer experimental", r"hydra\."),
    (UserWarning, r"hydra\.experimental\.compose\(\) is no longer experimental", r"hydra\."),
    (UserWarning, r"\s*The version_base parameter is not specified", r"hydra\."),
    (UserWarning, r"\s*The strict flag in the compose API is deprecated", r"hydra\."),
    (UserWarning, r"In 'config': Usage of deprecated keyword in package header '# @package _group_'", r"hydra\."),
    # attributed to whichever frame called compose() (stacklevel), hence any module
    (UserWarning, r"\s*'config' is validated against ConfigStore schema with the same name", ""),
)


def silence_fairseq_warnings() -> None:
    """Ignore each of ``FAIRSEQ_WARNINGS`` (a warnings filter apiece, added once)."""
    for category, message, module in FAIRSEQ_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)


silence_fairseq_warnings()
