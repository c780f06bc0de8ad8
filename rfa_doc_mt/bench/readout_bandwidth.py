"""How close RFA's cross-attention readout in decoding comes to the speed of the memory it reads.

A decoding step of cross RFA reads every source's summary ``[S, z]`` (8 heads x 512 features x 65
per layer and source, 1.06 MB at the paper's sizes) with the few queries of that source's beams.
There is little arithmetic per byte, so the readout is bound by memory: this benchmark times
it, in the layout decoding keeps (column-major, ``state.state_readout``) and in the other one,
against one plain pass over the same memory (a sum: the read bound), each layer's summaries
cycled in turn as the decoder's layers read theirs, so that none stays in the cache when the
summaries together outgrow it. The defaults are the decode benchmark's L = 4 batch (32
sources, Table 3 / 8) and the paper's model::

    python -m rfa_doc_mt.bench.readout_bandwidth [--sources 32] [--out F.json]
"""

import argparse
import sys
import time
from typing import Callable, Dict, List, Optional

import torch

from ..modules.random_feature_attention.state import column_major_state, state_readout
from ..provenance import commit_info, machine_info, record_load_at_end, write_json


def per_call_ms(run: Callable[[int], object], layers: int, repeats: int) -> float:
    """Median over ``repeats`` rounds of the milliseconds one call takes, each round calling
    ``run(layer)`` for every layer in turn (after one warm-up round)."""
    rounds = []
    for repeat in range(repeats + 1):
        start = time.perf_counter()
        for layer in range(layers):
            run(layer)
        if repeat:
            rounds.append((time.perf_counter() - start) * 1000 / layers)
    return sorted(rounds)[len(rounds) // 2]


def measure(sources: int, heads: int, features: int, columns: int, beams: int, layers: int, repeats: int,
            seed: int = 0) -> Dict:
    generator = torch.Generator().manual_seed(seed)
    stored = [torch.randn(sources, heads, columns, features, generator=generator) for _ in range(layers)]
    column_major = [column_major_state(s) for s in stored]  # what decoding keeps
    row_major = [s.contiguous() for s in column_major]  # the same states, the other layout
    phi_q = torch.randn(sources, heads, beams, features, generator=generator)
    # both layouts give the same readout (what is timed is one computation in two memory orders)
    difference = (state_readout(phi_q, column_major[0]) - state_readout(phi_q, row_major[0])).abs().max().item()
    megabytes = stored[0].numel() * stored[0].element_size() / 1e6
    timings = {
        "readout_column_major": per_call_ms(lambda i: state_readout(phi_q, column_major[i]), layers, repeats),
        "readout_row_major": per_call_ms(lambda i: state_readout(phi_q, row_major[i]), layers, repeats),
        "plain_pass": per_call_ms(lambda i: stored[i].sum(), layers, repeats),
    }
    return {"shape": {"sources": sources, "heads": heads, "features": features, "columns": columns,
                      "beams": beams, "layers": layers},
            "summary_mb_per_layer": megabytes, "max_difference_between_layouts": difference,
            "ms_per_layer": timings,
            "gb_per_second": {name: megabytes / ms for name, ms in timings.items()},
            "readout_over_plain_pass": timings["readout_column_major"] / timings["plain_pass"]}


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sources", type=int, default=32, help="sources in the batch (decode benchmark, L=4: 32)")
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--features", type=int, default=512, help="2 x the cross projections (paper: 256)")
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--beams", type=int, default=4)
    parser.add_argument("--layers", type=int, default=6, help="decoder layers, each with its own summaries")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", help="JSON file to write")
    args = parser.parse_args(argv)
    if min(args.sources, args.heads, args.features, args.head_dim, args.beams, args.layers, args.repeats) < 1:
        parser.error("every size and --repeats must be at least 1")
    torch.set_num_threads(args.threads)
    result = {"machine": machine_info("cpu"), "commit": commit_info(),
              **measure(args.sources, args.heads, args.features, args.head_dim + 1, args.beams, args.layers,
                        args.repeats)}
    record_load_at_end(result)
    ms, rates = result["ms_per_layer"], result["gb_per_second"]
    print(f"{args.sources} sources x {args.heads} heads x {args.features} features x {args.head_dim + 1}: "
          f"{result['summary_mb_per_layer']:.1f} MB per layer, {args.beams} beams, {args.layers} layers cycled")
    for name in ms:
        print(f"  {name:22s} {ms[name]:7.3f} ms per layer  {rates[name]:6.1f} GB/s")
    print(f"  readout / plain pass: {result['readout_over_plain_pass']:.2f}x")
    if args.out:
        write_json(result, args.out)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
