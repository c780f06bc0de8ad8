"""Peak training memory of full attention against LSH attention as the context grows (paper
003, Table 2, "Peak Mem.").

    python -m rfa_doc_mt.bench.training_memory run --out memory.json [--quick] [--device cuda]
    python -m rfa_doc_mt.bench.training_memory plot memory.json --out memory.png

``run`` measures one training step (forward + backward of a cross-entropy loss; no optimiser
state) for every attention setting of Petrick et al. 2022, Table 2 and context size k:

* ``full``: the concatenation transformer (``lsh_doc_transformer --lsh-attention none``, i.e.
  ``doc_transformer``); ``self``: LSH in encoder and decoder self-attention, 1 hash round;
  ``self-cross``: LSH in all three attentions, 4 rounds. Chunks of 10 and k + 1 hash classes
  rounded up to even (Petrick et al. 2022, §5.2). Paper sizes (6+6 layers, 512, 8 heads), dropout 0.3.
* A fixed token budget per batch, as in the paper ("all systems use the same batch size"):
  windows of L = k + 1 sentences of ``--sentence-length`` tokens (separators and EOS
  included), ``--tokens / (L * sentence-length)`` windows a batch, so every batch holds the
  same number of source and target tokens (the defaults make the division exact for
  k in {0, 3, 9, 12}). Sentences of one length: no padding, which the paper's batches have.
* Every measurement runs in a fresh process, one after the other. On CPU the figure is the
  process's peak resident memory (``resource.getrusage``, max RSS); the *training-step* part
  is that peak minus the peak of a baseline process that built the same model and batch and
  stopped there. With ``--device cuda`` it is ``torch.cuda.max_memory_allocated`` during the
  step minus the memory allocated before it. The step part holds the activations kept for the
  backward pass (attention, feed-forward, embeddings and the output softmax, which do not
  depend on k under a fixed token budget) and the gradients (the same for every k).
* Beside it, allocator-independent: the bytes of the tensors the forward pass keeps for the
  backward pass (unique storages seen by a saved-tensors hook), ``saved_for_backward_mb``.
* Full attention is fairseq's: with attention dropout 0 (the architectures' default) its
  self-attention runs torch's fused scaled-dot-product kernel, which keeps no T x T matrix,
  so only its cross-attention grows quadratically; ``--attention-dropout 0.1`` forces the
  quadratic path everywhere (what Petrick et al. 2022's baseline did).

The JSON holds the machine, the commit, the settings, every run and a summary (step memory at
each k relative to k = 0, per attention); ``plot`` draws it in a separate step.
"""

import argparse
import json
import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, List

import torch

from ..provenance import commit_info, machine_info, save_figure, write_json

CONTEXT_SIZES = (0, 3, 9, 12)
ATTENTIONS = ("full", "self", "self-cross")
LSH_SETTINGS = {  # Petrick et al. 2022, §5.2
    "full": dict(lsh_attention="none", rounds=1),
    "self": dict(lsh_attention="encoder-self,decoder-self", rounds=1),
    "self-cross": dict(lsh_attention="encoder-self,decoder-self,cross", rounds=4),
}
CHUNK_SIZE = 10
FIGURES = ("step_mb", "peak_mb", "saved_for_backward_mb")


# ---------------------------------------------------------------------------------------
# one measurement (a fresh process each)


