"""Where in the window a model loses: its teacher-forced loss by the place of a target sentence in
its window.

A window of L sentences is trained on all its target sentences: the first has no earlier target
in the window, the last has the L - 1 before it. A model whose causal attention summarises a long
prefix poorly (random feature attention holds it in a fixed-size state) should lose most on the
window's later sentences, while a gap that is the same on the first sentence is not about the
prefix. This reads, for one or more checkpoints on the same windows of a prepared split, the
negative log-likelihood of the reference's tokens (teacher-forced, bits a token, dropout off,
RFA with the evaluation matrix decoding uses) grouped by the 1-based place of their sentence in
the window (a sentence's separator, and the last sentence's end of sentence, count with it)::

    python -m rfa_doc_mt.scoring.position_loss --data DATA_DIR --path RUN_A/checkpoint_best.pt \\
        --path RUN_B/checkpoint_best.pt [--split valid] [--windows N] [--json OUT.json]

The first ``--path`` is the baseline: each other's difference from it is printed beside it; each
checkpoint is named by its folder (the run's).

RFA estimates its kernel with random features; evaluation uses one fixed matrix of them, the
first of the 16 its training drew from. ``--rfa-matrices`` reads an RFA checkpoint's windows with
others instead: one index (``5``: that matrix alone, how much the evaluation's one draw matters),
or several stacked (``0-15``: 16 times the random features, a closer estimate of the kernel the
training's draws estimate on average), in its causal attention, its cross attention or both
(``--rfa-attention``); a checkpoint without RFA reads as it is."""

import argparse
import math
import os
import sys
from typing import Dict, List, Optional, Sequence

import torch
from torch import Tensor, nn

from ..data.io import DataError
from ..provenance import write_json
from .attention import load


def loss_by_place(lprobs: Tensor, target: Tensor, separator: int, pad: int) -> Dict[int, List[float]]:
    """{place of the sentence in its window (1-based): [summed NLL in nats, tokens]} of a batch:
    ``lprobs`` [batch, time, vocabulary] log-probabilities, ``target`` [batch, time]."""
    from ..modules.sentences import sentence_ids

    real = target.ne(pad)
    nll = -lprobs.float().gather(-1, target.unsqueeze(-1)).squeeze(-1)
    places = sentence_ids(target, separator) + 1
    found: Dict[int, List[float]] = {}
    for place in places[real].unique().tolist():
        chosen = real & places.eq(place)
        found[place] = [float(nll[chosen].double().sum()), int(chosen.sum())]
    return found


@torch.no_grad()
def window_loss(model, dataset, separator: int, pad: int, windows: Optional[int] = None,
                batch_size: int = 16) -> Dict[int, Dict[str, float]]:
    """{place: {"tokens", "bits": mean NLL a token in bits}} over the first ``windows`` windows of
    ``dataset`` (all of them by default), teacher-forced."""
    count = len(dataset) if windows is None else min(windows, len(dataset))
    if count == 0:
        raise DataError("no window to read")
    totals: Dict[int, List[float]] = {}
    for first in range(0, count, batch_size):
        sample = dataset.collater([dataset[i] for i in range(first, min(first + batch_size, count))])
        output = model(**sample["net_input"])
        lprobs = model.get_normalized_probs(output, log_probs=True)
        for place, (nll, tokens) in loss_by_place(lprobs, sample["target"], separator, pad).items():
            total = totals.setdefault(place, [0.0, 0])
            total[0] += nll
            total[1] += tokens
    return {place: {"tokens": tokens, "bits": nll / tokens / math.log(2)}
            for place, (nll, tokens) in sorted(totals.items())}


def bank_indices(spec: str) -> List[int]:
    """``--rfa-matrices``: ``5``, ``0-15`` or ``0,3,7-9`` → the bank indices, in order."""
    indices = []
    for part in spec.split(","):
        first, dash, last = part.strip().partition("-")
        if not first.isdigit() or (dash and not last.isdigit()) or (dash and int(last) < int(first)):
            raise ValueError(f"{spec!r}: expected indices and ranges such as 5, 0-15 or 0,3,7-9")
        indices += list(range(int(first), int(last or first) + 1))
    if len(set(indices)) != len(indices):
        raise ValueError(f"{spec!r} names a matrix twice")
    return indices


