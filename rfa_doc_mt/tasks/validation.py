"""Validation metrics that ``fairseq-train`` can select checkpoints and stop early on, as paper
000 does (appendix A.2: early stopping with a patience of 10 on development BLEU, or on
consistency for the OpenSubtitles consistency models):

* ``bleu`` (``--eval-bleu``): corpus BLEU of the current (last) sentence of every window,
  decoded as ``fairseq-generate`` decodes in this task (``task.inference_step``: ``--decode-mode``
  free or forced-prefix, the recurrent memory), post-processed as ``generation/collect.py`` does
  (``prep.json``), against the references ``scripts/score.sh`` scores against
  (``{split}.ref.{tgt}``), through sacrebleu with ``--eval-bleu-tokenize`` (13a, as score.sh's
  default): the s-BLEU ``scripts/decode.sh`` + ``scripts/score.sh`` print for the same
  hypotheses. Each batch logs sacrebleu's sufficient statistics, summed over batches and workers;
  :func:`reduce_bleu` derives ``bleu`` from them.
* ``consistency`` (a contrastive validation subset, ``--valid-subset valid_consistency``):
  accuracy (%) on contrastive sets, each candidate scored as ``rfa_doc_mt.scoring.consistency``
  scores it (mean token NLL of the current target sentence from the model's log-probabilities,
  no label smoothing; right when the true candidate has the lowest loss, ties wrong), pooled over
  the sets as the scorer's ``pooled`` row, and ``consistency_<set>`` per set. Each batch logs
  (examples, correct) per set.

Every validation logging output carries the same keys, whatever its batch (fairseq all-reduces
them as one flat tensor across workers, so a worker's dummy batch must have the keys of the
others' real ones): those of the criterion, then the BLEU statistics (``--eval-bleu``), then
the consistency counts of every contrastive set loaded; a batch that does not compute one of
them logs zeros, which reduce_metrics ignores.
"""

import logging
import os
from typing import Dict, List, Sequence

import torch
from fairseq import metrics
from fairseq.tasks.translation import EVAL_BLEU_ORDER

from ..data.io import DataError, read_lines
from ..data.windows import current_sentence_mask
from ..generation import memory_decoding
from ..generation.memory_decoding import captured_output

logger = logging.getLogger(__name__)

BLEU_KEYS = (["_bleu_sys_len", "_bleu_ref_len"] + [f"_bleu_counts_{n}" for n in range(EVAL_BLEU_ORDER)]
             + [f"_bleu_totals_{n}" for n in range(EVAL_BLEU_ORDER)])
# fairseq's own --eval-bleu options that this task replaces (it post-processes as prep.json says)
REPLACED_BLEU_OPTIONS = {"eval_bleu_detok": "space", "eval_bleu_detok_args": "{}", "eval_bleu_remove_bpe": None,
                         "eval_tokenized_bleu": False}


def unwrapped(model):
    """The model inside fairseq's / torch's distributed wrappers."""
    while hasattr(model, "module"):
        model = model.module
    return model


def check_bleu_options(cfg) -> None:
    """Stop on fairseq's --eval-bleu post-processing options, which would not apply here."""
    given = [name for name, default in REPLACED_BLEU_OPTIONS.items() if getattr(cfg, name, default) != default]
    if cfg.eval_bleu and given:
        options = ", ".join("--" + name.replace("_", "-") for name in given)
        raise ValueError(f"{options}: doc_translation's validation BLEU undoes the corpus's own pre-processing "
                         "(prep.json: sentencepiece, truecasing, Moses), as scripts/decode.sh does; drop "
                         f"{options} (sacrebleu's tokenizer is --eval-bleu-tokenize)")


