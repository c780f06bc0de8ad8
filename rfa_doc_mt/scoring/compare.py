"""Is one system better than another on the same test set? Paired significance tests of
s-BLEU, d-BLEU and contrastive consistency, with the difference and its 95% interval.

    python -m rfa_doc_mt.scoring.compare --ref test.ref --docs test.docs \\
        --baseline runs/transformer/test.hyp --system runs/rfa/test.hyp \\
        [--baseline-consistency runs/transformer/consistency.json --system-consistency runs/rfa/consistency.json]

* **BLEU** (s-BLEU over sentences, d-BLEU over documents): sacrebleu's own paired test
  (``sacrebleu.significance.PairedTest``, what ``sacrebleu --paired-bs`` / ``--paired-ar``
  run): paired bootstrap resampling (Koehn 2004; default, 1000 resamples) or approximate
  randomization (Riezler and Maxwell 2005; ``--test ar``, 10,000 trials). The p-value is
  sacrebleu's. The 95% interval of the difference (system - baseline) comes from the paired
  bootstrap resamples sacrebleu draws for that seed (the same indices: the same generator,
  seed and call), each resample scored with sacrebleu's own sufficient statistics; its
  bounds are the order statistics sacrebleu uses for a system's interval (``estimate_ci``:
  the ⌊n/40⌋-th from each end).
* **Consistency** (pooled contrastive accuracy): a paired bootstrap over the contrastive
  examples (an example's two outcomes, right or wrong under each system, are resampled
  together), or over their groups where the sets name them (the mirrored pairs of the synthetic
  sets, whose two outcomes are not independent: a sentence-level model gets exactly one of each
  pair right), each group's examples resampled together; interval as above; two-sided p-value
  of the shifted bootstrap (Efron and Tibshirani 1993, §16.4): the share of resamples whose
  difference lies at least as far from the observed one as the observed one lies from zero,
  (1 + count) / (1 + resamples).

* **By position** (``--by-position L``): s-BLEU compared again within three groups of
  sentences, by how much of a window of L sentences their context fills: a document's first
  sentence (its window holds no context), the next L - 2 (part of it), and the rest (all of
  it). Where context pays, a model of L sentences gains on the later groups and not on the
  first; a gap the first group shows too is not about the context.

Two identical outputs differ nowhere: the difference is 0 in every resample and nothing
could be significant, so the p-value is 1; so too for two outputs whose scores no resample
tells apart (both 0 BLEU, say). (sacrebleu's tests count resamples whose difference *exceeds*
the observed one, and would give them 1 / (n + 1).)

Both bootstraps are seeded (``--seed``, default sacrebleu's 12345; sacrebleu reads it from
``SACREBLEU_SEED``, which this module sets for the call): the same inputs print the same figures.
The seed must be positive: sacrebleu reads ``SACREBLEU_SEED=0`` as no seed at all.
"""

import argparse
import contextlib
import json
import os
import sys
from dataclasses import asdict, dataclass
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from ..data.io import DataError, atomic_write, read_docs, read_lines
from .bleu import join_documents

# sacrebleu's default seed for its resampling (SACREBLEU_SEED), and its default resample counts
DEFAULT_SEED = 12345
DEFAULT_SAMPLES = {"bs": 1000, "ar": 10000}
TESTS = {"bs": "paired bootstrap", "ar": "approximate randomization"}


@dataclass
class Comparison:
    """One metric of two systems on one test set: ``difference`` = system - baseline."""

    metric: str
    baseline: float
    system: float
    difference: float
    interval: Tuple[float, float]  # 95% paired-bootstrap interval of the difference
    p_value: float
    test: str  # how p was computed
    samples: int  # resamples (bootstrap) or trials (approximate randomization) behind p
    units: int  # what was resampled: sentences, documents or contrastive examples
    unit_name: str
    seed: int
    signature: Optional[str] = None  # sacrebleu's, for BLEU

    def as_dict(self) -> dict:
        result = asdict(self)
        result["interval"] = list(self.interval)
        return result

    def __str__(self) -> str:
        low, high = self.interval
        return (f"{self.metric:<12} {self.baseline:8.2f} {self.system:8.2f} {self.difference:+8.2f}  "
                f"[{low:+.2f}, {high:+.2f}]  p = {self.p_value:.4f}  "
                f"({self.test}, {self.samples} {'trials' if 'random' in self.test else 'resamples'} "
                f"of {self.units} {self.unit_name})")


