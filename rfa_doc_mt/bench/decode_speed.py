"""Decoding speed of RFA against the transformer as the window grows (Wu et al. 2022, Figure 4, A.3).

    python -m rfa_doc_mt.bench.decode_speed run --data DIR --out speed.json [--quick] [--device cuda]
    python -m rfa_doc_mt.bench.decode_speed plot speed.json --out speed.png

``run`` decodes the same windows of a prepared corpus (IWSLT15's test talks in the paper)
with the concatenation transformer (``doc_transformer``) and ungated RFA
(``rfa_doc_transformer``, A.3: "we benchmark with ungated RFA"), both at paper sizes and
randomly initialised (only speed is measured), for each window size L, with beam 4.

* Same work for both: every window is decoded to exactly its reference length (a beam search
  that forbids EOS before the last position and forces it there), so both models decode the
  same number of tokens whatever their (random) predictions.
* Same batches: windows with L full sentences, sorted by source length, cut into batches of
  the paper's Table 3 size times ``--batch-scale`` (default 1/8 for a small CPU: 128 windows
  at L = 1 down to 12 at L = 15, keeping the paper's shape of about 1000-1500 sentences per
  batch, divided by 8). Small batches make every step pay for reading the weights (the 23k x
  512 output embedding alone is 46 MB), which hides the attention's cost at large L.
* Measured: decoded tokens (reference tokens, EOS included, counted once per window, not
  once per beam) per second of *forward time*: the encoder, the decoder steps and the
  reordering of cached states (what the paper calls "forward pass time"); the beam search's
  own bookkeeping (top-k, token buffers) is reported apart as wall time.
* Both models are timed in one process, batch by batch in alternation, after a warm-up.
* A third model bounds the possible gain (``ceiling``; ``--no-ceiling`` skips it): the
  transformer whose decoder attentions keep their projections (of every token, and of each
  source once per sentence) but attend to nothing. Every attention with these projections does
  its work and more, so none, however cheap, can decode faster; ``rfa_share_of_ceiling``
  (RFA ÷ ceiling tokens/s) is how much of the attainable RFA realises, ``ceiling_speedup``
  the most any such attention could gain.
* ``reorder_share``: the part of each model's forward time spent reordering the decoder's
  caches for the beam (the transformer gathers its keys and values on every step).
* ``--batch-sizes 3,12,24,48`` measures each batch size in turn (windows per batch; the paper's
  Table 3 batch at L = 15 is 96): the batch curve, which ``plot`` then draws against the batch.
* ``--profile N`` profiles one more batch of each model per L (torch.profiler) and keeps its N
  most expensive operations (self CPU time) in the JSON.
* ``--rfa-decoding eager,fused`` decodes RFA on both paths, as two models with the same weights:
  ``rfa`` (the eager step, a dozen operations per attention) and ``rfa_fused`` (one Triton kernel
  per attention, modules/random_feature_attention/fused.py); ``fused_speedup`` is ``rfa_fused`` over
  the transformer. The default is both on a GPU, the eager path alone on a CPU (where the fused path
  runs only in Triton's interpreter, ``TRITON_INTERPRET=1``: a check of the code, not a speed).
* ``--kernel-counts N`` profiles N decoder steps (1, 2, 4, ...) of one more decoding of the first
  batch per model and L (all its windows still decoding): what each step launches (the decoder's
  call and its cache reordering), as GPU kernels (CUDA devices' events: kernels, copies, fills)
  and as top-level ATen operators, and their means; on a GPU also the device's busy time per step
  and the kernels that take most of it (where a model's step time goes: ``device_ms_per_step``,
  ``top_kernels``), and the host's time in the step's top-level calls, ATen operators and Triton
  launches apart (``host``: calls, ms per step and µs a call, as the profiler times them, its own
  cost included: compare the two kinds, not the absolute figures). The first step (0), which also
  reads the source, is profiled apart (``first_step``).
* ``--tiny`` uses the ``*_tiny`` architectures: a fast check of the code paths (e.g. on a CPU, of
  the fused path in the interpreter), not a measurement.
* ``--rfa-gates sgate,token,feature`` decodes RFA with these causal gates too (``rfa-<gate>``,
  the same batches in the same alternation): ``over_rfa`` and ``over_sgate`` in the summary are
  their tokens/s ÷ ungated RFA's and ÷ RFA-sgate's, the cost of a gate beside its quality.
* ``--rfa-variant NAME="OPTIONS"`` (repeatable) decodes RFA built with more model options too
  (``rfa-NAME``, e.g. ``local="--rfa-gate sgate --rfa-causal-local-heads 4 --rfa-cross-local-heads
  4"``; scripts/bench_gpu.sh decodes the remedy, ``crosslocal2="--rfa-cross-local-heads 2"``):
  ``over_transformer`` in the summary is each variant's tokens/s ÷ the transformer's,
  ``over_ceiling`` ÷ the ceiling's.
* The ``--rfa-gates`` and ``--rfa-variant`` models decode on the fused path when ``--rfa-decoding``
  includes it (local heads included; a causal attention with the delta rule has no kernel and
  stays eager), else on the eager path: ``rfa_variant_decoding`` in the settings.

The JSON holds the machine, the commit, the settings and every run; ``plot`` draws the
speedup per L from it (a separate step, so plots can be redrawn without re-running).
"""

import argparse
import json
import math
import os
import sys
import time
from contextlib import contextmanager, nullcontext
from typing import Callable, Dict, List, Optional

import numpy as np
import torch
from fairseq.incremental_decoding_utils import FairseqIncrementalState

from ..modules.random_feature_attention.gates import GATE_VARIANTS
from ..provenance import commit_info, machine_info, record_load_at_end, save_figure, write_json
from .common import TritonCompiles, device_events, device_time

