"""What every benchmark records beside its figures: the machine, the commit, atomic JSON/PNG."""

import json
import os
import platform
import subprocess
import time
from typing import Dict, List

import torch

from ..data.io import atomic_write


def machine_info(device: str) -> Dict:
    info = {"platform": platform.platform(), "python": platform.python_version(), "torch": torch.__version__,
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "device": device}
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        info["cpu"] = names[0] if names else platform.processor()
    except OSError:
        info["cpu"] = platform.processor()
    if device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name(device)
    try:
        # other work on the machine inflates times (not memory): keep the load beside the figures
        info["load_average_at_start"] = os.getloadavg()
    except OSError:
        pass
    return info


def record_load_at_end(result: Dict) -> Dict:
    """Add the load average at the end of a run to ``result["machine"]``; returns ``result``."""
    try:
        result["machine"]["load_average_at_end"] = os.getloadavg()
    except OSError:
        pass
    return result


def commit_info() -> Dict:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    def git(*git_args):
        try:
            return subprocess.run(["git", "-C", root, *git_args], capture_output=True, text=True,
                                  check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return None

    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain"))}


def write_json(result: Dict, path: str) -> None:
    with atomic_write(path) as handle:
        json.dump(result, handle, indent=1)


def save_figure(figure, out: str) -> None:
    """Write a matplotlib figure as PNG through a temporary name."""
    temporary = out + ".tmp.png"
    figure.savefig(temporary, dpi=150)
    os.replace(temporary, out)
    print(f"wrote {out}")


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