def interval_bounds(values: np.ndarray) -> Tuple[float, float]:
    """95% interval of resampled values with sacrebleu's rule (significance.estimate_ci): the
    ⌊n/40⌋-th smallest and largest of n values."""
    ordered = np.sort(np.asarray(values, dtype=np.float64))
    lower = len(ordered) // 40
    return float(ordered[lower]), float(ordered[len(ordered) - lower - 1])


@contextlib.contextmanager
def sacrebleu_seed(seed: int) -> Iterator[None]:
    """sacrebleu's PairedTest reads its seed from SACREBLEU_SEED when it is built."""
    earlier = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    try:
        yield
    finally:
        if earlier is None:
            del os.environ["SACREBLEU_SEED"]
        else:
            os.environ["SACREBLEU_SEED"] = earlier


def bootstrap_indices(units: int, samples: int, seed: int) -> np.ndarray:
    """The resample indices sacrebleu's paired bootstrap draws for ``seed``
    (significance._paired_bs_test: one generator, one call)."""
    return np.random.default_rng(seed).choice(units, size=(samples, units), replace=True)


def resampled_bleu(metric, hypotheses: Sequence[str], references: Sequence[str], indices: np.ndarray) -> np.ndarray:
    """BLEU of every resample of the segments (rows of ``indices``), from sacrebleu's sufficient
    statistics, as its bootstrap computes them."""
    stats = np.array(metric._extract_corpus_statistics(list(hypotheses), [list(references)]), dtype="float32")
    return np.array([metric._compute_score_from_stats(stats[row].sum(0)).score for row in indices])


def bleu_comparison(baseline: Sequence[str], system: Sequence[str], references: Sequence[str], metric_name: str,
                    unit_name: str = "sentences", test: str = "bs", samples: Optional[int] = None,
                    seed: int = DEFAULT_SEED, tokenize: str = "13a") -> Comparison:
    """BLEU of two systems' outputs for the same references, compared with sacrebleu's paired test."""
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    if test not in TESTS:
        raise ValueError(f"test must be one of {', '.join(TESTS)}, got {test!r}")
    if not (len(baseline) == len(system) == len(references)):
        raise DataError(f"{metric_name}: {len(baseline)} baseline, {len(system)} system and {len(references)} "
                        "reference segments: the outputs must translate the same test set")
    if not references:
        raise DataError(f"{metric_name}: nothing to compare (no segments)")
    samples = samples or DEFAULT_SAMPLES[test]
    metric = BLEU(tokenize=tokenize)
    with sacrebleu_seed(seed):
        paired = PairedTest([("baseline", list(baseline)), ("system", list(system))], {"BLEU": metric},
                            [list(references)], test_type=test, n_samples=samples)
        signatures, results = paired()
    base_result, system_result = results["BLEU"]
    # the difference's interval from the bootstrap resamples (sacrebleu's indices for this seed)
    indices = bootstrap_indices(len(references), samples if test == "bs" else DEFAULT_SAMPLES["bs"], seed)
    differences = resampled_bleu(metric, system, references, indices) - \
        resampled_bleu(metric, baseline, references, indices)
    # no difference anywhere (the same outputs, or scores that no resample tells apart): p = 1
    alike = list(baseline) == list(system) or (system_result.score == base_result.score and not differences.any())
    return Comparison(metric_name, base_result.score, system_result.score, system_result.score - base_result.score,
                      interval_bounds(differences), 1.0 if alike else float(system_result.p_value),
                      f"{TESTS[test]} (sacrebleu)", samples, len(references), unit_name, seed,
                      str(signatures["BLEU"]))


