"""Decoding cost of the recurrent-memory transformer as documents grow (Feng et al. 2022, §5.4, Figure 8).

    python -m rfa_doc_mt.bench.memory_cost run --out cost.json [--quick] [--device cuda]
    python -m rfa_doc_mt.bench.memory_cost plot cost.json --out cost.png

``run`` decodes dummy documents of 100 to 2000 target tokens (paper: random source tokens, the
same number of target tokens) with three models at paper sizes (transformer-base: 6+6 layers,
512, FFN 2048, 8 heads), randomly initialised (only cost is measured):

* ``memory``: ``memory_doc_transformer`` (16 slots, top encoder and decoder layer), the
  document cut into chunks of ``--chunk`` tokens (paper: 100, "sentences") decoded in order
  through the path ``fairseq-generate`` takes (generation/memory_decoding.py): beam search with
  the current memories, then the memory update (encoder pass and teacher-forced decoder pass
  over the best translation).
* ``sentence``: ``doc_transformer`` of the same size over the same chunks, independently.
* ``concatenation``: ``doc_transformer`` over the whole document at once (the document-level
  transformer of the paper's figure).

Every chunk (document) is decoded to exactly its source length by fairseq's own beam search
(``SequenceGenerator`` with ``min_len`` = ``max_len`` = length: no EOS before, EOS there), so all
models decode the same number of tokens. Measured per document: wall time of the whole decode
and peak memory above what was held before it: on CUDA ``torch.cuda.max_memory_allocated``, on
CPU the process's peak resident memory (``VmHWM``, reset through ``/proc/self/clear_refs``),
which also counts allocator caching and is coarser. Models alternate per document length, one
process, same inputs, after a warm-up. The JSON holds the machine, the commit, the settings and
every run; ``plot`` draws Figure 8 from it. On a CPU shared with other work, wall time is noisy:
the process's CPU time is recorded too (``cpu_seconds``), and ``--threads 1`` steadies both.
"""

import argparse
import math
import re
import sys
import time
from typing import Dict, List, Optional

import torch

from ..models.build import dictionary_task, toy_dictionary
from ..provenance import commit_info, machine_info, record_load_at_end, save_figure, write_json

LENGTHS = (100, 250, 500, 1000, 1500, 2000)
QUICK_LENGTHS = (100, 500, 1000)
MODELS = ("memory", "sentence", "concatenation")


def build_model(task, name: str, seed: int, max_positions: int, device: str, dtype: torch.dtype):
    from ..models.build import build_model as build

    arch = "memory_doc_transformer" if name == "memory" else "doc_transformer"
    # transformer-base for all three, as Feng et al. 2022's baseline (doc_transformer's default FFN is 1024)
    model = build(arch, task, seed=seed, max_source_positions=max_positions, max_target_positions=max_positions,
                  share_all_embeddings=True, encoder_ffn_embed_dim=2048, decoder_ffn_embed_dim=2048)
    return model.to(device=device, dtype=dtype).eval()


