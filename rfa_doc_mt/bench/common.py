"""The timing step the benchmarks share: one training step of a model on a fixed batch of random
windows, and seconds of repeated calls."""

import time
from typing import Dict, List, Tuple

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


class TritonCompiles:
    """Counts the Triton kernels compiled (or loaded from Triton's disk cache: every miss of a
    kernel's in-memory cache) while it is entered, through Triton's post-compile hook; the hook
    that was set before is called too, and restored on exit. A compile inside a timed batch
    (a specialisation the warm-up did not meet: an integer argument that turns 1 or a multiple of
    16, a pointer's alignment, a new constexpr) costs its time in the figures. ``count`` is None
    where Triton is not imported yet (nothing has launched a Triton kernel in this process; importing
    it here would fix its mode before the interpreter can be chosen) or has no such hook."""

    def __init__(self):
        self.count = None
        self._knobs = self._previous = None

    def __enter__(self) -> "TritonCompiles":
        import sys

        knobs = getattr(sys.modules.get("triton"), "knobs", None)
        runtime = getattr(knobs, "runtime", None)
        if runtime is None or not hasattr(runtime, "jit_post_compile_hook"):
            return self
        self._knobs, self._previous, self.count = runtime, runtime.jit_post_compile_hook, 0

        def hook(*args, **kwargs):
            self.count += 1
            return self._previous(*args, **kwargs) if self._previous is not None else None

        runtime.jit_post_compile_hook = hook
        return self

    def __exit__(self, *exc) -> None:
        if self._knobs is not None:
            self._knobs.jit_post_compile_hook = self._previous
            self._knobs = None


def device_events(events) -> List:
    """The device's own events in a profile (kernels, copies, fills): those on a CUDA device, less
    the user annotations the profiler mirrors onto the device's timeline (a ``record_function``
    such as the fused path's ``triton::<kernel>`` spans the kernels it launched: counted as a
    device event, it would count each of them twice, in launches and in busy time)."""
    from torch.autograd import DeviceType

    return [e for e in events if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False)
            and not e.name.startswith("triton::")]


def device_time(events) -> Tuple[float, Dict[str, Tuple[float, int]]]:
    """The device's busy time in a profile's device events (kernels, copies, fills: each an event
    with a ``name`` and a ``time_range``): their total µs, and µs and count per name."""
    total, per_name = 0.0, {}
    for event in events:
        us = event.time_range.elapsed_us()
        total += us
        seen = per_name.get(event.name, (0.0, 0))
        per_name[event.name] = (seen[0] + us, seen[1] + 1)
    return total, per_name


def profiled_step(step, cuda: bool, top: int) -> Dict:
    """One more call of ``step`` under torch.profiler: on a GPU the device's busy time, the kernels
    launched and the ``top`` kernels by device time; on a CPU the ``top`` operators by self CPU time."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as profiler:
        step()
        if cuda:
            torch.cuda.synchronize()
    if cuda:
        total, per_kernel = device_time(device_events(profiler.events()))
        ranked = sorted(per_kernel.items(), key=lambda item: item[1][0], reverse=True)[:top]
        return {"device_ms": total / 1000, "kernels": sum(calls for _, calls in per_kernel.values()),
                "top": [{"kernel": name[:120], "ms": us / 1000, "share": us / (total or 1.0), "launches": calls}
                        for name, (us, calls) in ranked]}
    events = sorted(profiler.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events) or 1.0
    return {"cpu_ms": total / 1000, "top": [{"op": e.key, "ms": e.self_cpu_time_total / 1000,
                                              "share": e.self_cpu_time_total / total, "calls": e.count}
                                             for e in events[:top]]}
