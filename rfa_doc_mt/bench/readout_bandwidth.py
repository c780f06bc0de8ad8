"""How close RFA's cross-attention readout in decoding comes to the speed of the memory it reads.

A decoding step of cross RFA reads every source's summary ``[S, z]`` (8 heads x 512 features x 65
per layer and source, 1.06 MB at the paper's sizes) with the few queries of that source's beams.
There is little arithmetic per byte, so the readout is bound by memory: this benchmark times
it, in the layout decoding keeps (column-major, ``state.state_readout``) and in the other one,
against one plain pass over the same memory (a sum: the read bound), each layer's summaries
cycled in turn as the decoder's layers read theirs, so that none stays in the cache when the
summaries together outgrow it. The defaults are the decode benchmark's L = 4 batch (32
sources, Table 3 / 8) and the paper's model::

    python -m rfa_doc_mt.bench.readout_bandwidth [--sources 32] [--device cuda] [--out F.json]

With ``--device cuda`` (or ``--fused`` on a CPU under Triton's interpreter, ``TRITON_INTERPRET=1``:
a check of the code, not a measurement) it also times the fused path's read
(:func:`..modules.random_feature_attention.fused.fused_cross_read`: the queries' features and the
read in one kernel) with its products in fp32 (``ieee``) and in 3xTF32 (``tf32x3``, the default),
and says how far the two outputs lie apart: which of them the kernel should take, and how close it
comes to the memory's speed. ``--sweep`` times the 3xTF32 read under other launch settings too
(projections per block of its loop, warps, pipeline stages: :data:`SWEEP`), each output against the
default's: which settings the kernel should take on this GPU.
"""

import argparse
import sys
import time
from typing import Callable, Dict, List, Optional

import torch

from ..modules.random_feature_attention.state import column_major_state, state_readout
from ..provenance import commit_info, machine_info, record_load_at_end, write_json


