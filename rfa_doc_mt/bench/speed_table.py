"""Markdown tables of the decode and training speed JSONs, one column per window size L
(scripts/bench_gpu.sh prints them; docs/benchmarks.md's tables have this shape).

    python -m rfa_doc_mt.bench.speed_table [--decode F.json ...] [--training F.json] [--steps F.json ...]
        [--readout F.json]

``--steps`` tables each model's forward time per decoder step, and what RFA's step costs beyond
the ceiling's per window the batch started with (``--data DIR`` recounts the steps of a JSON
written before runs recorded them).
"""

import argparse
import json
import sys
from typing import Dict, List, Optional

from .decode_speed import CEILING, FUSED


def _table(header: List[str], rows: List[List[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| --- |" + " ---: |" * (len(header) - 1)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def _number(value: Optional[float], digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def decode_table(result: Dict) -> str:
    """Tokens/s of every model, the ratios, and what a decoder step launches (``--kernel-counts``)."""
    summary = sorted(result["summary"], key=lambda s: (s["window_size"], s["batch_size"]))
    dtype = result["settings"]["dtype"]
    header = ["L"] + [str(s["window_size"]) for s in summary]
    rows = [["batch (windows)"] + [str(s["batch_size"]) for s in summary]]
    for name, label in (("transformer", "transformer"), ("rfa", "RFA eager"), (FUSED, "RFA fused"),
                        (CEILING, "ceiling")):
        if any(name in s["tokens_per_second"] for s in summary):
            rows.append([f"{dtype}: {label} tokens/s"] + [_number(s["tokens_per_second"].get(name)) for s in summary])
    others = sorted({name for s in summary for name in s["tokens_per_second"] if name.startswith("rfa-")})
    path = result["settings"].get("rfa_variant_decoding")
    for name in others:  # --rfa-gates, --rfa-variant
        label = f"{name} ({path})" if path else name
        rows.append([f"{dtype}: {label} tokens/s"] + [_number(s["tokens_per_second"].get(name)) for s in summary])
        rows.append([f"{dtype}: {label} / transformer"] +
                    [_number(s.get("over_transformer", {}).get(name), 2) for s in summary])
        if any(name in s.get("over_ceiling", {}) for s in summary):
            rows.append([f"{dtype}: {label} / ceiling"] +
                        [_number(s.get("over_ceiling", {}).get(name), 2) for s in summary])
    for key, label in (("speedup", "**RFA eager / transformer**"), ("fused_speedup", "**RFA fused / transformer**"),
                       ("fused_over_eager", "RFA fused / RFA eager"), ("ceiling_speedup", "ceiling / transformer"),
                       ("rfa_fused_share_of_ceiling", "RFA fused / ceiling")):
        if any(key in s for s in summary):
            rows.append([f"{dtype}: {label}"] + [_number(s.get(key), 2) for s in summary])
    if any("fused_hypotheses" in s for s in summary):
        rows.append([f"{dtype}: fused hypotheses differing from eager (windows)"] + [
            f"{s['fused_hypotheses']['differing']} / {s['fused_hypotheses']['windows']}" if "fused_hypotheses" in s
            else "—" for s in summary])
    counted = [s for s in summary if "kernel_counts" in s]
    if counted:
        unit = "kernels_per_step" if result["machine"].get("device", "cpu").startswith("cuda") else \
            "operators_per_step"
        for name in counted[0]["kernel_counts"]:
            rows.append([f"{unit.replace('_', ' ')}: {name}"] +
                        [_number(s.get("kernel_counts", {}).get(name, {}).get(unit)) for s in summary])
        for name in counted[0]["kernel_counts"]:
            if any((s.get("kernel_counts", {}).get(name, {}).get("first_step") or {}).get(unit.split("_")[0])
                   is not None for s in counted):
                rows.append([f"{unit.split('_')[0]} at the first step: {name}"] + [
                    _number((s.get("kernel_counts", {}).get(name, {}).get("first_step") or {}).get(unit.split("_")[0]))
                    for s in summary])
        for name in counted[0]["kernel_counts"]:
            if any(s.get("kernel_counts", {}).get(name, {}).get("device_ms_per_step") is not None for s in counted):
                rows.append([f"device ms per profiled step: {name}"] + [
                    _number(s.get("kernel_counts", {}).get(name, {}).get("device_ms_per_step"), 2) for s in summary])
    machine = result["machine"].get("gpu") or result["machine"].get("cpu")
    commit = (result.get("commit") or {}).get("commit")
    launch = result["settings"].get("cross_read_launch")
    note = f"{dtype}, beam {result['settings']['beam']}, {machine}, commit {commit and commit[:7]}" + \
        (f", the cross read launched with {launch}" if launch and launch != "default" else "") + \
        (f" (partial: {result['partial']})" if result.get("partial") else "")
    return note + "\n\n" + _table(header, rows)


def readout_table(result: Dict) -> str:
    """The cross read alone (readout_bandwidth): ms per layer and GB/s of each way of reading the
    summaries, the swept launch settings fastest first with their outputs' distance from the
    default's, and the setting ``--best`` chooses."""
    from .readout_bandwidth import best_launch

    ms, rates = result["ms_per_layer"], result["gb_per_second"]
    sweep = result.get("sweep") or {}
    rows = [[name, f"{ms[name]:.3f}", f"{rates[name]:.0f}", "-"] for name in ms if name not in sweep]
    for name in sorted((name for name in sweep if name in ms), key=ms.get):
        rows.append([name, f"{ms[name]:.3f}", f"{rates[name]:.0f}", f"{sweep[name]['max_abs_from_default']:.1e}"])
    rows += [[name, "failed", "-", entry["error"][:80]] for name, entry in sweep.items() if "error" in entry]
    shape = result["shape"]
    chosen = best_launch(result) if sweep else ""
    note = (f"the cross read alone: {shape['sources']} sources x {shape['heads']} heads x {shape['features']} "
            f"features x {shape['columns']}, {shape['beams']} beams, {shape['layers']} layers, "
            f"{result['machine'].get('gpu') or result['machine'].get('cpu')}, commit "
            f"{((result.get('commit') or {}).get('commit') or '')[:7]}"
            + (f"; the decoding steps' launch setting: {chosen or 'the default'}" if sweep else ""))
    return note + "\n\n" + _table(["read", "ms per layer", "GB/s", "output from the default's"], rows)


def step_table(result: Dict, data: Optional[str] = None) -> str:
    """Forward milliseconds per decoder step of every model per L, the windows decoding on average
    (tokens / steps: forced lengths, so each step decodes one token of each window still decoding),
    and RFA's time per step beyond the ceiling's, per window the batch started with."""
    from .decode_speed import batch_steps

    settings = result["settings"]
    summary = sorted(result["summary"], key=lambda s: (s["window_size"], s["batch_size"]))
    header = ["L"] + [str(s["window_size"]) for s in summary]
    others = sorted(name for name in summary[0]["tokens_per_second"] if name.startswith("rfa-"))
    names = [name for name in ("transformer", "rfa", FUSED, CEILING) if name in summary[0]["tokens_per_second"]] + \
        others
    columns = []
    for s in summary:
        runs = [r for r in result["runs"]
                if r["window_size"] == s["window_size"] and r["batch_size"] == s["batch_size"]]
        by_batch = {r["batch"]: r.get("steps") for r in runs}
        if None in by_batch.values():
            if data is None:
                raise SystemExit("this JSON's runs do not record their steps: give --data (the corpus it decoded)")
            recounted = batch_steps(data, settings["split"], s["window_size"], s["batch_size"],
                                    settings["batches_per_window_size"])
            by_batch = {batch: recounted[batch] for batch in by_batch}
        steps = sum(by_batch.values())
        seconds = {name: sum(r["forward_seconds"] for r in runs if r["model"] == name) for name in names}
        tokens = sum(r["tokens"] for r in runs if r["model"] == names[0])
        columns.append((s, steps, tokens, seconds))
    rows = [["decoder steps"] + [str(steps) for _, steps, _, _ in columns],
            ["windows decoding per step (mean)"] + [_number(tokens / steps) for _, steps, tokens, _ in columns]]
    for name in names:
        rows.append([f"{name} ms per step"] + [_number(1000 * seconds[name] / steps, 1)
                                                for _, steps, _, seconds in columns])
    for name in names:  # recorded by newer runs: the encoder and the first step (the source's caches)
        first = [[r.get("first_step_seconds") for r in result["runs"] if r["model"] == name
                  and r["window_size"] == s["window_size"] and r["batch_size"] == s["batch_size"]]
                 for s, _, _, _ in columns]
        if any(None not in seconds and seconds for seconds in first):
            rows.append([f"{name} ms: the encoder and the first step"] + [
                _number(1000 * sum(seconds), 1) if seconds and None not in seconds else "-" for seconds in first])
    for name, label in [("rfa", "RFA eager"), (FUSED, "RFA fused")] + [(name, name) for name in others]:
        if name in names and CEILING in names:
            rows.append([f"{label} beyond the ceiling, µs per step per window of the batch"] + [
                _number(1e6 * (seconds[name] - seconds[CEILING]) / steps / s["batch_size"])
                for s, steps, _, seconds in columns])
    machine = result["machine"].get("gpu") or result["machine"].get("cpu")
    return f"{settings['dtype']}, forward time per decoder step, {machine}\n\n" + _table(header, rows)


def training_table(result: Dict) -> str:
    """Seconds per training step and peak memory of the transformer and RFA, with their ratios."""
    window_sizes = result["settings"]["window_sizes"]
    runs = {(r["model"], r["window_size"]): r for r in result["runs"]}
    header = ["L"] + [str(L) for L in window_sizes]
    rows = []
    models = ("transformer", "rfa") + (("rfa-torch-features",) if "rfa-torch-features" in
                                       {model for model, _ in runs} else ())
    for name in models:
        cells = []
        for L in window_sizes:
            run = runs.get((name, L), {})
            cells.append(f"failed: {run['error']}" if "error" in run else
                         f"{run['seconds_per_step']:.3f} ({run['tokens_per_second']:.0f})" if run else "-")
        rows.append([f"{name} s/step (tokens/s)"] + cells)
    rows.append(["peak MB above the model: transformer / RFA"] + [
        " / ".join(_number(runs.get((name, L), {}).get("peak_mb")) for name in ("transformer", "rfa"))
        for L in window_sizes])
    ratios = {s["window_size"]: s for s in result["summary"]}
    for key, label in (("rfa_over_transformer", "**RFA / transformer, step time**"),
                       ("torch_features_over_transformer", "RFA with its features in torch's operators / "
                                                            "transformer, step time"),
                       ("rfa_over_transformer_memory", "RFA / transformer, peak memory")):
        if key == "torch_features_over_transformer" and len(models) < 3:
            continue
        rows.append([label] + [_number(ratios.get(L, {}).get(key), 2) for L in window_sizes])
    device = result["machine"].get("gpu") or result["machine"].get("cpu")
    return f"training step, {result['settings']['tokens']} tokens, {device}\n\n" + _table(header, rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--decode", nargs="*", default=[], help="decode_speed JSONs")
    parser.add_argument("--training", nargs="*", default=[], help="training_speed JSONs")
    parser.add_argument("--steps", nargs="*", default=[], help="decode_speed JSONs: time per decoder step")
    parser.add_argument("--data", help="with --steps: the corpus a JSON decoded, to recount steps it lacks")
    parser.add_argument("--readout", nargs="*", default=[], help="readout_bandwidth JSONs (the cross read alone)")
    args = parser.parse_args(argv)
    tables = []
    for paths, make in ((args.readout, readout_table), (args.decode, decode_table), (args.training, training_table),
                        (args.steps, lambda result: step_table(result, args.data))):
        for path in paths:
            with open(path) as f:
                tables.append(make(json.load(f)))
    print("\n\n".join(tables))
    return 0


if __name__ == "__main__":
    sys.exit(main())