def consistency_comparison(baseline: Sequence[int], system: Sequence[int], samples: int = DEFAULT_SAMPLES["bs"],
                           seed: int = DEFAULT_SEED, metric_name: str = "consistency",
                           groups: Optional[Sequence] = None) -> Comparison:
    """Contrastive accuracy (%) of two systems on the same examples (1 right, 0 wrong, in the
    same order), compared by a paired bootstrap over the examples, or over ``groups`` (one label
    per example; the examples of a group are resampled together)."""
    check_seed(seed)
    base, other = np.asarray(baseline, dtype=np.float64), np.asarray(system, dtype=np.float64)
    if base.shape != other.shape or base.ndim != 1:
        raise DataError(f"{metric_name}: {base.size} baseline and {other.size} system outcomes: the systems must be "
                        "scored on the same contrastive examples")
    if not base.size:
        raise DataError(f"{metric_name}: nothing to compare (no examples)")
    if not np.isin(base, (0, 1)).all() or not np.isin(other, (0, 1)).all():
        raise DataError(f"{metric_name}: outcomes must be 0 (wrong) or 1 (right)")
    if groups is not None and len(groups) != base.size:
        raise DataError(f"{metric_name}: {len(groups)} group labels for {base.size} examples")
    observed = 100.0 * (other.mean() - base.mean())
    # per unit (an example, or a group of them): its examples and its right answers under each system
    if groups is None:
        sizes, base_right, other_right = np.ones_like(base), base, other
    else:
        _, unit_of = np.unique(np.asarray(groups, dtype=object).astype(str), return_inverse=True)
        sizes, base_right, other_right = (np.bincount(unit_of, weights=w) for w in (np.ones_like(base), base, other))
    indices = bootstrap_indices(sizes.size, samples, seed)
    drawn = sizes[indices].sum(axis=1)
    differences = 100.0 * (other_right[indices].sum(axis=1) - base_right[indices].sum(axis=1)) / drawn
    # shifted bootstrap: under no difference the resampled differences centre on 0, not on `observed`
    as_far = int(np.sum(np.abs(differences - observed) >= abs(observed) - 1e-9))
    unit_name = "contrastive examples" if groups is None else "groups of contrastive examples (mirrored pairs)"
    return Comparison(metric_name, 100.0 * base.mean(), 100.0 * other.mean(), observed, interval_bounds(differences),
                      (1 + as_far) / (1 + samples), "paired bootstrap", samples, int(sizes.size), unit_name, seed)


def check_seed(seed: int) -> None:
    """sacrebleu takes ``SACREBLEU_SEED=0`` (and any false value) for no seed: its resamples would
    change from run to run while the output claims seed 0."""
    if seed < 1:
        raise DataError(f"seed {seed}: the resampling seed must be at least 1 (sacrebleu reads 0 as unseeded)")


def consistency_groups(report: dict) -> Optional[Dict[str, list]]:
    """Per-example groups of each phenomenon of a consistency report, where every set names them
    (None otherwise: each example is its own unit)."""
    sets = {name: value for name, value in report.items() if name != "pooled"}
    if not sets or not all("groups" in value for value in sets.values()):
        return None
    return {name: list(value["groups"]) for name, value in sets.items()}


def consistency_outcomes(report: dict, source: str = "consistency.json") -> Dict[str, List[int]]:
    """Per-example outcomes of each phenomenon of a consistency report (scoring/consistency.py's
    JSON), the pooled set left out (it is their concatenation)."""
    outcomes = {}
    for name, value in report.items():
        if name == "pooled":
            continue
        if "correct" not in value:
            raise DataError(f"{source}: {name} has no per-example outcomes ('correct'); it was scored before they "
                            "were recorded: score it again (python -m rfa_doc_mt.scoring.consistency ...)")
        outcomes[name] = list(value["correct"])
    if not outcomes:
        raise DataError(f"{source}: no contrastive sets in it")
    return outcomes


