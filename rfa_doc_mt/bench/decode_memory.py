"""Decoding throughput at equal memory (Wu et al. 2022, §4.3: RFA fits a larger batch in the same memory).

    python -m rfa_doc_mt.bench.decode_memory run --data DIR --out memory.json [--window-size 15]
                                                 [--budget-mb 4096] [--start 12] [--probes 5]

For the transformer and ungated RFA (paper sizes, randomly initialised, as
:mod:`.decode_speed`), the largest batch of windows of ``--window-size`` sentences whose decoding
(beam 4, forced to the reference length) stays within ``--budget-mb`` of peak resident memory
above the built model, and its tokens/s there.

Every probe is one batch decoded in a fresh process: the model is built and warmed up on one
window, then ``ru_maxrss`` is read before and after decoding the batch; the difference is the
probe's memory (measured, not estimated). Probes double the batch from ``--start`` until one
exceeds the budget, then interpolate linearly between the largest batch within it and the
smallest beyond (decoding memory grows with the batch) until the two are adjacent or
``--probes`` probes per model were spent; the JSON records every probe, so a search that ran
out of probes says how close it came. Probes of one model run one after the other, never two at
once; tokens/s of the largest batch within the budget come from its own probe.
"""

import argparse
import json
import resource
import subprocess
import sys
from typing import Dict, List

from ..provenance import commit_info, machine_info, record_load_at_end, write_json
from .decode_speed import MODELS


def probe(args) -> Dict:
    """One model and batch size in this process: peak memory and speed of decoding one batch."""
    import torch

    import rfa_doc_mt  # noqa: F401  (registers the task and the models)

    from .decode_speed import build_model, choose_batches, decode_batch, load_windows

    torch.set_num_threads(args.threads)
    task, dataset = load_windows(args.data, args.split, args.window_size, args.max_positions)
    batch = choose_batches(dataset, args.window_size, args.batch_size, 1)[0]
    model = build_model(task, MODELS[args.model], args.seed, args.max_positions, "cpu", torch.float32)
    decode_batch(model, dataset, batch[:1], args.beam, "cpu")  # warm-up: kernels, first allocations
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    figures = decode_batch(model, dataset, batch, args.beam, "cpu")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    figures.update({"model": args.model, "batch_size": len(batch), "peak_mb": (peak - before) / 1024,
                    "tokens_per_second": figures["tokens"] / figures["forward_seconds"]})
    return figures


def next_batch(probes: List[Dict], budget_mb: float) -> int:
    """The next batch size to try (0: the search is over), from the probes so far."""
    within = [p for p in probes if p["peak_mb"] <= budget_mb]
    beyond = [p for p in probes if p["peak_mb"] > budget_mb]
    if not beyond:
        return 2 * max(p["batch_size"] for p in probes)
    if not within:
        smallest = min(p["batch_size"] for p in beyond)
        return smallest // 2 if smallest > 1 else 0
    low = max(within, key=lambda p: p["batch_size"])
    high = min(beyond, key=lambda p: p["batch_size"])
    if high["batch_size"] - low["batch_size"] <= 1:
        return 0
    # memory is close to linear in the batch: aim at the budget, strictly between the two
    slope = (high["peak_mb"] - low["peak_mb"]) / (high["batch_size"] - low["batch_size"])
    guess = low["batch_size"] + int((budget_mb - low["peak_mb"]) / max(slope, 1e-9))
    return min(max(guess, low["batch_size"] + 1), high["batch_size"] - 1)


def run(args) -> Dict:
    result = {"machine": machine_info("cpu"), "commit": commit_info(),
              "settings": {"data": args.data, "split": args.split, "window_size": args.window_size,
                           "budget_mb": args.budget_mb, "start": args.start, "probes": args.probes,
                           "beam": args.beam, "threads": args.threads, "models": MODELS,
                           "memory": "peak resident memory of decoding one batch above the built, warmed-up model"},
              "probes": [], "summary": {}}
    for name in MODELS:
        probes: List[Dict] = []
        batch_size = args.start
        while batch_size and len(probes) < args.probes:
            command = [sys.executable, "-m", "rfa_doc_mt.bench.decode_memory", "probe", "--data", args.data,
                       "--split", args.split, "--model", name, "--window-size", str(args.window_size),
                       "--batch-size", str(batch_size), "--beam", str(args.beam), "--threads", str(args.threads),
                       "--seed", str(args.seed), "--max-positions", str(args.max_positions)]
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"probe failed ({name}, {batch_size} windows):\n{done.stderr[-3000:]}")
            figures = json.loads(done.stdout.strip().splitlines()[-1])
            probes.append(figures)
            result["probes"].append(figures)
            print(f"{name:11s} {figures['batch_size']:4d} windows: peak +{figures['peak_mb']:8.1f} MB, "
                  f"{figures['tokens_per_second']:7.1f} tokens/s", flush=True)
            if figures["batch_size"] < batch_size:
                break  # the split has no more windows of this size
            batch_size = next_batch(probes, args.budget_mb)
        within = [p for p in probes if p["peak_mb"] <= args.budget_mb]
        best = max(within, key=lambda p: p["batch_size"]) if within else None
        beyond = [p["batch_size"] for p in probes if p["peak_mb"] > args.budget_mb]
        result["summary"][name] = {
            "largest_batch_within_budget": best and best["batch_size"],
            "smallest_batch_beyond_budget": min(beyond) if beyond else None,
            "peak_mb": best and best["peak_mb"], "tokens_per_second": best and best["tokens_per_second"]}
    transformer, rfa = result["summary"]["transformer"], result["summary"]["rfa"]
    if transformer["tokens_per_second"] and rfa["tokens_per_second"]:
        result["summary"]["rfa_over_transformer"] = {
            "batch": rfa["largest_batch_within_budget"] / transformer["largest_batch_within_budget"],
            "tokens_per_second": rfa["tokens_per_second"] / transformer["tokens_per_second"]}
        print(f"within {args.budget_mb} MB at L={args.window_size}: RFA decodes "
              f"{rfa['largest_batch_within_budget']} windows at once, the transformer "
              f"{transformer['largest_batch_within_budget']}; RFA/transformer tokens/s "
              f"{result['summary']['rfa_over_transformer']['tokens_per_second']:.2f}", flush=True)
    return record_load_at_end(result)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("run", "probe"):
        sub = commands.add_parser(name, help="search both models' largest batch" if name == "run" else
                                  "one model and batch size in this process (run calls it)")
        sub.add_argument("--data", required=True, help="prepared corpus (python -m rfa_doc_mt.data.prepare)")
        sub.add_argument("--split", default="test")
        sub.add_argument("--window-size", type=int, default=15)
        sub.add_argument("--beam", type=int, default=4)
        sub.add_argument("--threads", type=int, default=1)
        sub.add_argument("--seed", type=int, default=1)
        sub.add_argument("--max-positions", type=int, default=2048)
        if name == "run":
            sub.add_argument("--out", required=True, help="JSON file to write")
            sub.add_argument("--budget-mb", type=float, default=4096.0)
            sub.add_argument("--start", type=int, default=12, help="first batch size tried (windows)")
            sub.add_argument("--probes", type=int, default=5, help="most probes per model")
        else:
            sub.add_argument("--model", choices=sorted(MODELS), required=True)
            sub.add_argument("--batch-size", type=int, required=True)
    args = parser.parse_args(argv)
    if args.command == "probe":
        print(json.dumps(probe(args)))
        return 0
    if args.budget_mb <= 0 or args.start < 1 or args.probes < 1:
        parser.error("--budget-mb, --start and --probes must be positive")
    result = run(args)
    write_json(result, args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
