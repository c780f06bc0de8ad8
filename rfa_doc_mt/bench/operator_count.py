"""The operators a training step launches, RFA against the transformer, counted on a CPU.

    python -m rfa_doc_mt.bench.operator_count --out operator_count.json [--window-sizes 1,4,15]

On a GPU at the paper's batches a training step is bound by launching kernels: the H200 profile in
docs/benchmarks.md has each model's step take about 24 µs per kernel, so that RFA / transformer in
step time is close to the ratio of their kernel counts. Each aten operator that computes (not a
view: ``view``, ``permute``, ``expand``...) is one kernel or a few there, so its count, taken on
a CPU, tracks a change to that ratio before a GPU measures it.

For every window size L and both models (``doc_transformer`` and ungated ``rfa_doc_transformer``,
randomly initialised, paper sizes; ``--tiny``: the ``*_tiny`` ones) the same batch as
:mod:`.training_speed` (random windows making ``--tokens`` tokens), one warm-up step, then one step
(forward, label-smoothed cross-entropy, backward) counted under a dispatch mode, RFA in the forms a
GPU takes (its features and its cross attention's read with every head in one product, where a CPU
takes one head at a time; with ``--fused-features`` its features through their Triton kernels,
:mod:`..modules.random_feature_attention.fused_features`, each launch counted as one operator and
not run, so that no GPU or Triton is needed; the floored readout's and the learned temperature's
kernels likewise). The JSON holds the machine, the commit, the settings, each count with its ten
commonest operators, and RFA / transformer per L.
"""

import argparse
import collections
import contextlib
import sys
from typing import Counter, Dict, Iterator, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..provenance import commit_info, machine_info, write_json
from .common import random_window_step

MODELS = {"transformer": "doc_transformer", "rfa": "rfa_doc_transformer"}
# operators that make a view or an uninitialised tensor: no kernel on a GPU
NO_KERNEL = frozenset({
    "view", "_unsafe_view", "reshape", "_reshape_alias", "t", "transpose", "permute", "expand", "unsqueeze",
    "squeeze", "slice", "select", "narrow", "unbind", "split", "split_with_sizes", "chunk", "movedim", "unflatten",
    "as_strided", "alias", "detach", "lift_fresh", "empty", "new_empty", "empty_strided", "new_empty_strided",
    "empty_like",
})


class OperatorCounter(TorchDispatchMode):
    """Counts the aten operators called while it is active, by name, leaving out ``NO_KERNEL``."""

    def __init__(self):
        super().__init__()
        self.counts: Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name not in NO_KERNEL:
            self.counts[name] += 1
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def gpu_forms(launches: Optional[Counter[str]] = None) -> Iterator[None]:
    """RFA's training forms as on a GPU, on any device, while the context lasts. With ``launches``,
    the training features' and readout's Triton kernels too
    (:mod:`..modules.random_feature_attention.fused_features`),
    each launch counted there by its kernel's name and not run: what follows computes on
    uninitialised features, in the same operators."""
    from ..modules.random_feature_attention import features, fused_features, layers

    def launch(kernel, grid, *args, **options):
        launches[f"triton:{kernel.__name__}"] += 1

    saved = (features.PER_HEAD_FEATURES, layers.PER_HEAD_KEYS_READ, features.FUSED_FEATURE_DEVICES,
             fused_features.fused_features_work, fused_features.fused_normalise_work,
             fused_features.fused_inverse_tau_work, fused_features._launch, fused_features._kernels)
    features.PER_HEAD_FEATURES, layers.PER_HEAD_KEYS_READ = frozenset(), frozenset()
    if launches is not None:
        features.FUSED_FEATURE_DEVICES = frozenset(features.FUSED_FEATURE_DEVICES | {"cpu"})
        fused_features.fused_features_work = fused_features.fused_normalise_work = \
            fused_features.fused_inverse_tau_work = lambda device: True
        fused_features._launch = launch
        fused_features._kernels = lambda device: _KernelNames()
    try:
        yield
    finally:
        (features.PER_HEAD_FEATURES, layers.PER_HEAD_KEYS_READ, features.FUSED_FEATURE_DEVICES,
         fused_features.fused_features_work, fused_features.fused_normalise_work,
         fused_features.fused_inverse_tau_work, fused_features._launch, fused_features._kernels) = saved


