"""Where a decoding step's time goes, part by part, for the transformer, RFA and the ceiling.

    python -m rfa_doc_mt.bench.decode_breakdown --data DIR --window-size 4 --out breakdown.json

One batch of the decode-speed benchmark (same windows, same forced-length beam search, same
three models: :mod:`.decode_speed`) is decoded by each model with the forward time of every
decoder part recorded: self-attention, cross attention, each one's cache reordering, the
feed-forward layers and the output projection (the rest: embeddings, layer norms, the encoder).
The ceiling's attentions keep their projections and attend to nothing, so a model's attention
seconds minus the ceiling's are what its attention itself costs; ``allowance`` is how much that
may be for the model to decode at 0.8 of the ceiling's speed (``0.25 x`` the ceiling's forward
time). Per-call timing adds a few microseconds to every call: compare parts, and take the
models' speeds from :mod:`.decode_speed`.
"""

import argparse
import sys
import time
from contextlib import contextmanager
from typing import Dict, Iterator

import torch

from ..provenance import commit_info, machine_info, record_load_at_end, write_json

# the share of the ceiling's speed the allowance is computed for (the decode-speed goal at L >= 4,
# docs/benchmarks.md)
TARGET_SHARE = 0.8
ATTENTION_PARTS = ("self", "self.reorder", "cross", "cross.reorder")


def _timed(seconds: Dict[str, float], name: str, function):
    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - start
    return timed


@contextmanager
def timed_parts(model) -> Iterator[Dict[str, float]]:
    """Seconds spent in each decoder part while the block runs (summed over layers); the model's
    modules are restored on exit."""
    seconds: Dict[str, float] = {}
    patched = []

    def patch(module, attribute: str, name: str):
        if module is None or not hasattr(module, attribute):
            return
        patched.append((module, attribute, vars(module).get(attribute)))  # an instance attribute, if any
        setattr(module, attribute, _timed(seconds, name, getattr(module, attribute)))

    for layer in model.decoder.layers:
        patch(layer.self_attn, "forward", "self")
        patch(layer.self_attn, "reorder_incremental_state", "self.reorder")
        patch(getattr(layer, "encoder_attn", None), "forward", "cross")
        patch(getattr(layer, "encoder_attn", None), "reorder_incremental_state", "cross.reorder")
        patch(layer.fc1, "forward", "feed-forward")
        patch(layer.fc2, "forward", "feed-forward")
    patch(model.decoder.output_projection, "forward", "output projection")
    try:
        yield seconds
    finally:
        for module, attribute, own in reversed(patched):
            if own is None:
                delattr(module, attribute)
            else:
                setattr(module, attribute, own)


def breakdown(model, dataset, indices, beam: int) -> Dict:
    """Decode one batch; its forward seconds and those of each part (``rest``: the remainder)."""
    from .decode_speed import decode_batch

    with timed_parts(model) as seconds:
        figures = decode_batch(model, dataset, indices, beam, "cpu")
    parts = dict(sorted(seconds.items()))
    parts["rest"] = figures["forward_seconds"] - sum(parts.values())
    return {"tokens": figures["tokens"], "forward_seconds": figures["forward_seconds"], "parts": parts,
            "attention_seconds": sum(parts.get(name, 0.0) for name in ATTENTION_PARTS)}


def run(args) -> Dict:
    import rfa_doc_mt  # noqa: F401  (registers the task and the models)

    from .decode_speed import (
        CEILING,
        MODELS,
        build_model,
        choose_batches,
        decode_batch,
        load_windows,
        remove_decoder_attention,
        scaled_batch_size,
    )

    torch.set_num_threads(args.threads)
    batch_size = args.batch_size or scaled_batch_size(args.window_size, args.batch_scale)
    task, dataset = load_windows(args.data, args.split, args.window_size, args.max_positions)
    models = {name: build_model(task, arch, args.seed, args.max_positions, "cpu", torch.float32)
              for name, arch in MODELS.items()}
    models[CEILING] = remove_decoder_attention(
        build_model(task, MODELS["transformer"], args.seed, args.max_positions, "cpu", torch.float32))
    indices = choose_batches(dataset, args.window_size, batch_size, 1)[0]
    result = {"machine": machine_info("cpu"), "commit": commit_info(),
              "settings": {"data": args.data, "split": args.split, "window_size": args.window_size,
                           "batch_size": len(indices), "beam": args.beam, "threads": args.threads,
                           "seed": args.seed, "models": MODELS, "target_share_of_ceiling": TARGET_SHARE},
              "models": {}}
    for model in models.values():  # warm-up: first calls allocate and pick kernels
        decode_batch(model, dataset, indices[:max(1, len(indices) // 4)], args.beam, "cpu")
    for name, model in models.items():
        figures = breakdown(model, dataset, indices, args.beam)
        result["models"][name] = figures
        parts = ", ".join(f"{part} {seconds:.2f}" for part, seconds in figures["parts"].items())
        print(f"L={args.window_size} {name:11s} {figures['forward_seconds']:7.2f} s forward: {parts}", flush=True)
    ceiling = result["models"][CEILING]
    allowance = ceiling["forward_seconds"] * (1 / TARGET_SHARE - 1)
    summary = {"allowance_seconds": allowance}
    for name in MODELS:
        cost = result["models"][name]["attention_seconds"] - ceiling["attention_seconds"]
        summary[name] = {"attention_cost_seconds": cost, "over_allowance": cost / allowance,
                         "share_of_ceiling": ceiling["forward_seconds"] / result["models"][name]["forward_seconds"]}
        print(f"L={args.window_size} {name}: its attention costs {cost:.2f} s beyond the ceiling's projections; "
              f"{TARGET_SHARE} of the ceiling's speed allows {allowance:.2f} s ({cost / allowance:.2f}x that)",
              flush=True)
    result["summary"] = summary
    return record_load_at_end(result)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="a prepared corpus (scripts/prepare_iwslt15.sh)")
    parser.add_argument("--split", default="test")
    parser.add_argument("--window-size", type=int, required=True)
    parser.add_argument("--batch-size", type=int, help="windows per batch (default: Table 3's x --batch-scale)")
    parser.add_argument("--batch-scale", type=float, default=1 / 8)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-positions", type=int, default=2048)
    parser.add_argument("--out", required=True, help="JSON file to write")
    args = parser.parse_args(argv)
    write_json(run(args), args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