def pooled_groups(groups: Dict[str, list]) -> List[str]:
    """The groups of :func:`pooled_outcomes`' examples: a group is one within its phenomenon."""
    return [f"{name}:{group}" for name in sorted(groups) for group in groups[name]]


def pooled_outcomes(baseline: Dict[str, List[int]], system: Dict[str, List[int]]) -> Tuple[List[int], List[int]]:
    """Both systems' outcomes over every phenomenon, in one order (pooled accuracy)."""
    if sorted(baseline) != sorted(system):
        raise DataError(f"the systems were scored on different contrastive sets: {sorted(baseline)} and "
                        f"{sorted(system)}")
    base, other = [], []
    for name in sorted(baseline):
        if len(baseline[name]) != len(system[name]):
            raise DataError(f"{name}: {len(baseline[name])} and {len(system[name])} examples: not the same set")
        base += baseline[name]
        other += system[name]
    return base, other


def select_examples(report: dict, phenomena: Optional[Sequence[str]] = None,
                    distances: Optional[Tuple[int, int]] = None, source: str = "consistency.json") -> dict:
    """The part of a consistency report that a comparison pools: its ``phenomena`` (None: every
    one), and of each only the examples whose antecedent lies ``distances`` = (low, high)
    sentences back (None: every example), with their outcomes and groups."""
    sets = {name: value for name, value in report.items() if name != "pooled"}
    if phenomena:
        missing = [name for name in phenomena if name not in sets]
        if missing:
            raise DataError(f"{source}: no contrastive set {', '.join(missing)} (it has {', '.join(sorted(sets))})")
        sets = {name: sets[name] for name in phenomena}
    if distances is None:
        return sets
    low, high = distances
    selected = {}
    for name, value in sets.items():
        if "distances" not in value:
            raise DataError(f"{source}: {name} has no per-example antecedent distances ('distances'); it was scored "
                            "before they were recorded: score it again (python -m rfa_doc_mt.scoring.consistency ...)")
        keep = [k for k, distance in enumerate(value["distances"]) if low <= distance <= high]
        selected[name] = {key: [value[key][k] for k in keep] for key in ("correct", "distances", "groups")
                          if key in value}
    if not any(value.get("correct") for value in selected.values()):
        raise DataError(f"{source}: no example whose antecedent lies {low}-{high} sentences back")
    return selected


def parse_distances(text: str) -> Tuple[int, int]:
    """``8-14`` → (8, 14); ``1`` → (1, 1)."""
    low, _, high = text.partition("-")
    try:
        bounds = (int(low), int(high or low))
    except ValueError:
        raise DataError(f"distances {text!r}: expected LOW-HIGH or N (sentences back), e.g. 8-14") from None
    if bounds[0] > bounds[1] or bounds[0] < 0:
        raise DataError(f"distances {text!r}: expected 0 <= LOW <= HIGH")
    return bounds