class _KernelNames:
    """Stands for the kernels' module where launches are counted, not run: a kernel is its name."""

    def __getattr__(self, name: str):
        return type(name, (), {"__name__": name})


def count_step(step, fused_features: bool = False) -> Counter[str]:
    """The operators one call of ``step`` runs, after a warm-up call, in RFA's GPU forms (with
    ``fused_features``: the training features' kernels, each launch one operator)."""
    launches: Optional[Counter[str]] = collections.Counter() if fused_features else None
    with gpu_forms(launches):
        step()
        if launches is not None:
            launches.clear()
        with OperatorCounter() as counter:
            step()
    return counter.counts + (launches or collections.Counter())


def measure(model_name: str, window_size: int, args) -> Dict:
    from ..models.build import build_model, dictionary_task, toy_dictionary

    dictionary, separator = toy_dictionary(args.vocabulary - 5)
    options = [] if model_name == "transformer" else ["--rfa-gate", "none"]
    arch = MODELS[model_name] + ("_tiny" if args.tiny else "")
    model = build_model(arch, dictionary_task(dictionary, separator), options, seed=args.seed,
                        share_all_embeddings=True, max_source_positions=2048, max_target_positions=2048).train()
    step, windows, tokens = random_window_step(model, dictionary, separator, args.tokens, window_size,
                                               args.sentence_length, args.seed)
    counts = count_step(step, fused_features=args.fused_features)
    return {"model": model_name, "arch": arch, "window_size": window_size, "windows": windows, "tokens": tokens,
            "operators": sum(counts.values()), "commonest": counts.most_common(10)}


def run(args) -> Dict:
    torch.set_num_threads(args.threads)
    result = {"machine": machine_info("cpu"), "commit": commit_info(),
              "settings": {"window_sizes": args.window_sizes, "tokens": args.tokens,
                           "sentence_length": args.sentence_length, "vocabulary": args.vocabulary,
                           "models": MODELS, "tiny": args.tiny, "forms": "RFA's GPU forms",
                           "fused_features": args.fused_features,
                           "step": "forward + label-smoothed cross-entropy + backward, no optimiser update",
                           "not counted": sorted(NO_KERNEL)},
              "runs": [], "summary": []}
    for window_size in args.window_sizes:
        figures = {}
        for name in MODELS:
            figures[name] = measure(name, window_size, args)
            result["runs"].append(figures[name])
            print(f"L={window_size:2d} {name:11s} {figures[name]['tokens']:6d} tokens "
                  f"{figures[name]['operators']:6d} operators", flush=True)
        ratio = figures["rfa"]["operators"] / figures["transformer"]["operators"]
        result["summary"].append({"window_size": window_size, "rfa_over_transformer": ratio})
        print(f"L={window_size:2d}: RFA's operators / the transformer's {ratio:.2f}", flush=True)
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--window-sizes", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4, 15])
    parser.add_argument("--tokens", type=int, default=4096, help="target tokens per batch (default 4096)")
    parser.add_argument("--sentence-length", type=int, default=25)
    parser.add_argument("--vocabulary", type=int, default=10000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fused-features", action="store_true",
                        help="RFA's training features and floored readout through their Triton kernels, as "
                             "on a GPU with Triton: each launch counted as one operator, not run")
    parser.add_argument("--tiny", action="store_true",
                        help="the *_tiny architectures: a fast check of the code paths")
    args = parser.parse_args(argv)
    write_json(run(args), args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
