"""Contrastive consistency accuracy (Voita et al. 2019; Wu et al. 2022, Figure 3).

Each example has one source (context sentences + the current one, joined by ``_eos``) and
several target candidates differing in the current sentence; one is true. The model scores
every candidate with the **mean token negative log-likelihood of the current target
sentence** (its EOS included), teacher-forced on the candidate's own context sentences,
computed from the model's log-probabilities directly: no label smoothing, whatever the
training criterion was. The example counts as correct when the true candidate has the
lowest loss (ties count as wrong). The model sees as much context as it was trained with
(the last ``--context-size`` + 1 sentences of each side).

Accuracy is reported per phenomenon (one JSON file each), per ``ctx_dist`` and, for sets whose
examples name ``categories`` (ContraPro's pronoun, antecedent distance in Müller et al.'s buckets
0, 1, 2, 3, >3 and intrasegmental; Bawden et al.'s types: :mod:`rfa_doc_mt.data.contrastive_formats`),
per category of each axis, beside the random baseline of the same file: the mean over examples
of 1 / number of distinct candidates.
Each phenomenon's report also lists every counted example's outcome (``correct``: 1 right, 0
wrong, in file order): two systems scored on the same sets are compared example by example
(``python -m rfa_doc_mt.scoring.compare``).

Identical candidates (Voita et al.'s released ellipsis sets repeat one in some examples) are one
candidate: scored once, right when the true text has the lowest loss whichever copy
``true_ind`` names; an example left with a single distinct candidate is skipped and counted.
"""

import argparse
import json
import os
import sys
from collections import defaultdict
from typing import Dict, List, Sequence

import torch
from fairseq.data import data_utils

from ..data.io import DataError, atomic_write
from ..data.voita import (
    contrastive_files,
    distinct_candidates,
    phenomenon_name,
    read_contrastive,
    split_sentences,
)
from ..data.windows import current_sentence_mask, join_window


def accuracy_report(examples: Sequence[dict], losses: Sequence[Sequence[float]]) -> dict:
    """Accuracy overall, per ``ctx_dist`` and, where examples name ``categories``, per category
    of each axis (``by_category``: {axis: {value: examples, accuracy}}), with the random
    baseline, from candidate losses.

    Identical candidates are one candidate (they get identical losses): an example is right when
    the true text has the lowest loss of its distinct texts, whichever of its copies
    ``true_ind`` names. An example with a single distinct text is skipped (``skipped``).
    ``correct``: the outcome of every counted example, in order (1 right, 0 wrong), ``distances``
    its ``ctx_dist`` (-1 where the set gives none); ``groups``, where the examples name one
    (``group``: the mirrored pairs of the synthetic sets, the blocks of Bawden et al.'s), the
    group of each counted example, in the same order: the unit a significance test resamples."""
    if len(examples) != len(losses):
        raise ValueError(f"{len(examples)} examples but {len(losses)} loss lists")
    correct_by_distance: Dict[int, List[int]] = defaultdict(list)
    correct_by_category: Dict[str, Dict[str, List[int]]] = defaultdict(lambda: defaultdict(list))
    correct, random_baseline, groups, distances = [], [], [], []
    repeating = skipped = 0
    for example, candidate_losses in zip(examples, losses):
        if len(candidate_losses) != len(example["dst"]):
            raise ValueError("one loss per candidate expected")
        texts, true_index = distinct_candidates(example)
        repeating += len(texts) < len(example["dst"])
        if len(texts) < 2:
            skipped += 1
            continue
        loss_of_text = {}
        for text, loss in zip(example["dst"], candidate_losses):
            if loss_of_text.setdefault(text, loss) != loss:
                raise ValueError(f"identical candidates with different losses: {text!r}")
        distinct_losses = [loss_of_text[text] for text in texts]
        best = min(range(len(texts)), key=lambda k: distinct_losses[k])
        unique_best = distinct_losses.count(distinct_losses[best]) == 1
        hit = int(unique_best and best == true_index)
        correct.append(hit)
        groups.append(example.get("group"))
        distances.append(int(example.get("ctx_dist", -1)))
        correct_by_distance[distances[-1]].append(hit)
        for axis, value in example.get("categories", {}).items():
            correct_by_category[axis][value].append(hit)
        random_baseline.append(1.0 / len(texts))
    if not correct:
        raise DataError(f"none of its {len(examples)} examples has two distinct candidates")
    optional = {"groups": groups} if all(group is not None for group in groups) else {}
    if correct_by_category:
        optional["by_category"] = {
            axis: {value: {"examples": len(hits), "accuracy": 100.0 * sum(hits) / len(hits)}
                   for value, hits in sorted(values.items())}
            for axis, values in correct_by_category.items()}
    return {
        "examples": len(correct),
        "accuracy": 100.0 * sum(correct) / len(correct),
        "random": 100.0 * sum(random_baseline) / len(random_baseline),
        "by_ctx_dist": {str(d): {"examples": len(hits), "accuracy": 100.0 * sum(hits) / len(hits)}
                        for d, hits in sorted(correct_by_distance.items())},
        "repeated_candidates": repeating,
        "skipped": skipped,
        "correct": correct,
        "distances": distances,
        **optional,
    }