# Wu et al. 2022, Table 3: batch size used to decode each window size L (32 GB A100; also its CPU runs)
PAPER_BATCH_SIZES = {1: 1024, 2: 512, 3: 512, 4: 256, 5: 256, 10: 128, 15: 96}
WINDOW_SIZES = (1, 2, 3, 4, 5, 10, 15)
QUICK_WINDOW_SIZES = (1, 4, 15)
MODELS = {"transformer": "doc_transformer", "rfa": "rfa_doc_transformer"}
# RFA on the fused decoding path (modules/random_feature_attention/fused.py), the same weights as "rfa"
FUSED = "rfa_fused"
DECODING_PATHS = {"eager": "rfa", "fused": FUSED}
# the transformer with its decoder attention removed: what no attention variant can beat
CEILING = "ceiling"
# the kernels kept per model and L in --kernel-counts' profile, by device time
TOP_KERNELS = 6


# ---------------------------------------------------------------------------------------
# data and models


def read_prep(data: str) -> Dict:
    """The corpus' prep.json; without one, the languages of its two dictionaries."""
    path = os.path.join(data, "prep.json")
    if os.path.isfile(path):
        with open(path) as f:
            return json.load(f)
    languages = sorted(name[5:-4] for name in os.listdir(data) if name.startswith("dict.") and name.endswith(".txt"))
    if len(languages) != 2:
        raise SystemExit(f"{data}: no prep.json and not two dict.*.txt files: is it a prepared corpus?")
    source, target = languages if os.path.exists(os.path.join(data, f"test.{languages[0]}-{languages[1]}."
                                                                  f"{languages[0]}.idx")) else languages[::-1]
    return {"source_lang": source, "target_lang": target, "corpus": None}


def load_windows(data: str, split: str, window_size: int, max_positions: int):
    """The task and its window dataset for windows of ``window_size`` sentences."""
    from ..tasks.doc_translation import DocTranslationConfig, DocTranslationTask

    prep = read_prep(data)
    cfg = DocTranslationConfig(data=data, source_lang=prep["source_lang"], target_lang=prep["target_lang"],
                               context_size=window_size - 1, max_source_positions=max_positions,
                               max_target_positions=max_positions,
                               # fields that fairseq otherwise interpolates from its global config
                               train_subset="train", dataset_impl="mmap", required_seq_len_multiple=1)
    task = DocTranslationTask.setup_task(cfg)
    task.load_dataset(split)
    return task, task.datasets[split]


def choose_batches(dataset, window_size: int, batch_size: int, num_batches: int) -> List[List[int]]:
    """``num_batches`` batches of windows holding ``window_size`` sentences, spread evenly over
    the split, each batch sorted by source length (as fairseq batches are).

    Where the split has too few such windows (short documents, e.g. the synthetic corpus),
    the windows with the most sentences are used instead; the JSON records it per run."""
    index = dataset.index
    sentences = index.current_sentence - index.first_sentence + 1
    wanted = batch_size * num_batches
    candidates = np.nonzero(sentences == window_size)[0]
    if len(candidates) < wanted:
        # the longest windows available: most sentences first, then most source tokens
        order = np.lexsort((-dataset.source_sizes, -sentences))
        candidates = np.sort(order[:wanted])
        print(f"note: only {int((sentences == window_size).sum())} windows of {window_size} sentences; "
              f"using the {len(candidates)} longest windows ({sentences[candidates].min()}-"
              f"{sentences[candidates].max()} sentences)", flush=True)
    chosen = candidates[np.linspace(0, len(candidates) - 1, min(wanted, len(candidates))).round().astype(int)]
    chosen = chosen[np.argsort(dataset.source_sizes[chosen], kind="mergesort")]
    batches = [chosen[i:i + batch_size].tolist() for i in range(0, len(chosen), batch_size)]
    return [b for b in batches if len(b) == batch_size] or batches[:1]


def batch_steps(data: str, split: str, window_size: int, batch_size: int, num_batches: int,
                max_positions: int = 1024) -> List[int]:
    """The decoder steps of each batch ``run`` decodes at this L and batch size (its longest
    reference window, EOS included): for a JSON written before runs recorded ``steps``."""
    _, dataset = load_windows(data, split, window_size, max_positions)
    return [max(len(dataset[i]["target"]) for i in batch)
            for batch in choose_batches(dataset, window_size, batch_size, num_batches)]


def build_model(task, arch: str, seed: int, max_positions: int, device: str, dtype: torch.dtype, options=()):
    from ..models.build import build_model as build

    # joint dictionary, as the configs train them
    model = build(arch, task, options, seed=seed, max_source_positions=max_positions,
                  max_target_positions=max_positions, share_all_embeddings=True)
    return model.to(device=device, dtype=dtype).eval()


class _ProjectionsOnly(FairseqIncrementalState, torch.nn.Module):
    """Stands in for a decoder attention: the projections every attention of this shape needs,
    and no attention. Self-attention projects the new token to a query, a key and a value and
    returns the output projection of its value. Cross-attention projects the source to keys and
    values once per sentence (on a batch's first step, one copy per beam group, as fairseq's
    attention and RFA's do), and at every step projects the query and returns its output
    projection. RFA needs exactly these projections (fused into one for q, k, v)."""

    def __init__(self, attention, self_attention: bool):
        super().__init__()
        self.q_proj, self.k_proj = attention.q_proj, attention.k_proj
        self.v_proj, self.out_proj = attention.v_proj, attention.out_proj
        self.self_attention = self_attention
        self.beam_size = 1

    def set_beam_size(self, beam_size: int):  # fairseq's decoder announces the beam to its modules
        self.beam_size = beam_size

    def forward(self, query, key=None, value=None, incremental_state=None, **unused):
        projected = self.q_proj(query)
        if self.self_attention:
            self.k_proj(query)
            projected = self.v_proj(query)
        elif key is not None and self.get_incremental_state(incremental_state, "source") is None:
            if self.beam_size > 1 and key.size(1) % self.beam_size == 0:
                key = key[:, ::self.beam_size]  # the beams of a sentence share its source
            self.k_proj(key)
            self.v_proj(key)
            self.set_incremental_state(incremental_state, "source", {})
        return self.out_proj(projected), None

    def _get_input_buffer(self, incremental_state):  # fairseq's decoder layer asks for it
        return {}


