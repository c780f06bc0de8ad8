"""Hashing for LSH attention: random rotations drawn from a seed, angular LSH classes, the
random secondary sort key, the paper's number of hash classes and the padding class."""

import functools
from typing import Sequence

import torch
from torch import Tensor

# Padded positions get a class above every real one: they sort to the end, never share a class
# with a real position, and (in cross-attention) never fall in a query chunk's class range.
PAD_CLASS = 2**31


def fp32_math(function):
    """Run an op with autocast off: its math (hashing, logits, normalisers) stays in fp32 even
    inside ``torch.autocast``; the op casts its inputs up and its output back itself."""
    @functools.wraps(function)
    def without_autocast(*args, **kwargs):
        device = next(a.device for a in args if isinstance(a, Tensor))
        with torch.autocast(device_type=device.type, enabled=False):
            return function(*args, **kwargs)
    return without_autocast


def check_hash_classes(hash_classes: int) -> None:
    """Angular LSH takes ``argmax([xR; -xR])``: the number of classes is even and at least 2."""
    if hash_classes < 2 or hash_classes % 2:
        raise ValueError(f"the number of hash classes must be even and >= 2 (argmax over [xR; -xR]), "
                         f"got {hash_classes}")


def paper_hash_classes(context_size: int) -> int:
    """Petrick et al. 2022, §5.2: as many hash classes as concatenated sentences (k context sentences and
    the current one), rounded up to even."""
    sentences = context_size + 1
    return sentences + sentences % 2


def random_rotations(num_heads: int, rounds: int, head_dim: int, hash_classes: int, seed: int) -> Tensor:
    """[heads, rounds, head_dim, hash_classes // 2] Gaussian rotations drawn from ``seed`` alone.

    A private ``torch.Generator`` (never the global RNG) makes them reproducible between
    training and decoding, workers, and checkpoint round-trips.
    """
    check_hash_classes(hash_classes)
    if rounds < 1:
        raise ValueError(f"the number of hash rounds must be >= 1, got {rounds}")
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(num_heads, rounds, head_dim, hash_classes // 2, generator=generator)


@fp32_math
def hash_vectors(vectors: Tensor, rotations: Tensor) -> Tensor:
    """Angular LSH (Andoni et al. 2015): [batch, heads, time, dim] -> [batch, heads, rounds, time]
    classes ``argmax([xR; -xR])`` in ``0 .. hash_classes - 1``, one class per round."""
    projected = torch.einsum("bhtd,hrdc->bhrtc", vectors.float(), rotations.float())
    return torch.cat([projected, -projected], dim=-1).argmax(dim=-1)


def random_ranks(shape: Sequence[int], generator: torch.Generator, device) -> Tensor:
    """A random permutation of ``0 .. shape[-1] - 1`` along the last axis (secondary sort key)."""
    return torch.rand(*shape, generator=generator, device=device).argsort(dim=-1)
