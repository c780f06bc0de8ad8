"""Optimizers, registered with fairseq on import (as fairseq.optim keeps its own)."""

from . import finetune_adam  # noqa: F401