def per_call_ms(run: Callable[[int], object], layers: int, repeats: int, synchronize: Callable[[], None] = lambda: None
                ) -> float:
    """Median over ``repeats`` rounds of the milliseconds one call takes, each round calling
    ``run(layer)`` for every layer in turn (after one warm-up round); ``synchronize`` waits for the
    device at each round's start and end."""
    rounds = []
    for repeat in range(repeats + 1):
        synchronize()
        start = time.perf_counter()
        for layer in range(layers):
            run(layer)
        synchronize()
        if repeat:
            rounds.append((time.perf_counter() - start) * 1000 / layers)
    return sorted(rounds)[len(rounds) // 2]


# the fused read's launch settings --sweep times: projections per block of the loop x warps x stages
SWEEP = [{"block": block, "num_warps": warps, "num_stages": stages}
         for block in (32, 64, 128) for warps in (4, 8) for stages in (2, 3)]


# how much faster than the default a swept setting must be to be chosen (--best), and how close its
# output must stay to the default's: the sums of 2D products in another order, within 2D fp32
# roundings of the largest output (2D = --features)
BEST_MARGIN = 1.05


def sweep_name(launch: Dict[str, int]) -> str:
    return f"fused_tf32x3_b{launch['block']}_w{launch['num_warps']}_s{launch['num_stages']}"


def best_launch(result: Dict) -> str:
    """The fastest swept launch setting of a readout JSON as ``block=B,num_warps=W,num_stages=S``
    (decode_speed --cross-read-launch), if it is at least BEST_MARGIN times as fast as the default
    and its output stays within 2D fp32 roundings of the default's; else ``""`` (the default)."""
    ms, features = result.get("ms_per_layer", {}), result["shape"]["features"]
    allowed = features * 2.0 ** -24 * result["fused_tf32x3_difference"]["max_output"]
    fair = [(ms[name], entry["launch"]) for name, entry in (result.get("sweep") or {}).items()
            if name in ms and entry.get("max_abs_from_default", float("inf")) <= allowed]
    if not fair or "fused_tf32x3" not in ms:
        return ""
    fastest, launch = min(fair, key=lambda pair: pair[0])
    if fastest * BEST_MARGIN > ms["fused_tf32x3"]:
        return ""
    return ",".join(f"{name}={launch[name]}" for name in ("block", "num_warps", "num_stages"))


def measure(sources: int, heads: int, features: int, columns: int, beams: int, layers: int, repeats: int,
            seed: int = 0, device: str = "cpu", fused: bool = False, sweep: bool = False) -> Dict:
    generator = torch.Generator(device=device).manual_seed(seed)  # drawn where they are read (GBs on a GPU)
    stored = [torch.randn(sources, heads, columns, features, generator=generator, device=device)
              for _ in range(layers)]
    column_major = [column_major_state(s) for s in stored]  # what decoding keeps
    row_major = [s.contiguous() for s in column_major]  # the same states, the other layout
    phi_q = torch.randn(sources, heads, beams, features, generator=generator, device=device)
    # both layouts give the same readout (what is timed is one computation in two memory orders)
    difference = (state_readout(phi_q, column_major[0]) - state_readout(phi_q, row_major[0])).abs().max().item()
    megabytes = stored[0].numel() * stored[0].element_size() / 1e6
    synchronize = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    timings = {
        "readout_column_major": per_call_ms(lambda i: state_readout(phi_q, column_major[i]), layers, repeats,
                                            synchronize),
        "readout_row_major": per_call_ms(lambda i: state_readout(phi_q, row_major[i]), layers, repeats, synchronize),
        "plain_pass": per_call_ms(lambda i: stored[i].sum(), layers, repeats, synchronize),
    }
    result = {"shape": {"sources": sources, "heads": heads, "features": features, "columns": columns,
                        "beams": beams, "layers": layers},
              "summary_mb_per_layer": megabytes, "max_difference_between_layouts": difference}
    if fused:
        timings.update(fused_timings(column_major, sources, heads, features, columns - 1, beams, layers, repeats,
                                     generator, synchronize, result, sweep))
    result.update({"ms_per_layer": timings, "gb_per_second": {name: megabytes / ms for name, ms in timings.items()},
                   "readout_over_plain_pass": timings["readout_column_major"] / timings["plain_pass"]})
    return result


def fused_timings(states: List[torch.Tensor], sources: int, heads: int, features: int, head_dim: int, beams: int,
                  layers: int, repeats: int, generator: torch.Generator, synchronize: Callable[[], None],
                  result: Dict, sweep: bool = False) -> Dict[str, float]:
    """The fused read of the same summaries (fourier features of ``features // 2`` projections, as
    the paper's cross attention), its products in fp32 and in 3xTF32: ms per layer; how far their
    outputs lie apart, against the size of the outputs, goes into ``result``. With ``sweep``, the
    3xTF32 read under each launch setting of :data:`SWEEP` too: its ms per layer, and in
    ``result["sweep"]`` how far its output lies from the default's (or why it failed)."""
    from ..modules.random_feature_attention.features import DecodingFeatureMap
    from ..modules.random_feature_attention.fused import fused_cross_read

    device = states[0].device
    if features % 2:
        raise ValueError(f"the fused read takes fourier features, an even number, not {features}")
    weight = torch.randn(heads, head_dim, features // 2, generator=generator, device=device)
    feature_map = DecodingFeatureMap("fourier", weight, torch.zeros(heads, 1, 1, device=device))
    # positive summaries, as a sum of features times [v, 1] with the normaliser's column kept apart
    summaries = [{"state": state.abs()} for state in states]
    q = torch.randn(sources * beams, heads, head_dim, generator=generator, device=device)
    timings, outputs = {}, {}
    for precision in ("ieee", "tf32x3"):
        outputs[precision] = fused_cross_read(q, feature_map, summaries[0], precision=precision)
        timings[f"fused_{precision}"] = per_call_ms(
            lambda i, precision=precision: fused_cross_read(q, feature_map, summaries[i], precision=precision),
            layers, repeats, synchronize)
    result["fused_tf32x3_difference"] = {
        "max_abs": (outputs["tf32x3"] - outputs["ieee"]).abs().max().item(),
        "max_output": outputs["ieee"].abs().max().item()}
    if sweep:
        result["sweep"] = {}
        for launch in SWEEP:
            name = sweep_name(launch)
            try:
                output = fused_cross_read(q, feature_map, summaries[0], precision="tf32x3", launch=launch)
                timings[name] = per_call_ms(
                    lambda i, launch=launch: fused_cross_read(q, feature_map, summaries[i], precision="tf32x3",
                                                              launch=launch), layers, repeats, synchronize)
            except Exception as error:  # e.g. more shared memory than the GPU has: the others still run
                result["sweep"][name] = {"launch": launch, "error": f"{type(error).__name__}: {str(error)[:300]}"}
                continue
            result["sweep"][name] = {"launch": launch,
                                     "max_abs_from_default": (output - outputs["tf32x3"]).abs().max().item()}
    return timings


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
    parser.add_argument("--device", default="cpu", help="cpu or cuda (cuda: the fused read too)")
    parser.add_argument("--fused", action="store_true",
                        help="the fused read too (implied on cuda; on a CPU it needs TRITON_INTERPRET=1)")
    parser.add_argument("--sweep", action="store_true",
                        help="also time the fused 3xTF32 read under other launch settings (blocks of 32-128 "
                             "projections, 4 or 8 warps, 2 or 3 stages)")
    parser.add_argument("--out", help="JSON file to write")
    parser.add_argument("--best", metavar="JSON",
                        help="print the fastest swept launch setting of a JSON this wrote with --sweep, as "
                             "decode_speed --cross-read-launch takes it (nothing: the default is as fast), and exit")
    args = parser.parse_args(argv)
    if args.best:
        import json

        with open(args.best) as handle:
            print(best_launch(json.load(handle)))
        return 0
    if min(args.sources, args.heads, args.features, args.head_dim, args.beams, args.layers, args.repeats) < 1:
        parser.error("every size and --repeats must be at least 1")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here")
    fused = args.fused or args.device.startswith("cuda")
    if args.sweep and not fused:
        parser.error("--sweep times the fused read: give --device cuda (or --fused under TRITON_INTERPRET=1)")
    if fused and args.features % 2:
        parser.error("the fused read takes fourier features: --features must be even")
    torch.set_num_threads(args.threads)
    result = {"machine": machine_info(args.device), "commit": commit_info(),
              **measure(args.sources, args.heads, args.features, args.head_dim + 1, args.beams, args.layers,
                        args.repeats, device=args.device, fused=fused, sweep=args.sweep)}
    record_load_at_end(result)
    ms, rates = result["ms_per_layer"], result["gb_per_second"]
    print(f"{args.sources} sources x {args.heads} heads x {args.features} features x {args.head_dim + 1}: "
          f"{result['summary_mb_per_layer']:.1f} MB per layer, {args.beams} beams, {args.layers} layers cycled")
    for name in ms:
        if name not in result.get("sweep", {}):  # the sweep's settings: below, fastest first
            print(f"  {name:22s} {ms[name]:7.3f} ms per layer  {rates[name]:6.1f} GB/s")
    print(f"  readout / plain pass: {result['readout_over_plain_pass']:.2f}x")
    if "fused_ieee" in ms:
        apart = result["fused_tf32x3_difference"]
        print(f"  fused fp32 products / 3xTF32: {ms['fused_ieee'] / ms['fused_tf32x3']:.2f}x the time; outputs "
              f"{apart['max_abs']:.2e} apart at most (largest output {apart['max_output']:.2e})")
    if result.get("sweep"):
        ran = sorted((ms[name], name) for name in result["sweep"] if name in ms)
        print(f"  launch settings of the 3xTF32 read, fastest first (the default: {ms['fused_tf32x3']:.3f} ms):")
        for time_ms, name in ran:
            print(f"    {name:30s} {time_ms:7.3f} ms  {rates[name]:6.1f} GB/s  "
                  f"{result['sweep'][name]['max_abs_from_default']:.1e} from the default's output")
        for name, failed in result["sweep"].items():
            if "error" in failed:
                print(f"    {name:30s} failed: {failed['error'][:120]}")
    if args.out:
        write_json(result, args.out)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
