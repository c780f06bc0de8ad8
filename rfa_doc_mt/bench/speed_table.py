"""Markdown tables of the decode and training speed JSONs, one column per window size L
(scripts/bench_gpu.sh prints them; docs/benchmarks.md's tables have this shape).

    python -m rfa_doc_mt.bench.speed_table [--decode F.json ...] [--training F.json]
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
    for name in others:  # --rfa-gates, --rfa-variant
        rows.append([f"{dtype}: {name} tokens/s"] + [_number(s["tokens_per_second"].get(name)) for s in summary])
        rows.append([f"{dtype}: {name} / transformer"] +
                    [_number(s.get("over_transformer", {}).get(name), 2) for s in summary])
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
    machine = result["machine"].get("gpu") or result["machine"].get("cpu")
    commit = (result.get("commit") or {}).get("commit")
    note = f"{dtype}, beam {result['settings']['beam']}, {machine}, commit {commit and commit[:7]}" + \
        (f" (partial: {result['partial']})" if result.get("partial") else "")
    return note + "\n\n" + _table(header, rows)


def training_table(result: Dict) -> str:
    """Seconds per training step and peak memory of the transformer and RFA, with their ratios."""
    window_sizes = result["settings"]["window_sizes"]
    runs = {(r["model"], r["window_size"]): r for r in result["runs"]}
    header = ["L"] + [str(L) for L in window_sizes]
    rows = []
    for name in ("transformer", "rfa"):
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
                       ("rfa_over_transformer_memory", "RFA / transformer, peak memory")):
        rows.append([label] + [_number(ratios.get(L, {}).get(key), 2) for L in window_sizes])
    device = result["machine"].get("gpu") or result["machine"].get("cpu")
    return f"training step, {result['settings']['tokens']} tokens, {device}\n\n" + _table(header, rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--decode", nargs="*", default=[], help="decode_speed JSONs")
    parser.add_argument("--training", nargs="*", default=[], help="training_speed JSONs")
    args = parser.parse_args(argv)
    tables = []
    for paths, make in ((args.decode, decode_table), (args.training, training_table)):
        for path in paths:
            with open(path) as f:
                tables.append(make(json.load(f)))
    print("\n\n".join(tables))
    return 0


if __name__ == "__main__":
    sys.exit(main())