class WindowBleu:
    """Sufficient statistics of validation s-BLEU, batch by batch (see the module docstring)."""

    def __init__(self, data_dir: str, target_lang: str, tokenize: str):
        from sacrebleu.metrics import BLEU

        from ..data.processing import corpus_postprocessor

        try:
            self.metric = BLEU(tokenize=tokenize)
        except KeyError:
            raise ValueError(f"--eval-bleu-tokenize {tokenize!r}: not a sacrebleu tokenizer") from None
        self.postprocess = corpus_postprocessor(data_dir, target_lang)
        self.data_dir, self.target_lang = data_dir, target_lang
        self.references: Dict[str, List[str]] = {}
        self.signature_logged = False

    def load_references(self, split: str, num_sentences: int) -> None:
        """``{split}.ref.{tgt}``, the references scoring reads, when the corpus has them; without
        them the reference is the binarized target's current sentence, post-processed."""
        path = os.path.join(self.data_dir, f"{split}.ref.{self.target_lang}")
        if not os.path.isfile(path):
            logger.warning(f"{path} not found: validation BLEU of '{split}' scores against the binarized "
                           "targets, post-processed (scripts/score.sh would need the reference file)")
            return
        references = read_lines(path)
        if len(references) != num_sentences:
            raise DataError(f"{path} has {len(references)} lines but split '{split}' has {num_sentences} sentences")
        self.references[split] = references

    def hypotheses(self, task, generator, model, sample) -> List[str]:
        """Best translation of each window's current sentence, as collect.py writes it."""
        from fairseq_cli.generate import get_symbols_to_strip_from_output

        if task.cfg.recurrent_memory:
            # the memories of decoding (the model's own translations) apart from those of the
            # validation loss (teacher-forced), which fairseq computes on the same batches
            beams = memory_decoding.inference_step(task.bleu_memories, generator, [unwrapped(model)], sample)
        else:
            beams = task.inference_step(generator, [model], sample)
        strip = get_symbols_to_strip_from_output(generator)
        # fairseq-generate's H line: the dictionary's string of the tokens (collect.py strips it)
        return [self.postprocess(task.tgt_dict.string(beam[0]["tokens"].int().cpu(), None,
                                                      extra_symbols_to_ignore=strip).strip())
                for beam in beams]

    def references_of(self, task, sample) -> List[str]:
        references = self.references.get(sample.get("split"))
        if references is not None:
            return [references[i] for i in sample["window"]["current_sentence"].tolist()]
        target = sample["target"]
        current = current_sentence_mask(target, task.target_separator) & target.ne(task.tgt_dict.pad())
        return [self.postprocess(task.tgt_dict.string(row[keep].int().cpu(), None, unk_string="UNKNOWNTOKENINREF"))
                for row, keep in zip(target, current)]

    def statistics(self, task, generator, model, sample) -> Dict[str, int]:
        references = self.references_of(task, sample)  # before decoding, which masks sample["target"]
        hypotheses = self.hypotheses(task, generator, model, sample)
        if task.cfg.eval_bleu_print_samples:
            logger.info(f"example hypothesis: {hypotheses[0]}")
            logger.info(f"example reference: {references[0]}")
        score = self.metric.corpus_score(hypotheses, [references])
        if not self.signature_logged:  # sacrebleu knows its signature once it has scored
            logger.info(f"validation BLEU: sacrebleu {self.metric.get_signature()}, current sentence of each window")
            self.signature_logged = True
        statistics = {"_bleu_sys_len": score.sys_len, "_bleu_ref_len": score.ref_len}
        for n in range(EVAL_BLEU_ORDER):
            statistics[f"_bleu_counts_{n}"] = score.counts[n]
            statistics[f"_bleu_totals_{n}"] = score.totals[n]
        return statistics


def summed(logging_outputs: Sequence[dict], key: str):
    total = sum(log.get(key, 0) for log in logging_outputs)
    return total.item() if torch.is_tensor(total) else total


def reduce_bleu(logging_outputs: Sequence[dict]) -> None:
    """Log the summed statistics; ``bleu`` is derived from them when the validation is over.

    As ``TranslationTask.reduce_metrics``, except that a batch whose hypotheses are all empty
    still counts its reference length (fairseq's skips such a batch, which raises BLEU's brevity
    penalty above sacrebleu's on the same hypotheses, and logs no ``bleu`` at all when every
    hypothesis is empty, which stops fairseq-train with a KeyError)."""
    totals = {key: summed(logging_outputs, key) for key in BLEU_KEYS}
    if not totals["_bleu_ref_len"]:
        return  # no reference: not a subset scored with BLEU
    for key, value in totals.items():
        metrics.log_scalar(key, value)

    def bleu(meters):
        from sacrebleu.metrics import BLEU

        score = BLEU.compute_bleu(
            correct=[meters[f"_bleu_counts_{n}"].sum for n in range(EVAL_BLEU_ORDER)],
            total=[meters[f"_bleu_totals_{n}"].sum for n in range(EVAL_BLEU_ORDER)],
            sys_len=int(meters["_bleu_sys_len"].sum), ref_len=int(meters["_bleu_ref_len"].sum),
            smooth_method="exp")  # sacrebleu's default, as scripts/score.sh
        return round(score.score, 2)  # as fairseq and score.sh report it

    metrics.log_derived("bleu", bleu)


