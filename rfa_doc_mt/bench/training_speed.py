"""Training speed and memory of RFA against the transformer as the window grows (paper sizes).

    python -m rfa_doc_mt.bench.training_speed run --out training_speed.json [--window-sizes 1,4,15]

For every window size L and both models (``doc_transformer``, ungated ``rfa_doc_transformer``,
randomly initialised), one batch of random windows of L sentences of ``--sentence-length``
tokens, as many windows as make ``--tokens`` tokens (the same number of tokens at every L),
and a training step on it: forward, label-smoothed cross-entropy, backward (no optimiser
update, which costs the same for both). Each (model, L) runs in a fresh process, one after
the other, never two at once:

* ``seconds_per_step``: the median of ``--steps`` timed steps after one warm-up step;
* ``tokens_per_second``: target tokens / ``seconds_per_step``;
* ``peak_mb``: the peak resident memory the steps add above the built model (``ru_maxrss``
  after the steps minus before the first one): what the step's activations cost.

The JSON holds the machine, the commit, the settings and each measurement, with
``rfa_over_transformer`` (RFA's step time ÷ the transformer's) per L.
"""

import argparse
import json
import resource
import statistics
import subprocess
import sys
from typing import Dict

import torch

from ..provenance import commit_info, machine_info, record_load_at_end, write_json
from .common import random_window_step, timed_steps

MODELS = {"transformer": "doc_transformer", "rfa": "rfa_doc_transformer"}


def measure(args) -> Dict:
    """One (model, L) in this process."""
    from ..models.build import build_model, dictionary_task, toy_dictionary

    torch.set_num_threads(args.threads)
    dictionary, separator = toy_dictionary(args.vocabulary - 5)  # with the 4 special symbols and <sep>
    model = build_model(MODELS[args.model], dictionary_task(dictionary, separator), seed=args.seed,
                        share_all_embeddings=True, max_source_positions=2048, max_target_positions=2048).train()
    step, windows, batch_tokens = random_window_step(model, dictionary, separator, args.tokens, args.window_size,
                                                     args.sentence_length, args.seed)

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    seconds = timed_steps(step, args.steps)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    per_step = statistics.median(seconds)
    return {"model": args.model, "window_size": args.window_size, "windows": windows,
            "tokens": batch_tokens, "seconds_per_step": per_step, "step_seconds": seconds,
            "tokens_per_second": batch_tokens / per_step, "peak_mb": (peak - before) / 1024}


def run(args) -> Dict:
    result = {"machine": machine_info("cpu"), "commit": commit_info(),
              "settings": {"window_sizes": args.window_sizes, "tokens": args.tokens, "steps": args.steps,
                           "sentence_length": args.sentence_length, "vocabulary": args.vocabulary,
                           "threads": args.threads, "models": MODELS,
                           "step": "forward + label-smoothed cross-entropy + backward, no optimiser update"},
              "runs": [], "summary": []}
    for window_size in args.window_sizes:
        figures = {}
        for name in MODELS:
            command = [sys.executable, "-m", "rfa_doc_mt.bench.training_speed", "measure", "--model", name,
                       "--window-size", str(window_size), "--tokens", str(args.tokens), "--steps", str(args.steps),
                       "--sentence-length", str(args.sentence_length), "--vocabulary", str(args.vocabulary),
                       "--threads", str(args.threads), "--seed", str(args.seed)]
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            figures[name] = json.loads(done.stdout.strip().splitlines()[-1])
            result["runs"].append(figures[name])
            print(f"L={window_size:2d} {name:11s} {figures[name]['tokens']:6d} tokens "
                  f"{figures[name]['seconds_per_step']:7.2f} s/step {figures[name]['tokens_per_second']:8.1f} tokens/s "
                  f"peak +{figures[name]['peak_mb']:7.1f} MB", flush=True)
        ratio = figures["rfa"]["seconds_per_step"] / figures["transformer"]["seconds_per_step"]
        memory_ratio = figures["rfa"]["peak_mb"] / max(figures["transformer"]["peak_mb"], 1e-9)
        result["summary"].append({"window_size": window_size, "rfa_over_transformer": ratio,
                                  "rfa_over_transformer_memory": memory_ratio})
        print(f"L={window_size:2d}: RFA step time / transformer's {ratio:.2f}, peak memory {memory_ratio:.2f}",
              flush=True)
    return record_load_at_end(result)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("run", "measure"):
        sub = commands.add_parser(name, help="all models and window sizes" if name == "run" else
                                  "one model and window size in this process (run calls it)")
        sub.add_argument("--tokens", type=int, default=4096, help="target tokens per batch (default 4096)")
        sub.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up (default 3)")
        sub.add_argument("--sentence-length", type=int, default=25)
        sub.add_argument("--vocabulary", type=int, default=10000)
        sub.add_argument("--threads", type=int, default=1)
        sub.add_argument("--seed", type=int, default=1)
        if name == "run":
            sub.add_argument("--window-sizes", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4, 15])
            sub.add_argument("--out", required=True, help="JSON file to write")
        else:
            sub.add_argument("--model", choices=sorted(MODELS), required=True)
            sub.add_argument("--window-size", type=int, required=True)
    args = parser.parse_args(argv)
    if args.command == "measure":
        print(json.dumps(measure(args)))
        return 0
    result = run(args)
    write_json(result, args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