def remove_decoder_attention(model):
    """The ceiling model: every decoder self- and cross-attention replaced by
    :class:`_ProjectionsOnly` (its projections kept, its attention removed).

    Decoding it does the work that every attention with these projections shares with the
    transformer (embeddings, the attention projections, the source's keys and values included,
    feed-forward layers, layer norms, the output layer, the encoder, beam search), so its
    tokens/s bound what any such attention, however cheap, can decode: RFA ÷ ceiling is the
    share of the attainable that RFA realises."""
    for layer in model.decoder.layers:
        layer.self_attn = _ProjectionsOnly(layer.self_attn, self_attention=True)
        if getattr(layer, "encoder_attn", None) is not None:
            layer.encoder_attn = _ProjectionsOnly(layer.encoder_attn, self_attention=False)
    return model


# ---------------------------------------------------------------------------------------
# decoding


class Timer:
    """Accumulates the seconds spent inside ``with timer.forward():`` blocks, and apart those of
    the decoder's cache reordering (``timer.forward("reorder")``, part of the forward time)."""

    def __init__(self, device: str):
        self.device = device
        self.forward_seconds = 0.0
        self.reorder_seconds = 0.0
        self.first_step_seconds: Optional[float] = None  # the encoder and the first decoder step

    def sync(self):
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()

    @contextmanager
    def forward(self, kind: str = "step"):
        self.sync()
        start = time.perf_counter()
        yield
        self.sync()
        seconds = time.perf_counter() - start
        self.forward_seconds += seconds
        if kind == "reorder":
            self.reorder_seconds += seconds