def pooled_report(reports: Dict[str, dict]) -> dict:
    """All phenomena together, each example weighted once."""
    examples = sum(r["examples"] for r in reports.values())
    return {
        "examples": examples,
        "accuracy": sum(r["accuracy"] * r["examples"] for r in reports.values()) / examples,
        "random": sum(r["random"] * r["examples"] for r in reports.values()) / examples,
        "skipped": sum(r.get("skipped", 0) for r in reports.values()),
    }


class CandidateScorer:
    """Mean token NLL of the current target sentence for (source, candidate) windows."""

    def __init__(self, model, task, batch_size: int = 64):
        self.model = model.eval()
        self.task = task
        self.batch_size = batch_size
        self.sentences_per_window = task.cfg.context_size + 1
        self.device = next(model.parameters()).device

    def encode_window(self, text: str, dictionary, separator: int) -> torch.Tensor:
        sentences = split_sentences(text, "contrastive example")[-self.sentences_per_window:]
        encoded = [dictionary.encode_line(s, add_if_not_exist=False, append_eos=True).long() for s in sentences]
        return join_window(encoded, separator, dictionary.eos())

    @torch.no_grad()
    def losses(self, pairs: Sequence[tuple]) -> List[float]:
        """One loss per (source text, candidate text) pair."""
        if hasattr(self.model, "score_candidates"):
            return self.losses_sentence_by_sentence(pairs)
        task = self.task
        pad, eos = task.tgt_dict.pad(), task.tgt_dict.eos()
        result: List[float] = []
        for start in range(0, len(pairs), self.batch_size):
            chunk = pairs[start:start + self.batch_size]
            sources = [self.encode_window(s, task.src_dict, task.source_separator) for s, _ in chunk]
            targets = [self.encode_window(t, task.tgt_dict, task.target_separator) for _, t in chunk]
            src_tokens = data_utils.collate_tokens(sources, pad, eos).to(self.device)
            src_lengths = torch.tensor([len(s) for s in sources], device=self.device)
            target = data_utils.collate_tokens(targets, pad, eos).to(self.device)
            prev_output_tokens = data_utils.collate_tokens(targets, pad, eos,
                                                           move_eos_to_beginning=True).to(self.device)
            net_output = self.model(src_tokens=src_tokens, src_lengths=src_lengths,
                                    prev_output_tokens=prev_output_tokens)
            log_probs = self.model.get_normalized_probs(net_output, log_probs=True).float()
            token_nll = -log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
            scored = current_sentence_mask(target, task.target_separator) & target.ne(pad)
            per_row = (token_nll * scored).sum(-1) / scored.sum(-1).clamp(min=1)
            result.extend(per_row.tolist())
        return result

    @torch.no_grad()
    def losses_sentence_by_sentence(self, pairs: Sequence[tuple]) -> List[float]:
        """For models that read a document one sentence at a time (the recurrent memory):
        every sentence of the example is given, the model reads the context first."""
        def encode(text, dictionary):
            return [dictionary.encode_line(s, add_if_not_exist=False, append_eos=True).long()
                    for s in split_sentences(text, "contrastive example")]

        result: List[float] = []
        for start in range(0, len(pairs), self.batch_size):
            chunk = pairs[start:start + self.batch_size]
            result += self.model.score_candidates([encode(s, self.task.src_dict) for s, _ in chunk],
                                                  [encode(t, self.task.tgt_dict) for _, t in chunk])
        return result

    def score_examples(self, examples: Sequence[dict]) -> List[List[float]]:
        """One loss per candidate; each distinct candidate text is scored once, its copies
        get the same loss."""
        texts = [distinct_candidates(e)[0] for e in examples]
        flat = self.losses([(e["src"], text) for e, distinct in zip(examples, texts) for text in distinct])
        losses, k = [], 0
        for example, distinct in zip(examples, texts):
            loss_of_text = dict(zip(distinct, flat[k:k + len(distinct)]))
            losses.append([loss_of_text[candidate] for candidate in example["dst"]])
            k += len(distinct)
        return losses