def use_bank_matrices(model: nn.Module, indices: List[int], attention: str = "both") -> int:
    """Make the model's RFA attentions of the kind ``attention`` (causal, cross or both) evaluate
    with the bank's matrices ``indices``; returns how many attentions changed."""
    from ..modules.random_feature_attention.layers import RandomFeatureCausalAttention, RandomFeatureCrossAttention

    kinds = {"causal": (RandomFeatureCausalAttention,), "cross": (RandomFeatureCrossAttention,),
             "both": (RandomFeatureCausalAttention, RandomFeatureCrossAttention)}[attention]
    changed = [module for module in model.modules() if isinstance(module, kinds)]
    for module in changed:
        module.evaluate_with_bank(indices)
    return len(changed)


def format_table(results: Sequence[dict]) -> str:
    """A markdown table: a row per place, each checkpoint's bits a token, and each other's
    difference from the first's."""
    places = sorted({place for result in results for place in result["by_place"]})
    header = ["place in window", "tokens"] + [f"bits/token: {result['name']}" for result in results] + \
        [f"Δ {result['name']}" for result in results[1:]]
    lines = ["| " + " | ".join(header) + " |", "| --- |" + " ---: |" * (len(header) - 1)]
    for place in places:
        cells = [result["by_place"].get(place) for result in results]
        values = [f"{cell['bits']:.3f}" if cell else "—" for cell in cells]
        differences = [f"{cell['bits'] - cells[0]['bits']:+.3f}" if cell and cells[0] else "—" for cell in cells[1:]]
        tokens = next(cell["tokens"] for cell in cells if cell)
        lines.append("| " + " | ".join([str(place), str(tokens), *values, *differences]) + " |")
    return "\n".join(lines)


def main(argv=None) -> List[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--path", action="append", required=True,
                        help="a checkpoint; give several to compare them on the same windows (the first: baseline)")
    parser.add_argument("--data", required=True, help="the prepared corpus they were trained on")
    parser.add_argument("--split", default="valid", help="the split whose windows are read (default valid)")
    parser.add_argument("--windows", type=int, help="only the first N windows (default: all)")
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--rfa-matrices", metavar="INDICES",
                        help="RFA checkpoints: read with these matrices of the random-feature bank in place of the "
                             "evaluation matrix (bank index 0): 5 (one), 0-15 (all 16 stacked), 0,3,7-9")
    parser.add_argument("--rfa-attention", choices=("causal", "cross", "both"), default="both",
                        help="with --rfa-matrices: the RFA attentions that use them (default both)")
    args = parser.parse_args(argv)
    if args.windows is not None and args.windows < 1:
        parser.error("--windows must be at least 1")
    try:
        indices = None if args.rfa_matrices is None else bank_indices(args.rfa_matrices)
    except ValueError as error:
        parser.error(f"--rfa-matrices {error}")
    torch.set_grad_enabled(False)
    results = []
    for path in args.path:
        model, task, updates = load(path, args.data)
        changed = use_bank_matrices(model, indices, args.rfa_attention) if indices is not None else 0
        task.load_dataset(args.split)
        by_place = window_loss(model, task.datasets[args.split], task.target_separator, task.target_dictionary.pad(),
                               args.windows)
        results.append({"name": os.path.basename(os.path.dirname(os.path.abspath(path))), "checkpoint": path,
                        "updates": updates, "split": args.split, "by_place": by_place,
                        "rfa_matrices": args.rfa_matrices if changed else None,
                        "rfa_attention": args.rfa_attention if changed else None})
        matrices = f", {changed} RFA attentions with the bank's matrices {args.rfa_matrices}" if changed else ""
        print(f"{path}: {updates} updates{matrices}", file=sys.stderr)
    tokens = [{place: cell["tokens"] for place, cell in result["by_place"].items()} for result in results]
    if any(counted != tokens[0] for counted in tokens[1:]):
        raise DataError("the checkpoints read different windows (another dictionary or window size?): "
                        "their losses are not comparable place by place")
    matrices = "" if indices is None else f" (RFA {args.rfa_attention} attention: bank matrices {args.rfa_matrices})"
    print(f"teacher-forced NLL of the reference (bits a token) by the place of its sentence in the window, "
          f"{args.split} split{matrices}:")
    print(format_table(results))
    if args.json:
        write_json({"results": results}, args.json)
    return results


if __name__ == "__main__":
    try:
        main()
    except DataError as error:
        sys.exit(f"error: {error}")