def compare_outputs(baseline: Sequence[str], system: Sequence[str], references: Sequence[str], documents,
                    baseline_consistency: Optional[dict] = None, system_consistency: Optional[dict] = None,
                    test: str = "bs", samples: Optional[int] = None, seed: int = DEFAULT_SEED,
                    tokenize: str = "13a", phenomena: Optional[Sequence[str]] = None,
                    distances: Optional[Tuple[int, int]] = None) -> List[Comparison]:
    """s-BLEU, d-BLEU and (given both reports) pooled consistency of two systems, each compared;
    the consistency over ``phenomena`` and ``distances`` only, where given (:func:`select_examples`)."""
    check_seed(seed)
    comparisons = [
        bleu_comparison(baseline, system, references, "s-BLEU", "sentences", test, samples, seed, tokenize),
        bleu_comparison(join_documents(baseline, documents), join_documents(system, documents),
                        join_documents(references, documents), "d-BLEU", "documents", test, samples, seed, tokenize)]
    if (baseline_consistency is None) != (system_consistency is None):
        raise DataError("consistency: give both systems' reports, or neither")
    if baseline_consistency is not None:
        reports = [select_examples(report, phenomena, distances, source)
                   for report, source in ((baseline_consistency, "baseline"), (system_consistency, "system"))]
        base, other = pooled_outcomes(consistency_outcomes(reports[0], "baseline"),
                                      consistency_outcomes(reports[1], "system"))
        groups = [consistency_groups(report) for report in reports]
        if groups[0] != groups[1]:
            raise DataError("consistency: the two reports group their examples differently: not the same sets")
        metric = "consistency" + (f" {distances[0]}-{distances[1]} back" if distances else "")
        comparisons.append(consistency_comparison(base, other, samples or DEFAULT_SAMPLES["bs"], seed, metric,
                                                  groups=pooled_groups(groups[0]) if groups[0] else None))
    return comparisons


def position_groups(documents: Sequence, window: int) -> Dict[str, List[int]]:
    """The sentences' indices (documents in order) by how much of a window of ``window``
    sentences their context fills: {"first": no context, "2-(L-1)": part of it, "L on": all of it};
    at ``window`` 2 no sentence fills part of it."""
    if window < 2:
        raise ValueError(f"a window of {window} sentence holds no context: give L of 2 or more")
    names = ("first", f"2-{window - 1}" if window > 3 else "2", f"{window} on")
    groups: Dict[str, List[int]] = {name: [] for name in (names if window > 2 else (names[0], names[2]))}
    start = 0
    for document in documents:
        for position in range(document.num_sentences):
            name = names[0] if position == 0 else names[2] if position >= window - 1 else names[1]
            groups[name].append(start + position)
        start += document.num_sentences
    return groups


def by_position(baseline: Sequence[str], system: Sequence[str], references: Sequence[str], documents: Sequence,
                window: int, test: str = "bs", samples: Optional[int] = None, seed: int = DEFAULT_SEED,
                tokenize: str = "13a") -> List[Comparison]:
    """s-BLEU of two systems compared within each of :func:`position_groups` (its empty groups left out)."""
    comparisons = []
    for name, indices in position_groups(documents, window).items():
        if indices:
            comparisons.append(bleu_comparison([baseline[i] for i in indices], [system[i] for i in indices],
                                               [references[i] for i in indices], f"s-BLEU, sentence {name}",
                                               "sentences", test, samples, seed, tokenize))
    return comparisons


def compare_runs(baseline_dir: str, system_dir: str, split: str = "test", **options) -> List[Comparison]:
    """Two run directories of scripts/run_system.sh (SPLIT.hyp, .ref, .docs, consistency.json)."""
    def path(directory, name):
        return os.path.join(directory, name)

    references = read_lines(path(baseline_dir, f"{split}.ref"))
    if read_lines(path(system_dir, f"{split}.ref")) != references:
        raise DataError(f"{baseline_dir} and {system_dir} were scored against different references")
    baseline, system = read_lines(path(baseline_dir, f"{split}.hyp")), read_lines(path(system_dir, f"{split}.hyp"))
    documents = read_docs(path(baseline_dir, f"{split}.docs"), num_sentences=len(references))
    reports = [path(d, "consistency.json") for d in (baseline_dir, system_dir)]
    consistency = [read_json(p) for p in reports] if all(os.path.isfile(p) for p in reports) else [None, None]
    return compare_outputs(baseline, system, references, documents, *consistency, **options)


def read_json(path: str) -> dict:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def format_comparisons(comparisons: Sequence[Comparison], baseline: str = "baseline", system: str = "system") -> str:
    lines = [f"{'metric':<12} {'baseline':>8} {'system':>8} {'diff':>8}  95% interval of the diff, p",
             *[str(c) for c in comparisons], f"baseline: {baseline}", f"system:   {system}"]
    signature = next((c.signature for c in comparisons if c.signature), None)
    if signature:
        lines.append(f"BLEU: sacrebleu {signature}")
    return "\n".join(lines)