def build(attention: str, context_size: int, args):
    """The model (train mode) and one batch of windows for ``attention`` at context size k."""
    from ..models.build import build_model, dictionary_task, toy_dictionary

    dictionary, separator = toy_dictionary(args.vocabulary - 5)  # with the 4 special symbols and <sep>
    extra = {} if args.attention_dropout is None else {"attention_dropout": args.attention_dropout}
    # context_size: the model takes Petrick et al. 2022's number of hash classes from it
    model = build_model(args.arch, dictionary_task(dictionary, separator), seed=args.seed, share_all_embeddings=True,
                        max_source_positions=2048, max_target_positions=2048, context_size=context_size,
                        lsh_attention=LSH_SETTINGS[attention]["lsh_attention"],
                        lsh_rounds=LSH_SETTINGS[attention]["rounds"], lsh_chunk_size=CHUNK_SIZE, **extra)
    model, model_args = model.to(args.device).train(), model.args

    window_tokens = (context_size + 1) * args.sentence_length
    windows = max(1, args.tokens // window_tokens)
    generator = torch.Generator().manual_seed(args.seed)

    def window_batch():
        tokens = torch.randint(dictionary.nspecial, len(dictionary) - 1, (windows, window_tokens), generator=generator)
        tokens[:, args.sentence_length - 1::args.sentence_length] = separator
        tokens[:, -1] = dictionary.eos()
        return tokens.to(args.device)

    source, target = window_batch(), window_batch()
    prev_output_tokens = torch.cat([target[:, -1:], target[:, :-1]], dim=1)  # EOS first, as fairseq shifts
    batch = dict(src_tokens=source, src_lengths=torch.full((windows,), window_tokens, device=args.device),
                 prev_output_tokens=prev_output_tokens, target=target)
    settings = dict(windows=windows, window_tokens=window_tokens, tokens=windows * window_tokens,
                    hash_classes=model_args.lsh_hash_classes, rounds=model_args.lsh_rounds,
                    lsh_attention=model_args.lsh_attention,
                    attention_dropout=model_args.attention_dropout,
                    parameters=sum(p.numel() for p in model.parameters()))
    return model, batch, settings


def training_step(model, batch) -> float:
    """Forward + backward; returns the MB of tensors the forward pass kept for the backward pass
    (unique storages, counted by a saved-tensors hook: exact, whatever the allocator does)."""
    kept = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        kept[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        logits = model(batch["src_tokens"], batch["src_lengths"], batch["prev_output_tokens"])[0]
        loss = torch.nn.functional.cross_entropy(logits.float().view(-1, logits.shape[-1]), batch["target"].view(-1),
                                                 reduction="sum")
    loss.backward()
    return sum(kept.values()) / 2**20


def max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def measure(args) -> Dict:
    """Run in its own process: build, then (unless --baseline) one training step."""
    if args.threads:
        torch.set_num_threads(args.threads)
    model, batch, settings = build(args.attention, args.context_size, args)
    result = dict(attention=args.attention, context_size=args.context_size, baseline=args.baseline, **settings)
    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        result["allocated_before_mb"] = torch.cuda.memory_allocated() / 2**20
    if not args.baseline:
        start = time.perf_counter()
        result["saved_for_backward_mb"] = training_step(model, batch)
        if cuda:
            torch.cuda.synchronize()
            result["peak_allocated_mb"] = torch.cuda.max_memory_allocated() / 2**20
            result["step_mb"] = result["peak_allocated_mb"] - result["allocated_before_mb"]
        result["seconds"] = time.perf_counter() - start
    result["max_rss_mb"] = max_rss_mb()
    return result


# ---------------------------------------------------------------------------------------
# the sweep


def run_fresh(attention: str, context_size: int, baseline: bool, args) -> Dict:
    """One measurement in a fresh Python process (peak RSS is per process)."""
    command = [sys.executable, "-m", "rfa_doc_mt.bench.training_memory", "measure", "--attention", attention,
               "--context-size", str(context_size), "--arch", args.arch, "--tokens", str(args.tokens),
               "--sentence-length", str(args.sentence_length), "--vocabulary", str(args.vocabulary),
               "--device", args.device, "--seed", str(args.seed)]
    if args.threads:
        command += ["--threads", str(args.threads)]
    if args.attention_dropout is not None:
        command += ["--attention-dropout", str(args.attention_dropout)]
    if baseline:
        command.append("--baseline")
    completed = subprocess.run(command, capture_output=True, text=True)
    if completed.returncode != 0:
        raise SystemExit(f"measurement failed ({attention}, k={context_size}):\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def summarise(runs: List[Dict]) -> Dict:
    """Per attention and k: the figures and their ratio to the smallest k measured (k = 0)."""
    summary = {}
    for attention in dict.fromkeys(r["attention"] for r in runs):
        by_k = {r["context_size"]: r for r in runs if r["attention"] == attention}
        base = by_k[min(by_k)]
        summary[attention] = {str(k): {
            "relative_to_context_size": min(by_k),
            **{name: r[name] for name in FIGURES},
            **{f"{name}_relative": r[name] / base[name] if base[name] > 0 else None for name in FIGURES}}
            for k, r in sorted(by_k.items())}
    return summary


def run(args) -> Dict:
    contexts = [int(k) for k in args.context_sizes.split(",")]
    attentions = args.attentions.split(",")
    runs = []
    for attention in attentions:
        for context_size in contexts:
            if args.device.startswith("cuda"):
                step = run_fresh(attention, context_size, False, args)
                step["peak_mb"] = step["peak_allocated_mb"]
            else:
                # two processes at once: the peak RSS of each is its own (their seconds are not timings)
                with ThreadPoolExecutor(2) as pool:
                    step, baseline = pool.map(lambda baseline: run_fresh(attention, context_size, baseline, args),
                                              (False, True))
                step["baseline_max_rss_mb"] = baseline["max_rss_mb"]
                step["peak_mb"] = step["max_rss_mb"]
                step["step_mb"] = step["max_rss_mb"] - baseline["max_rss_mb"]
            runs.append(step)
            print(f"{attention:>10} k={context_size:<2} windows={step['windows']:<4} x {step['window_tokens']:<4} "
                  f"tokens  peak {step['peak_mb']:8.1f} MB  step {step['step_mb']:8.1f} MB  "
                  f"saved {step['saved_for_backward_mb']:8.1f} MB  ({step['seconds']:.1f} s)",
                  file=sys.stderr, flush=True)
    settings = {key: getattr(args, key) for key in
                ("arch", "tokens", "sentence_length", "vocabulary", "device", "threads", "seed")}
    settings.update(chunk_size=CHUNK_SIZE, lsh=LSH_SETTINGS, step="forward + backward of a summed cross-entropy "
                    "loss, train mode (dropout on), no optimiser state",
                    memory="cuda: max_memory_allocated during the step minus allocated before it" if
                    args.device.startswith("cuda") else
                    "cpu: max RSS of the process minus max RSS of a process that only built the model and batch")
    return {"machine": machine_info(args.device), **commit_info(), "settings": settings, "runs": runs,
            "summary": summarise(runs)}


# ---------------------------------------------------------------------------------------
# plot


def plot(json_path: str, out: str) -> None:
    from ..provenance import pyplot

    plt = pyplot()

    with open(json_path) as f:
        result = json.load(f)
    labels = {"full": "full attention", "self": "LSH self-attention", "self-cross": "LSH self- & cross-attention"}
    figure, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
    for (attention, by_k), color in zip(result["summary"].items(), ("C0", "C1", "C2", "C3")):
        ks = sorted(int(k) for k in by_k)
        label = labels.get(attention, attention)
        left.plot(ks, [by_k[str(k)]["step_mb"] for k in ks], "o-", color=color, label=f"{label}: step (RSS)")
        left.plot(ks, [by_k[str(k)]["saved_for_backward_mb"] for k in ks], "x--", color=color,
                  label=f"{label}: kept for backward")
        right.plot(ks, [by_k[str(k)]["step_mb_relative"] for k in ks], "o-", color=color, label=label)
        right.plot(ks, [by_k[str(k)]["saved_for_backward_mb_relative"] for k in ks], "x--", color=color)
    left.set_xlabel("context sentences k")
    left.set_ylabel("MB")
    left.legend(fontsize=6)
    right.axhline(1.15, color="grey", linewidth=0.8, linestyle=":")
    right.set_xlabel("context sentences k")
    right.set_ylabel("relative to the smallest k")
    right.legend(fontsize=6)
    machine, settings = result["machine"], result["settings"]
    device = machine.get("gpu") or machine.get("cpu", "?")
    figure.suptitle(f"Peak memory of one training step, {settings['tokens']} tokens a batch, "
                    f"{settings['arch']}, {device}", fontsize=9)
    figure.tight_layout()
    save_figure(figure, out)


def add_measurement_args(parser) -> None:
    parser.add_argument("--arch", default="lsh_doc_transformer",
                        help="lsh_doc_transformer (paper sizes) or lsh_doc_transformer_tiny")
    parser.add_argument("--tokens", type=int, default=5200,
                        help="tokens a batch, source and target each (5200 = 20 tokens x lcm(1, 4, 10, 13))")
    parser.add_argument("--sentence-length", type=int, default=20,
                        help="tokens a sentence, separator included (a multiple of the chunk size 10 avoids "
                             "chunk padding)")
    parser.add_argument("--vocabulary", type=int, default=8000, help="joint vocabulary size")
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--attention-dropout", type=float,
                        help="attention dropout (default: the architecture's, 0). On CPU with torch 2.x, full "
                             "self-attention runs fairseq's fused scaled-dot-product path, which keeps no "
                             "attention matrix when this is 0")
    parser.add_argument("--seed", type=int, default=1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run", help="measure every setting, each in a fresh process; write JSON")
    run_parser.add_argument("--out", required=True, help="JSON file to write")
    run_parser.add_argument("--context-sizes", default=",".join(map(str, CONTEXT_SIZES)))
    run_parser.add_argument("--attentions", default=",".join(ATTENTIONS))
    run_parser.add_argument("--quick", action="store_true",
                            help="the tiny model and 1040 tokens a batch (a smoke test, not the paper's setting)")
    add_measurement_args(run_parser)
    measure_parser = commands.add_parser("measure", help="one measurement (run calls this in a fresh process)")
    measure_parser.add_argument("--attention", choices=ATTENTIONS, required=True)
    measure_parser.add_argument("--context-size", type=int, required=True)
    measure_parser.add_argument("--baseline", action="store_true", help="build the model and batch only")
    add_measurement_args(measure_parser)
    plot_parser = commands.add_parser("plot", help="draw the figure from a JSON written by run")
    plot_parser.add_argument("json")
    plot_parser.add_argument("--out", required=True, help="PNG file to write")
    args = parser.parse_args(argv)
    if getattr(args, "device", "cpu").startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available")
    if args.command == "run":
        if args.quick:
            args.arch, args.tokens = "lsh_doc_transformer_tiny", 1040
        write_json(run(args), args.out)
        print(f"wrote {args.out}")
    elif args.command == "measure":
        print(json.dumps(measure(args)))
    else:
        plot(args.json, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