# ---- consistency -----------------------------------------------------------------------------


def consistency_keys(set_name: str):
    return f"_consistency_examples:{set_name}", f"_consistency_correct:{set_name}"


def contrastive_valid_step(task, sample, model, criterion):
    """The criterion's loss over every candidate window, and the consistency counts of the batch:
    each row's loss is the mean token NLL of its current target sentence, computed from the
    criterion's own forward pass as ``CandidateScorer.losses`` computes it."""
    contrastive = sample["contrastive"]
    model.eval()
    with torch.no_grad(), captured_output(model) as outputs:
        loss, sample_size, logging_output = criterion(model, sample)
    core = unwrapped(model)
    if hasattr(core, "score_candidates"):
        # the recurrent memory reads the context one sentence at a time (scoring/consistency.py)
        with torch.no_grad():
            losses = torch.tensor(core.score_candidates(contrastive["source_sentences"],
                                                        contrastive["target_sentences"]))
    else:
        if len(outputs) != 1:
            raise RuntimeError(f"the criterion called the model {len(outputs)} times; consistency needs the "
                               "output of its one forward pass")
        target = sample["target"]
        log_probs = core.get_normalized_probs(outputs[0], log_probs=True).float()
        token_nll = -log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
        scored = current_sentence_mask(target, task.target_separator) & target.ne(task.tgt_dict.pad())
        losses = (token_nll * scored).sum(-1) / scored.sum(-1).clamp(min=1)
    counts = example_counts(losses.cpu(), contrastive["example"].cpu(), contrastive["true_row"].cpu(),
                            contrastive["set"].cpu(), task.contrastive_set_names)
    return loss, sample_size, logging_output, counts


def example_counts(losses: torch.Tensor, example_of_row: torch.Tensor, true_row: torch.Tensor,
                   set_of_example: torch.Tensor, set_names: Sequence[str]) -> Dict[str, int]:
    """{examples, correct} per set: an example is right when its true row has the lowest loss of
    its rows and no other row has that loss (``accuracy_report``'s rule)."""
    counts = {key: 0 for name in set_names for key in consistency_keys(name)}
    for example, (true, set_number) in enumerate(zip(true_row.tolist(), set_of_example.tolist())):
        example_losses = losses[example_of_row == example].tolist()
        rows = (example_of_row == example).nonzero().squeeze(-1).tolist()
        best = min(range(len(example_losses)), key=lambda k: example_losses[k])
        unique_best = example_losses.count(example_losses[best]) == 1
        examples_key, correct_key = consistency_keys(set_names[set_number])
        counts[examples_key] += 1
        counts[correct_key] += int(unique_best and rows[best] == true)
    return counts


def reduce_consistency(logging_outputs: Sequence[dict], set_names: Sequence[str]) -> None:
    """Log the summed counts; ``consistency`` (pooled accuracy, %) and ``consistency_<set>`` are
    derived from them when the validation is over."""
    totals = {key: summed(logging_outputs, key) for name in set_names for key in consistency_keys(name)}
    if not any(totals[consistency_keys(name)[0]] for name in set_names):
        return  # not a contrastive subset
    for key, value in totals.items():
        metrics.log_scalar(key, value)

    def accuracy(meters, names):
        examples = sum(meters[consistency_keys(name)[0]].sum for name in names)
        correct = sum(meters[consistency_keys(name)[1]].sum for name in names)
        return 100.0 * correct / examples if examples else float("nan")

    metrics.log_derived("consistency", lambda meters: accuracy(meters, set_names))
    for name in set_names:
        if totals[consistency_keys(name)[0]]:  # sets of another contrastive subset stay out
            metrics.log_derived(f"consistency_{name}", lambda meters, name=name: accuracy(meters, [name]))


def with_validation_keys(logging_output: dict, eval_bleu: bool, set_names: Sequence[str], values: dict) -> dict:
    """``logging_output`` with the BLEU statistics (``eval_bleu``) and the consistency counts of
    ``set_names`` appended in a fixed order, from ``values`` or zero (see the module docstring)."""
    keys = (list(BLEU_KEYS) if eval_bleu else []) + [key for name in set_names for key in consistency_keys(name)]
    unknown = set(values) - set(keys)
    if unknown:
        raise RuntimeError(f"validation statistics without a key in every logging output: {sorted(unknown)}")
    for key in keys:
        logging_output[key] = values.get(key, 0)
    return logging_output
