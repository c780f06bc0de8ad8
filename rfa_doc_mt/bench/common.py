"""The timing step the benchmarks share: one training step of a model on a fixed batch of random
windows, and seconds of repeated calls."""

import time
from typing import List

import torch


def random_window_step(model, dictionary, separator: int, tokens: int, window_sentences: int, sentence_length: int,
                       seed: int, device: str = "cpu"):
    """A training step (forward, label-smoothed cross-entropy, backward; no optimiser update) of
    ``model`` on one fixed batch of random windows of ``window_sentences`` sentences of
    ``sentence_length`` tokens (the separator ending each, EOS the window), as many windows as make
    ``tokens`` tokens, on ``device`` (the model's). Returns (step function, windows, tokens in the batch)."""
    import torch.nn.functional as F

    window = window_sentences * sentence_length
    windows = max(1, round(tokens / window))
    generator = torch.Generator().manual_seed(seed)

    def random_windows():
        batch = torch.randint(dictionary.nspecial, separator, (windows, window), generator=generator)
        batch[:, sentence_length - 1::sentence_length] = separator
        batch[:, -1] = dictionary.eos()
        return batch

    source, target = random_windows(), random_windows()
    previous = torch.cat([target[:, -1:], target[:, :-1]], dim=1)  # EOS first, as fairseq shifts
    lengths = torch.full((windows,), window)
    source, target, previous, lengths = (t.to(device) for t in (source, target, previous, lengths))

    def step():
        model.zero_grad(set_to_none=True)
        logits, _ = model(source, lengths, previous)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), target.view(-1), label_smoothing=0.1)
        loss.backward()

    return step, windows, windows * window


def timed_steps(step, steps: int) -> List[float]:
    """Seconds of each of ``steps`` calls of ``step`` after one untimed warm-up call."""
    step()  # warm-up: kernels, first allocations
    seconds = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - start)
    return seconds
