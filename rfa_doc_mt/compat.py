"""The one place that adapts fairseq 0.12.3.1 (``fairseq-fixed``) to the torch it runs on.

Two adaptations, both small:

1. Checkpoint loading: torch >= 2.6 defaults ``torch.load`` to ``weights_only=True``, which
refuses fairseq checkpoints (they pickle argparse/omegaconf configs). fairseq's
``checkpoint_utils`` module gets a view of torch whose ``load`` defaults to
``weights_only=False``; torch itself is untouched for every other caller. A fairseq
checkpoint is a pickle: load only checkpoints you trust, as with any fairseq release.

2. Batching: fairseq's main branch ``data_utils.batch_by_size`` drops the last batch when its
   size is not a multiple of ``--required-batch-size-multiple`` (default 8). For
   ``fairseq-generate`` and validation that silently loses sentences (one test sentence
   went missing from a decoded document). The wrapper keeps that batch.
"""

import functools
import types

import numpy as np
import torch
from fairseq import checkpoint_utils
from fairseq.data import data_utils


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


if not isinstance(checkpoint_utils.torch, _TorchForCheckpoints):
    checkpoint_utils.torch = _TorchForCheckpoints()


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