def main(argv=None) -> List[Comparison]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--baseline", required=True, help="the baseline's translations, one sentence per line")
    parser.add_argument("--system", required=True, help="the other system's translations of the same sentences")
    parser.add_argument("--ref", required=True, help="references, aligned with both")
    parser.add_argument("--docs", required=True, help="document boundaries (.docs file), for d-BLEU")
    parser.add_argument("--baseline-consistency", help="the baseline's consistency.json (scoring.consistency --json)")
    parser.add_argument("--system-consistency", help="the other system's consistency.json, on the same sets")
    parser.add_argument("--phenomena", metavar="NAME[,NAME...]",
                        help="consistency over these contrastive sets only (default: every set of the reports)")
    parser.add_argument("--distances", metavar="LOW-HIGH",
                        help="consistency over the examples whose antecedent lies LOW-HIGH sentences back only "
                             "(e.g. 8-14; the reports' per-example distances)")
    parser.add_argument("--by-position", type=int, metavar="L",
                        help="also s-BLEU within a document's first sentences, its 2nd to (L-1)th and the rest: "
                             "where a window of L sentences holds no context, part of it, all of it")
    parser.add_argument("--test", choices=sorted(TESTS), default="bs",
                        help="BLEU's test: bs = paired bootstrap (default), ar = approximate randomization")
    parser.add_argument("--samples", type=int,
                        help="bootstrap resamples (default 1000) or randomization trials (default 10000)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED,
                        help=f"seed of the resampling (default {DEFAULT_SEED}, sacrebleu's)")
    parser.add_argument("--tokenize", default="13a", help="sacrebleu tokenizer (zh for Chinese targets)")
    parser.add_argument("--json", help="also write the comparisons here")
    args = parser.parse_args(argv)
    if args.samples is not None and args.samples < 1:
        parser.error("--samples must be at least 1")
    if bool(args.baseline_consistency) != bool(args.system_consistency):
        parser.error("give --baseline-consistency and --system-consistency together")
    references = read_lines(args.ref)
    baseline, system = read_lines(args.baseline), read_lines(args.system)
    for name, lines in ((args.baseline, baseline), (args.system, system)):
        if len(lines) != len(references):
            raise DataError(f"{name} has {len(lines)} lines but {args.ref} has {len(references)}")
    documents = read_docs(args.docs, num_sentences=len(references))
    reports = [read_json(p) for p in (args.baseline_consistency, args.system_consistency)] \
        if args.baseline_consistency else [None, None]
    if (args.phenomena or args.distances) and not args.baseline_consistency:
        parser.error("--phenomena and --distances select contrastive examples: give the consistency reports")
    if args.by_position is not None and args.by_position < 2:
        parser.error("--by-position: a window of fewer than 2 sentences holds no context")
    comparisons = compare_outputs(baseline, system, references, documents, *reports, test=args.test,
                                  samples=args.samples, seed=args.seed, tokenize=args.tokenize,
                                  phenomena=args.phenomena.split(",") if args.phenomena else None,
                                  distances=parse_distances(args.distances) if args.distances else None)
    if args.by_position:
        comparisons += by_position(baseline, system, references, documents, args.by_position, test=args.test,
                                   samples=args.samples, seed=args.seed, tokenize=args.tokenize)
    print(format_comparisons(comparisons, args.baseline, args.system))
    if args.json:
        with atomic_write(args.json) as handle:
            json.dump({"baseline": args.baseline, "system": args.system,
                       "comparisons": [c.as_dict() for c in comparisons]}, handle, indent=2)
    return comparisons


if __name__ == "__main__":
    try:
        main()
    except DataError as error:
        sys.exit(f"error: {error}")