@torch.no_grad()
def forced_length_beam_search(model, sample: Dict, beam: int, pad: int, eos: int, timer: Timer,
                              step_context: Optional[Callable] = None) -> torch.Tensor:
    """Beam search in which window b ends exactly after ``target_lengths[b]`` tokens (EOS last).

    Returns the best hypothesis per window ([batch, max_length]). Finished windows leave the
    batch, and cached states are reordered, as in fairseq's SequenceGenerator. ``step_context(step)``
    (e.g. a :class:`KernelCounter`), when given, is entered around each step's decoder call and
    around its cache reordering.
    """
    step_context = step_context or (lambda step: nullcontext())
    net_input = sample["net_input"]
    src_tokens, src_lengths = net_input["src_tokens"], net_input["src_lengths"]
    target_lengths = sample["target"].ne(pad).sum(1)
    batch, max_length = src_tokens.size(0), int(target_lengths.max())
    device = src_tokens.device
    model.decoder.set_beam_size(beam)  # as SequenceGenerator: beams share encoder-side caches
    with timer.forward():
        encoder_out = model.encoder(src_tokens, src_lengths)
        encoder_out = model.encoder.reorder_encoder_out(
            encoder_out, torch.arange(batch, device=device).repeat_interleave(beam))
    incremental_state: Dict[str, Dict[str, Optional[torch.Tensor]]] = {}
    tokens = torch.full((batch * beam, max_length + 1), pad, dtype=torch.long, device=device)
    tokens[:, 0] = eos
    scores = torch.zeros(batch * beam, device=device)
    lengths = target_lengths.repeat_interleave(beam)
    windows = torch.arange(batch, device=device)  # which window each group of beams decodes
    best = torch.full((batch, max_length), pad, dtype=torch.long, device=device)
    beam_offsets = torch.arange(beam, device=device)
    for step in range(max_length):
        with timer.forward(), step_context(step):
            logits, _ = model.decoder(tokens[:, :step + 1], encoder_out, incremental_state=incremental_state)
            lprobs = torch.log_softmax(logits[:, -1].float(), dim=-1)
        if step == 0:  # the first step also reads the source: cross attention's caches are made here
            timer.first_step_seconds = timer.forward_seconds
        vocab = lprobs.size(-1)
        ending = lengths.eq(step + 1)
        # forced length: no EOS before the window's last position, nothing but EOS at it
        lprobs[:, pad] = -math.inf
        lprobs.masked_fill_(ending.unsqueeze(1), -math.inf)
        lprobs[:, eos] = torch.where(ending, 0.0, -math.inf)
        groups = lprobs.size(0) // beam
        candidates = (scores.unsqueeze(1) + lprobs).view(groups, beam * vocab)
        if step == 0:
            candidates = candidates[:, :vocab]  # all beams are still the same hypothesis
        top_scores, top_indices = candidates.topk(beam, dim=1)
        new_order = (torch.arange(groups, device=device).unsqueeze(1) * beam + top_indices // vocab).view(-1)
        tokens = tokens.index_select(0, new_order)
        tokens[:, step + 1] = (top_indices % vocab).view(-1)
        scores = top_scores.view(-1)
        finished = ending.view(groups, beam)[:, 0]
        if bool(finished.any()):
            done = finished.nonzero().squeeze(1)
            best[windows[done], :step + 1] = tokens.view(groups, beam, -1)[done, 0, 1:step + 2]
            kept = (~finished).nonzero().squeeze(1)
            if kept.numel() == 0:
                break
            rows = (kept.unsqueeze(1) * beam + beam_offsets).view(-1)
            new_order, tokens, scores, lengths = new_order[rows], tokens[rows], scores[rows], lengths[rows]
            windows = windows[kept]
            with timer.forward():
                encoder_out = model.encoder.reorder_encoder_out(encoder_out, rows)
        # beams of a window share their encoder rows: only the decoder's caches follow new_order
        with timer.forward("reorder"), step_context(step):
            model.decoder.reorder_incremental_state_scripting(incremental_state, new_order)
    return best


class StepsCounted(Exception):
    """Raised by :class:`KernelCounter` once its last step is counted: the decoding can stop."""


class KernelCounter:
    """What chosen decoder steps launch: entered (as ``step_context``) around each step's decoder
    call and cache reordering, it profiles those of the steps in ``steps`` (torch.profiler) and adds
    up, per step, the device's events (on a GPU: kernels, copies and fills, each one launch) and the
    top-level operators: ATen operators and Triton kernel launches (``triton::`` annotations, made by
    modules/random_feature_attention/fused.py while a profiler runs), the calls that launch them
    (on a CPU the only count; there the operators inside Triton's interpreter are not counted).
    After the last step's reordering it raises :class:`StepsCounted`."""

    def __init__(self, device: str, steps):
        self.cuda = device.startswith("cuda")
        self.steps = set(steps)
        self.counts: Dict[int, Dict[str, float]] = {}
        self.entered: Dict[int, int] = {}
        self.kernel_time: Dict[str, List] = {}  # kernel name -> [device µs, launches] over the profiled steps

    @contextmanager
    def __call__(self, step: int):
        if step not in self.steps:
            yield
            return
        self.entered[step] = self.entered.get(step, 0) + 1
        if step == max(self.steps) and self.entered[step] == 2:  # the last step's reordering
            with self._profiled(step):
                yield
            raise StepsCounted()
        with self._profiled(step):
            yield

    @contextmanager
    def _profiled(self, step: int):
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        with profile(activities=activities) as profiler:
            yield
            if self.cuda:
                torch.cuda.synchronize()
        events = profiler.events()
        counts = self.counts.setdefault(step, {"kernels": 0, "operators": 0, "device_us": 0.0, "aten_calls": 0,
                                               "aten_host_us": 0.0, "triton_calls": 0, "triton_host_us": 0.0})
        kernels = device_events(events)
        counts["kernels"] += len(kernels)
        for event in events:
            if event.device_type == DeviceType.CPU and event.cpu_parent is None and \
                    event.name.startswith(("aten::", "triton::")):
                kind = event.name.split("::")[0]
                counts["operators"] += 1
                counts[f"{kind}_calls"] += 1
                counts[f"{kind}_host_us"] += event.time_range.elapsed_us()
        total, per_kernel = device_time(kernels)
        counts["device_us"] += total
        for name, (us, calls) in per_kernel.items():
            seen = self.kernel_time.setdefault(name, [0.0, 0])
            seen[0] += us
            seen[1] += calls

    def summary(self) -> Dict:
        steps = sorted(step for step in self.counts if step > 0)  # the first step apart: it reads the source
        mean = {name: float(np.mean([self.counts[s][name] for s in steps])) if steps else None
                for name in ("kernels", "operators")}
        device_ms = [self.counts[s]["device_us"] / 1000 for s in steps]
        first = self.counts.get(0)
        first_step = first and {"kernels": first["kernels"] if self.cuda else None, "operators": first["operators"],
                                "device_ms": first["device_us"] / 1000 if self.cuda else None}
        host = {}
        for kind in ("aten", "triton"):
            calls = sum(self.counts[s][f"{kind}_calls"] for s in steps)
            host_us = sum(self.counts[s][f"{kind}_host_us"] for s in steps)
            host[kind] = {"calls_per_step": calls / len(steps) if steps else None,
                          "host_ms_per_step": host_us / 1000 / len(steps) if steps else None,
                          "host_us_per_call": host_us / calls if calls else None}
        busy = sum(us for us, _ in self.kernel_time.values()) or 1.0
        top = sorted(self.kernel_time.items(), key=lambda item: item[1][0], reverse=True)[:TOP_KERNELS]
        return {"steps": steps, "kernels": [self.counts[s]["kernels"] for s in steps],
                "operators": [self.counts[s]["operators"] for s in steps],
                "kernels_per_step": mean["kernels"] if self.cuda else None, "operators_per_step": mean["operators"],
                "device_ms": device_ms if self.cuda else None,
                "device_ms_per_step": float(np.mean(device_ms)) if self.cuda and steps else None,
                "first_step": first_step, "host": host,
                "top_kernels": [{"kernel": name[:120], "ms_per_step": us / 1000 / len(steps), "share": us / busy,
                                 "launches_per_step": calls / len(steps)} for name, (us, calls) in top]}


def count_kernels(model, dataset, indices: List[int], beam: int, device: str, count: int) -> Dict:
    """One more decoding of a batch, steps 1, 2, 4, ... (``count`` of them) profiled, until the last
    of them, and the first step (0, which reads the source) apart: :class:`KernelCounter`'s summary,
    with the windows decoded."""
    counter = KernelCounter(device, [0] + [2 ** i for i in range(count)])
    try:
        decode_batch(model, dataset, indices, beam, device, step_context=counter)
    except StepsCounted:
        pass
    return dict(counter.summary(), windows=len(indices))


def decode_batch(model, dataset, indices: List[int], beam: int, device: str,
                 step_context: Optional[Callable] = None, hypotheses: Optional[List[torch.Tensor]] = None) -> Dict:
    """Decode a batch (forced lengths) and time it; the best hypotheses ([batch, length], on the CPU)
    are appended to ``hypotheses`` when given."""
    from fairseq import utils

    sample = utils.move_to_cuda(dataset.collater([dataset[i] for i in indices]), device=torch.device(device)) \
        if device.startswith("cuda") \
        else dataset.collater([dataset[i] for i in indices])
    timer = Timer(device)
    timer.sync()
    start = time.perf_counter()
    best = forced_length_beam_search(model, sample, beam, dataset.pad, dataset.eos, timer, step_context)
    timer.sync()
    wall = time.perf_counter() - start
    if hypotheses is not None:
        hypotheses.append(best.cpu())
    lengths = sample["target"].ne(dataset.pad).sum(1)
    tokens = int(lengths.sum())
    index = dataset.index
    sentences = index.current_sentence[indices] - index.first_sentence[indices] + 1
    # steps: the decoder calls (the longest window's length); tokens / steps: the windows decoding on average
    return {"windows": len(indices), "tokens": tokens, "steps": int(lengths.max()),
            "mean_sentences_per_window": float(np.mean(sentences)),
            "source_tokens": int(sample["net_input"]["src_tokens"].ne(dataset.pad).sum()),
            "forward_seconds": timer.forward_seconds, "first_step_seconds": timer.first_step_seconds,
            "reorder_seconds": timer.reorder_seconds, "wall_seconds": wall}


def profile_batch(model, dataset, indices: List[int], beam: int, device: str, top: int) -> List[Dict]:
    """One more decoding of a batch under torch.profiler: its ``top`` operations by self CPU time."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    with profile(activities=activities) as profiler:
        decode_batch(model, dataset, indices, beam, device)
    events = sorted(profiler.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events) or 1.0
    return [{"op": e.key, "calls": e.count, "self_cpu_ms": e.self_cpu_time_total / 1000,
             "share": e.self_cpu_time_total / total} for e in events[:top]]


# ---------------------------------------------------------------------------------------
# run


def scaled_batch_size(window_size: int, scale: float) -> int:
    return max(1, int(round(PAPER_BATCH_SIZES[window_size] * scale)))


def differing_hypotheses(eager: List[torch.Tensor], fused: List[torch.Tensor]) -> Dict[str, int]:
    """How many windows' best hypotheses differ between two decodings of the same batches (the same
    weights on the eager and the fused path: where they differ, rounding flipped a near tie)."""
    differing = sum(int(a.ne(b).any(dim=1).sum()) for a, b in zip(eager, fused))
    return {"windows": sum(a.size(0) for a in eager), "differing": differing}


def measure_setting(models: Dict, dataset, window_size: int, batch_size: int, batches: List[List[int]], args,
                    runs: List[Dict]) -> Dict:
    """Every model decodes the same batches (in alternating order); their summary for this L and
    batch size. Each batch's figures are appended to ``runs``."""
    device = args.device
    totals = {name: {"tokens": 0, "forward_seconds": 0.0, "reorder_seconds": 0.0, "wall_seconds": 0.0}
              for name in models}
    hypotheses: Dict[str, List[torch.Tensor]] = {name: [] for name in models}
    for number, indices in enumerate(batches):
        order = list(models) if number % 2 == 0 else list(reversed(list(models)))
        for name in order:
            with TritonCompiles() as compiles:
                figures = decode_batch(models[name], dataset, indices, args.beam, device,
                                       hypotheses=hypotheses[name])
            figures.update({"window_size": window_size, "model": name, "batch": number,
                            "batch_size": len(indices), "triton_compiles": compiles.count,
                            "tokens_per_second": figures["tokens"] / figures["forward_seconds"]})
            runs.append(figures)
            for key in totals[name]:
                totals[name][key] += figures[key]
            print(f"L={window_size:2d} batch {number} ({len(indices)} windows) {name:11s} {figures['tokens']:6d} "
                  f"tokens {figures['forward_seconds']:7.2f} s forward {figures['wall_seconds']:7.2f} s wall "
                  f"{figures['tokens_per_second']:8.1f} tokens/s"
                  + (f" ({compiles.count} Triton compiles while timed)" if compiles.count else ""), flush=True)
    speeds = {name: t["tokens"] / t["forward_seconds"] for name, t in totals.items()}
    wall_speeds = {name: t["tokens"] / t["wall_seconds"] for name, t in totals.items()}
    summary = {"window_size": window_size, "batch_size": len(batches[0]),
               "tokens": totals["transformer"]["tokens"],
               "tokens_per_second": speeds, "wall_tokens_per_second": wall_speeds}
    for name, key in (("rfa", "speedup"), (FUSED, "fused_speedup")):
        if name in speeds:
            summary[key] = speeds[name] / speeds["transformer"]
            summary["wall_" + key] = wall_speeds[name] / wall_speeds["transformer"]
    if "rfa" in speeds and FUSED in speeds:
        summary["fused_over_eager"] = speeds[FUSED] / speeds["rfa"]
        summary["fused_hypotheses"] = differing_hypotheses(hypotheses["rfa"], hypotheses[FUSED])
    summary["reorder_share"] = {name: t["reorder_seconds"] / t["forward_seconds"] for name, t in totals.items()}
    if CEILING in speeds:
        summary["ceiling_speedup"] = speeds[CEILING] / speeds["transformer"]
        for name, key in (("rfa", "rfa_share_of_ceiling"), (FUSED, "rfa_fused_share_of_ceiling")):
            if name in speeds:
                summary[key] = speeds[name] / speeds[CEILING]
    gated = [name for name in speeds if name.startswith("rfa-")]
    if gated:
        summary["over_transformer"] = {name: speeds[name] / speeds["transformer"] for name in gated}
        if CEILING in speeds:
            summary["over_ceiling"] = {name: speeds[name] / speeds[CEILING] for name in gated}
    for baseline, key in (("rfa", "over_rfa"), ("rfa-sgate", "over_sgate")):
        if gated and baseline in speeds:
            summary[key] = {name: speeds[name] / speeds[baseline] for name in gated if name != baseline}
    if args.profile:
        summary["profile"] = {name: profile_batch(model, dataset, batches[0], args.beam, device, args.profile)
                              for name, model in models.items()}
    if args.kernel_counts:
        summary["kernel_counts"] = {name: count_kernels(model, dataset, batches[0], args.beam, device,
                                                        args.kernel_counts)
                                    for name, model in models.items()}
        unit = "kernels_per_step" if device.startswith("cuda") else "operators_per_step"
        print(f"L={window_size:2d} {unit.replace('_', ' ')}: " + ", ".join(
            f"{name} {counts[unit]:.0f}" for name, counts in summary["kernel_counts"].items()), flush=True)
        for name, counts in summary["kernel_counts"].items():
            if counts["device_ms_per_step"] is not None:
                first = counts["first_step"] or {}
                top = "; ".join(f"{k['share']:.0%} {k['kernel'][:60]} ({k['launches_per_step']:.0f} per step)"
                                for k in counts["top_kernels"][:3])
                print(f"L={window_size:2d} {name}: first step {first.get('kernels')} kernels, device busy "
                      f"{first.get('device_ms') or 0:.1f} ms; device busy {counts['device_ms_per_step']:.2f} ms per "
                      f"profiled step after it; most time: {top}", flush=True)
            print(f"L={window_size:2d} {name}: host time of a profiled step's top-level calls: " + ", ".join(
                f"{kind} {h['calls_per_step']:.0f} calls, {h['host_ms_per_step']:.2f} ms ({h['host_us_per_call']:.1f} "
                f"µs a call)" for kind, h in counts["host"].items() if h["host_us_per_call"] is not None), flush=True)
    line = (f"L={window_size:2d}, {summary['batch_size']} windows per batch: transformer "
            f"{speeds['transformer']:.1f} tokens/s")
    for name, key, label in (("rfa", "speedup", "RFA"), (FUSED, "fused_speedup", "RFA fused")):
        if name in speeds:
            line += f", {label} {speeds[name]:.1f} tokens/s ({label}/transformer {summary[key]:.2f}x)"
    if CEILING in speeds:
        line += f"; ceiling/transformer {summary['ceiling_speedup']:.2f}x"
        if "rfa_share_of_ceiling" in summary:
            line += f", RFA/ceiling {summary['rfa_share_of_ceiling']:.2f}"
    if "fused_hypotheses" in summary:
        line += (f"; fused hypotheses differing from the eager ones: {summary['fused_hypotheses']['differing']} of "
                 f"{summary['fused_hypotheses']['windows']} windows")
    line += "".join(f"; {name} {speeds[name]:.1f} tokens/s ({speeds[name] / speeds['transformer']:.2f}x the "
                    f"transformer's" + (f", {speeds[name] / speeds['rfa']:.2f} of RFA's" if "rfa" in speeds else "")
                    + ")" for name in gated)
    print(line + f"; cache reordering {summary['reorder_share']['transformer']:.0%} of the transformer's forward "
          f"time", flush=True)
    return summary