def format_table(reports: Dict[str, dict]) -> str:
    lines = ["| phenomenon | examples | accuracy | random | by ctx_dist |", "| --- | ---: | ---: | ---: | --- |"]
    for name, report in reports.items():
        distances = " ".join(f"{d}:{r['accuracy']:.1f}" for d, r in report.get("by_ctx_dist", {}).items())
        lines.append(f"| {name} | {report['examples']} | {report['accuracy']:.1f} | {report['random']:.1f} "
                     f"| {distances} |")
    for name, report in reports.items():
        for axis, values in report.get("by_category", {}).items():
            lines.append(f"{name} by {axis}: " + ", ".join(f"{value} {r['accuracy']:.1f} ({r['examples']})"
                                                           for value, r in values.items()))
    for name, report in reports.items():
        if report.get("repeated_candidates"):
            lines.append(f"{name}: {report['repeated_candidates']} examples repeat a candidate (copies scored once)")
        if report.get("skipped") and name != "pooled":
            lines.append(f"{name}: {report['skipped']} examples skipped (a single distinct candidate)")
    return "\n".join(lines)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description="Contrastive consistency accuracy of a trained model")
    parser.add_argument("--path", required=True, help="model checkpoint")
    parser.add_argument("--data", required=True, help="the binarized data directory the model was trained on")
    parser.add_argument("--sets", nargs="+", required=True,
                        help="contrastive JSON files (prepared: BPE applied), or a directory written by "
                             "`prepare consistency` (all sets listed in its consistency.json)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument("--json", help="write the report here")
    args = parser.parse_args(argv)

    # fairseq would stop with a traceback (OSError / FileNotFoundError) on these
    if not os.path.isfile(args.path):
        raise DataError(f"{args.path}: checkpoint not found")
    if not os.path.isdir(args.data):
        raise DataError(f"{args.data}: data directory not found")
    for path in args.sets:
        if not os.path.exists(path):
            raise DataError(f"{path}: contrastive set not found")

    from fairseq import checkpoint_utils

    import rfa_doc_mt  # noqa: F401  (registers the task and models)

    models, _, task = checkpoint_utils.load_model_ensemble_and_task([args.path], arg_overrides={"data": args.data})
    model = models[0]
    if torch.cuda.is_available() and not args.cpu:
        model = model.cuda()
    scorer = CandidateScorer(model, task, args.batch_size)
    reports = {}
    for path in contrastive_files(args.sets, (task.cfg.source_lang, task.cfg.target_lang)):
        examples = read_contrastive(path)
        try:
            reports[phenomenon_name(path)] = accuracy_report(examples, scorer.score_examples(examples))
        except DataError as error:
            raise DataError(f"{path}: {error}") from None
    reports["pooled"] = pooled_report(reports)
    print(format_table(reports))
    if args.json:
        with atomic_write(args.json) as handle:
            json.dump(reports, handle, indent=2)
    return reports


if __name__ == "__main__":
    try:
        main()
    except DataError as error:
        sys.exit(f"error: {error}")