def dummy_document(length: int, vocabulary: int, seed: int) -> torch.Tensor:
    """Random source tokens (no special symbols), as the paper's dummy inputs."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(4, 4 + vocabulary, (length,), generator=generator)


def chunks(document: torch.Tensor, size: int) -> List[torch.Tensor]:
    return [document[start:start + size] for start in range(0, len(document), size)]


# ---------------------------------------------------------------------------------------
# measuring


class PeakMemory:
    """Peak memory above the level at ``start()``: CUDA allocations, or the CPU process's resident
    memory (VmHWM after a reset of the high-water mark)."""

    def __init__(self, device: str):
        self.device = device

    @staticmethod
    def _status(field: str) -> int:
        with open("/proc/self/status") as f:
            return 1024 * int(re.search(rf"{field}:\s+(\d+)", f.read()).group(1))

    def start(self):
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats(self.device)
            self.base = torch.cuda.memory_allocated(self.device)
        else:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # resets VmHWM to the current resident size
            self.base = self._status("VmRSS")

    def peak(self) -> int:
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
            return torch.cuda.max_memory_allocated(self.device) - self.base
        return self._status("VmHWM") - self.base


def sync(device: str):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


@torch.no_grad()
def decode(name: str, model, document: torch.Tensor, chunk: int, beam: int, device: str) -> int:
    """Decode ``document`` as model ``name`` does; returns the number of target tokens (EOS
    included, once per decoded sequence)."""
    from fairseq.sequence_generator import SequenceGenerator

    from ..generation.memory_decoding import DocumentMemories, inference_step

    dictionary = model.decoder.dictionary
    pieces = [document] if name == "concatenation" else chunks(document, chunk)
    memories = DocumentMemories()
    tokens = 0
    for position, piece in enumerate(pieces):
        source = torch.cat([piece, piece.new_tensor([dictionary.eos()])]).to(device)
        length = len(piece)
        generator = SequenceGenerator([model], dictionary, beam_size=beam, max_len_a=0, max_len_b=length,
                                      min_len=length, max_len=length + 2)
        sample = {"id": torch.tensor([position]),
                  "net_input": {"src_tokens": source[None], "src_lengths": torch.tensor([len(source)], device=device)}}
        if name == "memory":
            sample["window"] = {"document": torch.tensor([0]), "position": torch.tensor([position])}
            hypotheses = inference_step(memories, generator, [model], sample)
        else:
            hypotheses = generator.generate([model], sample)
        produced = len(hypotheses[0][0]["tokens"])
        if produced != length + 1:
            raise RuntimeError(f"{name}: decoded {produced} tokens, expected {length + 1}")
        tokens += produced
    return tokens


def measure(name: str, model, document: torch.Tensor, chunk: int, beam: int, device: str) -> Dict:
    memory = PeakMemory(device)
    memory.start()
    sync(device)
    start, cpu_start = time.perf_counter(), time.process_time()
    tokens = decode(name, model, document, chunk, beam, device)
    sync(device)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    return {"model": name, "document_tokens": len(document), "target_tokens": tokens, "seconds": seconds,
            "seconds_per_token": seconds / tokens, "cpu_seconds": cpu_seconds,
            "cpu_seconds_per_token": cpu_seconds / tokens, "peak_memory_bytes": memory.peak()}


# ---------------------------------------------------------------------------------------
# run


def run(args) -> Dict:
    import rfa_doc_mt  # noqa: F401  (registers the task and the models)

    if args.threads:
        torch.set_num_threads(args.threads)
    device = args.device
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    lengths = [int(x) for x in args.lengths.split(",")] if args.lengths else \
        list(QUICK_LENGTHS if args.quick else LENGTHS)
    repeats = args.repeats if args.repeats is not None else (1 if args.quick else 2)
    max_positions = max(lengths) + 8
    task = dictionary_task(*toy_dictionary(args.vocabulary))
    models = {name: build_model(task, name, args.seed, max_positions, device, dtype) for name in MODELS}
    result = {"machine": machine_info(device), "commit": commit_info(),
              "settings": {"lengths": lengths, "chunk_tokens": args.chunk, "beam": args.beam,
                           "vocabulary": args.vocabulary, "dtype": args.dtype, "repeats": repeats,
                           "seed": args.seed, "quick": bool(args.quick), "max_positions": max_positions,
                           "models": {"memory": "memory_doc_transformer (16 slots, top encoder + decoder layer)",
                                      "sentence": f"doc_transformer over chunks of {args.chunk} tokens",
                                      "concatenation": "doc_transformer over the whole document"},
                           "sizes": "transformer-base: 6+6 layers, 512, FFN 2048, 8 heads, shared embeddings",
                           "length": "every chunk / document decoded to exactly its source length",
                           "peak_memory": "CUDA max_memory_allocated above the start" if device.startswith("cuda")
                           else "process peak resident memory (VmHWM) above the start"},
              "runs": [], "summary": []}
    warm_up = dummy_document(min(args.chunk, min(lengths)) + 10, args.vocabulary, args.seed + 999)
    for name, model in models.items():  # first calls allocate and pick kernels
        decode(name, model, warm_up, args.chunk, args.beam, device)
    for length in lengths:
        document = dummy_document(length, args.vocabulary, args.seed + length)
        totals = {name: [] for name in MODELS}
        for repeat in range(repeats):
            order = list(MODELS) if (repeat + length) % 2 == 0 else list(reversed(MODELS))
            for name in order:
                figures = measure(name, models[name], document, args.chunk, args.beam, device)
                figures["repeat"] = repeat
                result["runs"].append(figures)
                totals[name].append(figures)
                print(f"{length:5d} tokens {name:13s} {figures['seconds']:8.2f} s "
                      f"{1000 * figures['seconds_per_token']:7.2f} ms/token "
                      f"({1000 * figures['cpu_seconds_per_token']:7.2f} ms CPU) "
                      f"peak {figures['peak_memory_bytes'] / 2 ** 20:8.1f} MiB", flush=True)
        summary = {"document_tokens": length, "peak_memory_bytes": {
            name: max(r["peak_memory_bytes"] for r in runs) for name, runs in totals.items()}}
        for key in ("seconds_per_token", "cpu_seconds_per_token"):  # best of the repeats
            summary[key] = {name: min(r[key] for r in runs) for name, runs in totals.items()}
            summary[f"{key}_ratio_memory_to_sentence"] = summary[key]["memory"] / summary[key]["sentence"]
        result["summary"].append(summary)
        print(f"{length:5d} tokens: memory/sentence time per token "
              f"{summary['seconds_per_token_ratio_memory_to_sentence']:.2f}x wall, "
              f"{summary['cpu_seconds_per_token_ratio_memory_to_sentence']:.2f}x CPU time", flush=True)
    return record_load_at_end(result)


# ---------------------------------------------------------------------------------------
# plot (Figure 8)


def plot(json_path: str, out: str) -> None:
    import json

    from ..provenance import pyplot

    plt = pyplot()

    with open(json_path) as f:
        result = json.load(f)
    summary = sorted(result["summary"], key=lambda s: s["document_tokens"])
    lengths = [s["document_tokens"] for s in summary]
    figure, (space, time_axis) = plt.subplots(1, 2, figsize=(9, 3.4))
    styles = {"memory": "o-", "sentence": "s--", "concatenation": "^-"}
    on_gpu = str(result["machine"].get("device", "cpu")).startswith("cuda")
    # a shared CPU makes wall time noisy: plot the process's CPU time there
    time_key, time_label = ("seconds_per_token", "wall") if on_gpu else ("cpu_seconds_per_token", "CPU")
    for name in MODELS:
        space.plot(lengths, [s["peak_memory_bytes"][name] / 2 ** 20 for s in summary], styles[name], label=name)
        time_axis.plot(lengths, [1000 * s[time_key][name] for s in summary], styles[name], label=name)
    space.set_xlabel("document length (target tokens)")
    space.set_ylabel("peak memory above the model (MiB)")
    time_axis.set_xlabel("document length (target tokens)")
    time_axis.set_ylabel(f"decoding {time_label} time per token (ms)")
    space.legend()
    machine = result["machine"]
    device = machine.get("gpu") or f"{machine.get('cpu', '?')} ({machine.get('torch_threads')} threads)"
    settings = result["settings"]
    figure.suptitle(f"Decoding cost, beam {settings['beam']}, chunks of {settings['chunk_tokens']} tokens, "
                    f"{device}", fontsize=9)
    figure.tight_layout()
    save_figure(figure, out)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run", help="decode and measure; write JSON")
    run_parser.add_argument("--out", required=True, help="JSON file to write")
    run_parser.add_argument("--lengths", help=f"comma-separated document lengths in tokens (default {LENGTHS}; "
                                              f"--quick: {QUICK_LENGTHS})")
    run_parser.add_argument("--chunk", type=int, default=100, help="tokens per sentence (paper: 100)")
    run_parser.add_argument("--beam", type=int, default=4)
    run_parser.add_argument("--vocabulary", type=int, default=10000,
                            help="dummy vocabulary size (paper: 30K BPE; smaller keeps CPU runs short)")
    run_parser.add_argument("--repeats", type=int, help="timed decodes per model and length (default 2; --quick 1)")
    run_parser.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    run_parser.add_argument("--dtype", choices=["fp32", "fp16", "bf16"], default="fp32")
    run_parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    run_parser.add_argument("--seed", type=int, default=1)
    run_parser.add_argument("--quick", action="store_true", help=f"lengths {QUICK_LENGTHS}, one repeat")
    plot_parser = commands.add_parser("plot", help="draw Figure 8 from a JSON written by run")
    plot_parser.add_argument("json")
    plot_parser.add_argument("--out", required=True, help="PNG file to write")
    args = parser.parse_args(argv)
    if args.command == "run":
        if args.device.startswith("cuda") and not torch.cuda.is_available():
            parser.error("--device cuda: no CUDA device is available")
        if args.chunk < 1 or math.isnan(args.chunk):
            parser.error("--chunk must be positive")
        write_json(run(args), args.out)
        print(f"wrote {args.out}")
    else:
        plot(args.json, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