def run(args) -> Dict:
    import rfa_doc_mt  # noqa: F401  (registers the task and the models)

    from ..models import doc_transformer, rfa_transformer  # noqa: F401  (the two models compared)
    from ..modules.random_feature_attention.layers import set_decoding_path

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.cross_read_launch:
        from ..modules.random_feature_attention import fused

        try:
            fused.CROSS_READ_LAUNCH.update(fused.parse_cross_read_launch(args.cross_read_launch))
        except ValueError as error:
            raise SystemExit(f"--cross-read-launch: {error}")
    device = args.device
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    window_sizes = [int(x) for x in args.window_sizes.split(",")] if args.window_sizes else \
        list(QUICK_WINDOW_SIZES if args.quick else WINDOW_SIZES)
    batch_scale = args.batch_scale if args.batch_scale is not None else (1 / 32 if args.quick else 1 / 8)
    num_batches = args.batches if args.batches is not None else (1 if args.quick else 2)
    rfa_gates = [gate.strip() for gate in (args.rfa_gates or "").split(",") if gate.strip() not in ("", "none")]
    unknown = [gate for gate in rfa_gates if gate not in GATE_VARIANTS]
    if unknown:
        raise SystemExit(f"--rfa-gates {args.rfa_gates}: unknown gates {unknown}; expected {GATE_VARIANTS}")
    variants = parse_variants(args.rfa_variant or [])
    clash = sorted(set(variants) & {f"rfa-{gate}" for gate in rfa_gates})
    if clash:
        raise SystemExit(f"--rfa-variant names {clash} as --rfa-gates does: give the variant another name")
    if args.batch_sizes:
        explicit = [int(x) for x in args.batch_sizes.split(",")]
        if min(explicit) < 1:
            raise SystemExit(f"--batch-sizes {args.batch_sizes}: every batch needs at least one window")
        batch_sizes = {L: explicit for L in window_sizes}
    else:
        batch_sizes = {L: [scaled_batch_size(L, batch_scale)] for L in window_sizes}
    paths = decoding_paths(args)
    architectures = {name: arch + ("_tiny" if args.tiny else "") for name, arch in MODELS.items()}
    result = {"machine": machine_info(device), "commit": commit_info(),
              "settings": {"data": os.path.abspath(args.data), "corpus": read_prep(args.data).get("corpus"),
                           "split": args.split, "beam": args.beam,
                           "window_sizes": window_sizes, "batch_scale": batch_scale,
                           "batch_sizes": batch_sizes,
                           "paper_batch_sizes": {L: PAPER_BATCH_SIZES[L] for L in window_sizes},
                           "batches_per_window_size": num_batches, "models": architectures,
                           "rfa_decoding": {DECODING_PATHS[path]: path for path in paths}, "dtype": args.dtype,
                           "rfa_gates": rfa_gates, "rfa_variants": variants,
                           "cross_read_launch": args.cross_read_launch or "default",
                           "rfa_variant_decoding": variant_path(paths),
                           "seed": args.seed, "quick": bool(args.quick), "tiny": bool(args.tiny),
                           "kernel_counts": args.kernel_counts and
                           f"steps {[2 ** i for i in range(args.kernel_counts)]} of the first batch, and its first "
                           "step (0) apart: "
                           "device events (kernels, copies, fills) and top-level ATen operators of the decoder "
                           "call and the cache reordering; the device's busy time per step and the kernels that "
                           "take most of it",
                           "length": "forced to the reference window length",
                           "ceiling": None if args.no_ceiling else
                           "the transformer whose decoder attentions keep their per-token projections and "
                           "attend to nothing: bounds what any attention with these projections can decode",
                           "tokens_per_second": "reference tokens (EOS included) / forward seconds"},
              "runs": [], "summary": []}
    for window_size in window_sizes:
        task, dataset = load_windows(args.data, args.split, window_size, args.max_positions)
        models = {"transformer": build_model(task, architectures["transformer"], args.seed, args.max_positions,
                                             device, dtype)}
        for path in paths:  # the same weights (the same seed) on each decoding path
            models[DECODING_PATHS[path]] = build_model(task, architectures["rfa"], args.seed, args.max_positions,
                                                       device, dtype)
            set_decoding_path(models[DECODING_PATHS[path]], path)
        for gate in rfa_gates:
            models[f"rfa-{gate}"] = build_model(task, architectures["rfa"], args.seed, args.max_positions, device,
                                                dtype, options=["--rfa-gate", gate])
            set_decoding_path(models[f"rfa-{gate}"], variant_path(paths))
        for name, options in variants.items():
            models[name] = build_model(task, architectures["rfa"], args.seed, args.max_positions, device, dtype,
                                       options=options)
            set_decoding_path(models[name], variant_path(paths))
        if not args.no_ceiling:
            models[CEILING] = remove_decoder_attention(
                build_model(task, architectures["transformer"], args.seed, args.max_positions, device, dtype))
        for position, batch_size in enumerate(batch_sizes[window_size]):
            batches = choose_batches(dataset, window_size, batch_size, num_batches)
            if position == 0 and not args.tiny:  # --tiny checks the code paths: no measurement to warm up for
                for name, model in models.items():  # warm-up: first calls allocate and pick kernels
                    decode_batch(model, dataset, batches[0][:max(1, batch_size // 4)], args.beam, device)
            result["summary"].append(measure_setting(models, dataset, window_size, batch_size, batches, args,
                                                     result["runs"]))
        del models
        if args.out:  # what is measured so far, in case the run is cut short
            measured = window_sizes[:window_sizes.index(window_size) + 1]
            write_json(dict(result, partial=partial_note(measured, window_sizes)), args.out)
    return record_load_at_end(result)


def partial_note(measured: List[int], planned: List[int]) -> str:
    """What a run cut short kept, for its JSON (written after each L): ``"L = 1, 15 of 1, 15, 4"``.
    The final JSON has no note."""
    return f"L = {', '.join(map(str, measured))} of {', '.join(map(str, planned))}"


def parse_variants(specs: List[str]) -> Dict[str, List[str]]:
    """``["local=--rfa-causal-local-heads 4", ...]`` → {"rfa-local": ["--rfa-causal-local-heads", "4"], ...}."""
    import shlex

    variants: Dict[str, List[str]] = {}
    for spec in specs:
        name, equals, options = spec.partition("=")
        if not equals or not name.strip() or not options.strip() or not name.strip().replace("-", "").isalnum():
            raise SystemExit(f"--rfa-variant {spec!r}: expected NAME=\"OPTIONS\" (a name of letters, digits and "
                             "dashes, and the RFA model's options)")
        key = f"rfa-{name.strip()}"
        if key in variants:
            raise SystemExit(f"--rfa-variant: {name.strip()!r} is given twice")
        variants[key] = shlex.split(options)
    return variants


def variant_path(paths: List[str]) -> str:
    """The decoding path of the ``--rfa-gates`` and ``--rfa-variant`` models: fused when RFA's paths
    include it (what a GPU decodes with), else eager."""
    return "fused" if "fused" in paths else "eager"


def decoding_paths(args) -> List[str]:
    """RFA's decoding paths to measure (``--rfa-decoding``): both on a GPU, eager on a CPU by default."""
    from ..modules.random_feature_attention.fused import triton_available

    default = "eager"
    if args.device.startswith("cuda"):
        if triton_available():
            default = "eager,fused"
        elif not args.rfa_decoding:
            print("note: triton is not installed: RFA decodes on the eager path only", flush=True)
    paths = [path.strip() for path in (args.rfa_decoding or default).split(",") if path.strip()]
    unknown = sorted(set(paths) - set(DECODING_PATHS))
    if unknown or not paths:
        raise SystemExit(f"--rfa-decoding {args.rfa_decoding}: expected eager and/or fused")
    if "fused" in paths and not args.device.startswith("cuda") and os.environ.get("TRITON_INTERPRET") != "1":
        raise SystemExit("--rfa-decoding fused on a CPU runs Triton's interpreter: set TRITON_INTERPRET=1")
    return paths


# ---------------------------------------------------------------------------------------
# plot (Figure 4)


def plot(json_path: str, out: str) -> None:
    from ..provenance import pyplot

    plt = pyplot()

    with open(json_path) as f:
        result = json.load(f)
    summary = sorted(result["summary"], key=lambda s: (s["window_size"], s["batch_size"]))
    sizes = [s["window_size"] for s in summary]
    if len(set(sizes)) < len(sizes):
        return plot_batch_curve(result, summary, out, plt)
    figure, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
    if all("speedup" in s for s in summary):
        left.plot(sizes, [s["speedup"] for s in summary], marker="o", label="forward time")
        left.plot(sizes, [s["wall_speedup"] for s in summary], marker="x", linestyle="--", label="wall time")
    if all("fused_speedup" in s for s in summary):
        left.plot(sizes, [s["fused_speedup"] for s in summary], marker="D", color="tab:green",
                  label="fused step, forward time")
    variants = sorted({name for s in summary for name in s.get("over_transformer", {})})
    for name in variants:  # --rfa-gates, --rfa-variant
        if all(name in s.get("over_transformer", {}) for s in summary):
            left.plot(sizes, [s["over_transformer"][name] for s in summary], marker="v", label=name)
    if all("ceiling_speedup" in s for s in summary):
        left.plot(sizes, [s["ceiling_speedup"] for s in summary], marker="^", linestyle=":", color="grey",
                  label="ceiling: projections, no attention (bound)")
        for size, s in zip(sizes, summary):
            if "rfa_share_of_ceiling" in s:
                left.annotate(f"{s['rfa_share_of_ceiling']:.2f}", (size, s["speedup"]), textcoords="offset points",
                              xytext=(0, 6), ha="center", fontsize=7)
    left.axhline(1.0, color="grey", linewidth=0.8)
    left.set_xlabel("window size L (sentences)")
    left.set_ylabel("RFA speedup over transformer\n(labels: RFA ÷ ceiling)")
    left.legend()
    for name, style in (("transformer", "s-"), ("rfa", "o-"), (FUSED, "D-"), (CEILING, "^:")) + tuple(
            (name, "v-") for name in variants):
        if all(name in s["tokens_per_second"] for s in summary):
            right.plot(sizes, [s["tokens_per_second"][name] for s in summary], style, label=name)
    right.set_xlabel("window size L (sentences)")
    right.set_ylabel("decoded tokens / second")
    right.set_yscale("log")
    right.legend()
    figure.suptitle(f"Decoding speed, beam {result['settings']['beam']}, {_device_label(result)}", fontsize=9)
    figure.tight_layout()
    save_figure(figure, out)


def _device_label(result: Dict) -> str:
    machine = result["machine"]
    threads = machine.get("torch_threads")
    return machine.get("gpu") or f"{machine.get('cpu', '?')} ({threads} thread{'' if threads == 1 else 's'})"


def plot_batch_curve(result: Dict, summary: List[Dict], out: str, plt) -> None:
    """Several batch sizes per L (``run --batch-sizes``): speedups and tokens/s against the
    windows per batch, one line per L."""
    figure, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
    for window_size in sorted({s["window_size"] for s in summary}):
        rows = [s for s in summary if s["window_size"] == window_size]
        batches = [s["batch_size"] for s in rows]
        for key, label in (("speedup", "RFA"), ("fused_speedup", "RFA fused")):
            if all(key in s for s in rows):
                left.plot(batches, [s[key] for s in rows], marker="o", label=f"{label} / transformer, L={window_size}")
        if all("ceiling_speedup" in s for s in rows):
            left.plot(batches, [s["ceiling_speedup"] for s in rows], marker="^", linestyle=":",
                      label=f"ceiling / transformer, L={window_size}")
        for name, style in (("transformer", "s-"), ("rfa", "o-"), (FUSED, "D-"), (CEILING, "^:")):
            if all(name in s["tokens_per_second"] for s in rows):
                right.plot(batches, [s["tokens_per_second"][name] for s in rows], style,
                           label=f"{name}, L={window_size}")
    for axis in (left, right):
        axis.set_xscale("log", base=2)
        axis.set_xlabel("windows per batch")
        axis.legend(fontsize=7)
    left.axhline(1.0, color="grey", linewidth=0.8)
    left.set_ylabel("speedup over transformer")
    right.set_ylabel("decoded tokens / second")
    figure.suptitle(f"Decoding speed against the batch, beam {result['settings']['beam']}, "
                    f"{_device_label(result)}", fontsize=9)
    figure.tight_layout()
    save_figure(figure, out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run", help="decode and time; write JSON")
    run_parser.add_argument("--data", required=True, help="prepared corpus (python -m rfa_doc_mt.data.prepare)")
    run_parser.add_argument("--split", default="test")
    run_parser.add_argument("--out", required=True, help="JSON file to write")
    run_parser.add_argument("--window-sizes", help=f"comma-separated L values (default {WINDOW_SIZES}; "
                                                   f"--quick: {QUICK_WINDOW_SIZES})")
    run_parser.add_argument("--batch-scale", type=float,
                            help="fraction of the paper's Table 3 batch sizes (default 1/8; --quick 1/32)")
    run_parser.add_argument("--batch-sizes", metavar="N[,N...]",
                            help="windows per batch, each measured in turn at every L (a batch curve; "
                                 "overrides --batch-scale)")
    run_parser.add_argument("--batches", type=int, help="timed batches per L (default 2; --quick 1)")
    run_parser.add_argument("--beam", type=int, default=4)
    run_parser.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    run_parser.add_argument("--dtype", choices=["fp32", "fp16", "bf16"], default="fp32")
    run_parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    run_parser.add_argument("--seed", type=int, default=1)
    run_parser.add_argument("--max-positions", type=int, default=2048)
    run_parser.add_argument("--quick", action="store_true", help="L in {1,4,15}, small batches, one batch each")
    run_parser.add_argument("--profile", type=int, default=0, metavar="N",
                            help="profile one batch per model and L; keep its N most expensive operations")
    run_parser.add_argument("--rfa-decoding", metavar="PATH[,PATH]",
                            help="RFA's decoding paths, eager and/or fused (default: both with --device cuda, eager "
                                 "on a CPU; fused on a CPU needs TRITON_INTERPRET=1)")
    run_parser.add_argument("--kernel-counts", type=int, default=0, metavar="N",
                            help="profile decoder steps 1, 2, 4, ... (N of them) of the first batch per model and L: "
                                 "kernels and operators launched per step, and on a GPU the device time they take")
    run_parser.add_argument("--tiny", action="store_true",
                            help="the *_tiny architectures: a fast check of the code paths, not a measurement")
    run_parser.add_argument("--rfa-gates", metavar="GATE[,GATE...]",
                            help="also decode RFA with these causal gates (sgate, sgate-avg, token, feature), "
                                 "beside ungated RFA: what a gate costs in decoding")
    run_parser.add_argument("--rfa-variant", action="append", metavar='NAME="OPTIONS"',
                            help="also decode RFA built with these model options (repeatable), e.g. "
                                 'local="--rfa-gate sgate --rfa-causal-local-heads 4 --rfa-cross-local-heads 4"')
    run_parser.add_argument("--cross-read-launch", metavar="block=B,num_warps=W,num_stages=S", default="",
                            help="the fused cross read's launch settings (as readout_bandwidth --sweep found them "
                                 "fastest on this GPU; default: a block of 64 projections, Triton's warps and "
                                 "stages)")
    run_parser.add_argument("--no-ceiling", action="store_true",
                            help="skip the third model, the transformer without decoder attention "
                                 "(the bound on any attention's speedup)")
    plot_parser = commands.add_parser("plot", help="draw Figure 4 from a JSON written by run")
    plot_parser.add_argument("json")
    plot_parser.add_argument("--out", required=True, help="PNG file to write")
    args = parser.parse_args(argv)
    if args.command == "run":
        if args.device.startswith("cuda") and not torch.cuda.is_available():
            parser.error("--device cuda: no CUDA device is available")
        write_json(run(args), args.out)
        print(f"wrote {args.out}")
    else:
        plot(args.json, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
