"""The ``doc_translation`` task: sentence-level binarized data, document windows at load time.

Data directory layout (written by ``python -m rfa_doc_mt.data.prepare``)::

    dict.{src}.txt dict.{tgt}.txt           fairseq dictionaries (joined)
    {split}.{src}-{tgt}.{lang}.bin/.idx     one sentence per item
    {split}.docs                            document boundaries (see data/io.py)

Decoding (``fairseq-generate``) translates every window and keeps only the translation of
its last sentence (Wu et al. 2022, Figure 1). ``--decode-mode forced-prefix`` instead forces the
model's own translations of the context sentences as the decoder prefix (the behaviour of
the authors' release); windows are then decoded in document order.

``--recurrent-memory`` (the ``memory_doc_transformer`` of Feng et al. 2022) reads documents one sentence
at a time and carries a memory from each sentence to the next: every split is batched in
document order (batch t holds sentence t of a group of documents), training in optimisation
windows of ``--optimization-window`` sentence positions, document groups shuffled per epoch but
never the sentences within one; tasks/memory_steps.py (training, validation) and
generation/memory_decoding.py (decoding) carry the memories. On several workers
(``--ddp-backend legacy_ddp``) each worker reads whole document groups, and a checkpoint holds
the memories of the documents being read, so that a resumed run goes on as an uninterrupted one.

Validation can select checkpoints and stop early on ``bleu`` (``--eval-bleu``: s-BLEU of the
windowed decoding) and on ``consistency`` (a subset of contrastive sets, ``--valid-subset
valid_consistency``, read from ``DATA/valid_consistency/``): tasks/validation.py.
"""

import functools
import logging
import os
from dataclasses import dataclass, field

import numpy as np
import torch
from fairseq import utils
from fairseq.data import data_utils, iterators
from fairseq.dataclass import ChoiceEnum
from fairseq.distributed import utils as distributed_utils
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from ..data.contrastive import ContrastiveDataset
from ..data.io import DataError, read_docs
from ..data.voita import contrastive_files, phenomenon_name
from ..data.windows import (
    DocumentWindowDataset,
    current_sentence_mask,
    document_groups,
    document_ordered_group_batches,
    group_members,
    interleave_group_shards,
    last_sentence,
    memory_training_batches,
    memory_training_group_batches,
    parse_optimization_window,
)
from ..generation import memory_decoding
from ..generation.memory_decoding import DocumentMemories
from . import memory_steps, validation

logger = logging.getLogger(__name__)

SEPARATOR = "<sep>"


@dataclass
class DocTranslationConfig(TranslationConfig):
    context_size: int = field(
        default=0, metadata={"help": "number of previous sentences in each window (L - 1)"})
    separator_token: str = field(
        default=SEPARATOR, metadata={"help": "token joining the sentences of a window"})
    supervision: ChoiceEnum(["window", "current"]) = field(
        default="window",
        metadata={"help": "training loss on the whole target window, or on the current "
                          "(last) sentence only; 'current' pairs with --decode-mode forced-prefix"})
    fixed_window: bool = field(
        default=False,
        metadata={"help": "documents already are windows (Voita et al.'s OpenSubtitles): one "
                          "window per document, its last sentence the current one"})
    decode_mode: ChoiceEnum(["free", "forced-prefix"]) = field(
        default="free",
        metadata={"help": "free: translate the whole window, keep its last sentence (Wu et al. 2022); "
                          "forced-prefix: force earlier translations as the decoder prefix"})
    left_pad_source: bool = field(default=False, metadata={"help": "pad the source on the left"})
    recurrent_memory: bool = field(
        default=False,
        metadata={"help": "for memory_doc_transformer (Feng et al. 2022): one sentence per row (--context-size 0), "
                          "documents read in order with their memories carried from batch to batch"})
    optimization_window: str = field(
        default="1",
        metadata={"help": "with --recurrent-memory: sentence positions per update, N, A-B (drawn uniformly "
                          "for each update) or full (a whole document group); the window's losses are "
                          "back-propagated together (Feng et al. 2022, §5.3)"})
    patience_min_gain: float = field(
        default=0.0,
        metadata={"help": "with --patience: a validation counts as an improvement only when it beats the "
                          "reference (the last validation that did) by more than this, in the units of "
                          "--best-checkpoint-metric; 0: fairseq's rule (any gain). The checkpoint kept is still "
                          "the best"})
    eval_bleu_tokenize: str = field(
        default="13a",
        metadata={"help": "with --eval-bleu: sacrebleu's tokenizer for validation BLEU, as scripts/score.sh "
                          "--tokenize (zh for Chinese targets); hypotheses and references are post-processed "
                          "as prep.json says, so fairseq's --eval-bleu-detok/--eval-bleu-remove-bpe do not apply"})


@register_task("doc_translation", dataclass=DocTranslationConfig)
class DocTranslationTask(TranslationTask):
    cfg: DocTranslationConfig

    def __init__(self, cfg: DocTranslationConfig, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        # the separator is added at load time so that every prepared corpus carries it
        self.source_separator = src_dict.add_symbol(cfg.separator_token)
        self.target_separator = tgt_dict.add_symbol(cfg.separator_token)
        if cfg.left_pad_source or cfg.left_pad_target:
            raise ValueError("doc_translation pads on the right; drop --left-pad-source/--left-pad-target")
        if cfg.fixed_window and cfg.decode_mode == "forced-prefix":
            raise ValueError("--decode-mode forced-prefix needs sliding windows, not --fixed-window")
        # translations of current sentences, kept for forced-prefix decoding: {sentence: tokens}
        self.translations = {}
        validation.check_bleu_options(cfg)
        if cfg.patience_min_gain < 0:
            raise ValueError("--patience-min-gain must be at least 0")
        install_early_stopping_check()
        self.window_bleu = None  # validation BLEU (--eval-bleu), set up with the first split it scores
        self.contrastive_set_names = []  # sets of every contrastive validation subset loaded, in key order
        if cfg.recurrent_memory:
            if cfg.context_size != 0 or cfg.fixed_window or cfg.decode_mode != "free":
                raise ValueError("--recurrent-memory reads one sentence per row: use --context-size 0, "
                                 "no --fixed-window, --decode-mode free")
            self.optimization_window = parse_optimization_window(cfg.optimization_window)
            # memories of the documents being read, between batches (training / everything else)
            self.train_memories = DocumentMemories()
            self.eval_memories = DocumentMemories()
            self.bleu_memories = DocumentMemories()  # decoding for validation BLEU, apart from the loss's
            self.all_train_memories = None  # every worker's train_memories, collected for a checkpoint
            self.restored_train_memories = None  # train_memories read from a checkpoint

    @classmethod
    def setup_task(cls, cfg: DocTranslationConfig, **kwargs):
        paths = utils.split_paths(cfg.data)
        if not paths or not os.path.isdir(paths[0]):
            raise DataError(f"{cfg.data}: data directory not found")
        for lang in (cfg.source_lang, cfg.target_lang):
            if lang is not None and not os.path.isfile(os.path.join(paths[0], f"dict.{lang}.txt")):
                raise DataError(f"{os.path.join(paths[0], f'dict.{lang}.txt')}: dictionary not found "
                                f"(is '{lang}' a language of this corpus?)")
        return super().setup_task(cfg, **kwargs)

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        data_path = utils.split_paths(self.cfg.data)[(epoch - 1) % len(utils.split_paths(self.cfg.data))]
        src, tgt = self.cfg.source_lang, self.cfg.target_lang
        sets_dir = os.path.join(data_path, split)
        if os.path.isfile(os.path.join(sets_dir, "consistency.json")) or split.endswith("_consistency"):
            self.load_contrastive_sets(split, sets_dir)
            return
        prefix = os.path.join(data_path, f"{split}.{src}-{tgt}.")
        if not os.path.exists(prefix + src + ".idx"):
            prefix = os.path.join(data_path, f"{split}.{tgt}-{src}.")
        source = data_utils.load_indexed_dataset(prefix + src, self.src_dict, self.cfg.dataset_impl)
        target = data_utils.load_indexed_dataset(prefix + tgt, self.tgt_dict, self.cfg.dataset_impl)
        if source is None or target is None:
            raise DataError(f"{prefix}{{{src},{tgt}}}.bin/.idx: binarized split '{split}' not found")
        if len(source) != len(target):
            raise DataError(f"{prefix}{src} has {len(source)} sentences but {prefix}{tgt} has {len(target)}")
        docs_path = os.path.join(data_path, f"{split}.docs")
        documents = read_docs(docs_path, num_sentences=len(source))
        dataset = self.window_dataset(split, source, target, documents)
        dataset.check_positions(self.cfg.max_source_positions, self.cfg.max_target_positions, docs_path)
        logger.info(f"{split}: {len(documents)} documents, {len(source)} sentences, {len(dataset)} windows "
                    f"of up to {self.cfg.context_size + 1} sentences")
        self.datasets[split] = dataset
        if self.cfg.eval_bleu and split != self.cfg.train_subset:
            self.validation_bleu().load_references(split, len(source))

    def window_dataset(self, split: str, source, target, documents) -> DocumentWindowDataset:
        """The windows of a split as this task reads them (``target`` None: sources alone, to
        translate), batched for training when ``split`` is the training subset."""
        training = split == self.cfg.train_subset
        return DocumentWindowDataset(
            source, target, documents, self.cfg.context_size,
            source_separator=self.source_separator, target_separator=self.target_separator,
            pad=self.src_dict.pad(), eos=self.src_dict.eos(),
            fixed_window=self.cfg.fixed_window,
            supervise_window=self.cfg.supervision == "window",
            shuffle=training,
            document_ordered=self.cfg.recurrent_memory or (self.cfg.decode_mode == "forced-prefix" and not training),
            sentence_steps=self.cfg.recurrent_memory and training,
            split=split,
        )

    def validation_bleu(self) -> validation.WindowBleu:
        if self.window_bleu is None:
            self.window_bleu = validation.WindowBleu(utils.split_paths(self.cfg.data)[0], self.cfg.target_lang,
                                                     self.cfg.eval_bleu_tokenize)
        return self.window_bleu

    def load_contrastive_sets(self, split: str, sets_dir: str) -> None:
        """A validation subset of contrastive sets: ``DATA/{split}/`` as ``prepare consistency`` (or
        the synthetic corpus) writes it; each set is reported as ``consistency_<phenomenon>``."""
        if split == self.cfg.train_subset:
            raise DataError(f"{sets_dir}: contrastive sets are for validation, not training")
        if not os.path.isdir(sets_dir):
            raise DataError(
                f"{sets_dir}: no contrastive sets for the validation subset '{split}'. Prepare them there, e.g. "
                f"Voita et al.'s dev sets: scripts/prepare_consistency.sh --prep DATA --out {sets_dir} "
                f"deixis_dev.json lex_cohesion_dev.json (the synthetic corpus writes its own)")
        files = contrastive_files([sets_dir], (self.cfg.source_lang, self.cfg.target_lang))
        dataset = ContrastiveDataset.from_files(
            files, phenomenon_name, src_dict=self.src_dict, tgt_dict=self.tgt_dict,
            source_separator=self.source_separator, target_separator=self.target_separator,
            sentences_per_window=self.cfg.context_size + 1, sentence_lists=self.cfg.recurrent_memory)
        for name, skipped in dataset.skipped.items():
            if skipped:
                logger.info(f"{split}: {name}: {skipped} examples skipped (a single distinct candidate)")
        self.contrastive_set_names += [name for name in dataset.set_names if name not in self.contrastive_set_names]
        logger.info(f"{split}: {len(dataset)} contrastive examples ({', '.join(dataset.set_names)}), "
                    f"{int(dataset.num_candidates.sum())} candidates")
        self.datasets[split] = dataset

    def get_batch_iterator(self, dataset, max_tokens=None, max_sentences=None, max_positions=None,
                           ignore_invalid_inputs=False, required_batch_size_multiple=1, seed=1, num_shards=1,
                           shard_id=0, num_workers=0, epoch=1, data_buffer_size=0, disable_iterator_cache=False,
                           skip_remainder_batch=False, grouped_shuffling=False, update_epoch_batch_itr=False):
        sentence_steps = getattr(dataset, "sentence_steps", False)
        if not sentence_steps and not (num_shards > 1 and getattr(dataset, "document_ordered", False)):
            return super().get_batch_iterator(
                dataset, max_tokens, max_sentences, max_positions, ignore_invalid_inputs,
                required_batch_size_multiple, seed, num_shards, shard_id, num_workers, epoch, data_buffer_size,
                disable_iterator_cache, skip_remainder_batch, grouped_shuffling, update_epoch_batch_itr)
        # Recurrent-memory training (fixed document groups, their order drawn anew each epoch) and
        # document-ordered batches on several workers. Each worker gets whole document groups: a
        # document's sentences follow each other through one replica, which carries its memory (or
        # reads its earlier translations). Every worker computes the same batch list (same seed) and
        # fairseq's sharding deals each its own (data/windows.py: interleave_group_shards).
        with data_utils.numpy_seed(seed):
            indices = dataset.ordered_indices()
        if max_positions is not None:
            indices = self.filter_indices_by_size(indices, dataset, max_positions, ignore_invalid_inputs)
        index, num_tokens = dataset.index, dataset.num_tokens_vec(np.arange(len(dataset)))
        if sentence_steps:
            groups = group_members(index, indices, document_groups(index, indices, num_tokens, max_tokens,
                                                                   max_sentences))
            window = self.optimization_window

            def batch_sampler(dataset, epoch):
                rng = np.random.RandomState((seed, epoch))
                if num_shards == 1:
                    return memory_training_batches(index, groups, window, rng)
                return interleave_group_shards(memory_training_group_batches(index, groups, window, rng),
                                               num_shards)
            num_groups = len(groups)
        else:
            group_batches = document_ordered_group_batches(index, indices, num_tokens, max_tokens, max_sentences)
            batch_sampler = interleave_group_shards(group_batches, num_shards)
            num_groups = len(group_batches)
        if sentence_steps and num_groups < num_shards:
            logger.warning(f"{num_groups} document groups for {num_shards} workers: some workers only run "
                           "dummy batches")
        iterator = functools.partial(MemoryTrainingIterator, self) if sentence_steps else iterators.EpochBatchIterator
        return iterator(
            dataset=dataset, collate_fn=dataset.collater, batch_sampler=batch_sampler, seed=seed,
            num_shards=num_shards, shard_id=shard_id, num_workers=num_workers, epoch=epoch,
            buffer_size=data_buffer_size,
            disable_shuffling=True,  # the order is the point: batch_sampler shuffles groups only
            skip_remainder_batch=skip_remainder_batch)

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        if not self.cfg.recurrent_memory:
            return super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)
        if isinstance(getattr(model, "module", None), torch.nn.parallel.DistributedDataParallel):
            # each worker back-propagates once per sentence position of its window, a number that
            # differs between workers; torch's DDP all-reduces in every backward pass (and expects
            # every parameter in each), fairseq's legacy_ddp once per update
            raise ValueError("--recurrent-memory on several workers needs --ddp-backend legacy_ddp")
        self.all_train_memories = None  # training goes on: the memories collected are out of date
        if self.restored_train_memories is not None:
            device = next(model.parameters()).device
            self.train_memories.rows = {document: (position, {side: [m.to(device) for m in layers]
                                                              for side, layers in memory.items()})
                                        for document, (position, memory) in self.restored_train_memories.items()}
            self.restored_train_memories = None
        return memory_steps.train_step(self.train_memories, sample, model, criterion, optimizer,
                                          update_num, ignore_grad)

    # ---- recurrent-memory training state in checkpoints (MemoryTrainingIterator) ---------------

    def begin_valid_epoch(self, epoch, model):
        super().begin_valid_epoch(epoch, model)
        # validation BLEU decodes every split anew: a missing translation must fail, not read a stale one
        self.translations.clear()
        if self.cfg.recurrent_memory:
            self.bleu_memories.clear()
        world_size = distributed_utils.get_data_parallel_world_size()
        if self.cfg.recurrent_memory and world_size > 1:
            # fairseq validates on every worker before it writes a checkpoint, which the first
            # worker writes: it needs the memories of every worker's documents
            parts = [None] * world_size
            torch.distributed.all_gather_object(parts, memory_rows_on_cpu(self.train_memories),
                                                group=distributed_utils.get_data_parallel_group())
            self.all_train_memories = {document: row for part in parts for document, row in part.items()}

    def train_memories_to_save(self) -> dict:
        """{document: (sentence, memory)} of every worker, on the CPU."""
        if distributed_utils.get_data_parallel_world_size() == 1:
            return memory_rows_on_cpu(self.train_memories)
        if self.all_train_memories is None:
            logger.warning("this checkpoint holds the document memories of the first worker only: they are "
                           "collected from every worker at validation, which did not run since the last update "
                           "(--disable-validation?); on resume the other workers' documents restart from the "
                           "initial memory")
            return memory_rows_on_cpu(self.train_memories)
        return self.all_train_memories

    def restore_train_memories(self, rows: dict) -> None:
        self.restored_train_memories = rows  # moved to the model's device at the next train_step

    def get_checkpoint_dict(self) -> dict:
        """What fairseq adds to a checkpoint's ``extra_state`` for this task: the early-stopping
        counter of ``fairseq-train`` (:func:`early_stopping_state`), so that ``--patience`` counts
        across a resume (see :meth:`set_checkpoint_dict`)."""
        return {type(self).__name__: {"early_stopping": early_stopping_state()}}

    def set_checkpoint_dict(self, state: dict) -> None:
        """fairseq hands back what :meth:`get_checkpoint_dict` saved when it resumes a run."""
        restore_early_stopping(state.get("early_stopping"))

    def valid_step(self, sample, model, criterion):
        consistency, bleu = {}, {}
        if "contrastive" in sample:
            loss, sample_size, logging_output, consistency = validation.contrastive_valid_step(
                self, sample, model, criterion)
        else:
            if self.cfg.recurrent_memory:
                loss, sample_size, logging_output = memory_steps.valid_step(self.eval_memories, sample, model,
                                                                               criterion)
            else:
                # FairseqTask's: TranslationTask's own would add BLEU of whole windows
                loss, sample_size, logging_output = super(TranslationTask, self).valid_step(sample, model, criterion)
            if self.cfg.eval_bleu:
                bleu = self.validation_bleu().statistics(self, self.sequence_generator, model, sample)
        return loss, sample_size, validation.with_validation_keys(
            logging_output, self.cfg.eval_bleu, self.contrastive_set_names, {**bleu, **consistency})

    def reduce_metrics(self, logging_outputs, criterion):
        # FairseqTask's (the criterion's figures): TranslationTask's BLEU is validation.reduce_bleu's
        super(TranslationTask, self).reduce_metrics(logging_outputs, criterion)
        if self.cfg.eval_bleu:
            validation.reduce_bleu(logging_outputs)
        validation.reduce_consistency(logging_outputs, self.contrastive_set_names)

    def build_dataset_for_inference(self, src_tokens, src_lengths, constraints=None):
        raise NotImplementedError("doc_translation translates documents, not loose sentences: use "
                                  "fairseq-generate on a prepared split, or scripts/translate.sh on raw documents")

    # ---- decoding -----------------------------------------------------------------------

    def forced_prefix(self, sample):
        """Decoder prefix for each window: earlier translations joined by the separator."""
        windows = sample["window"]
        prefixes = []
        for first, current in zip(windows["first_sentence"].tolist(), windows["current_sentence"].tolist()):
            parts = []
            for sentence in range(first, current):
                if sentence not in self.translations:
                    raise RuntimeError(f"sentence {sentence} has not been translated yet: forced-prefix "
                                       "decoding needs document-ordered batches")
                parts += [self.translations[sentence], torch.tensor([self.target_separator])]
            prefixes.append(torch.cat(parts) if parts else torch.tensor([], dtype=torch.long))
        longest = max(len(p) for p in prefixes)
        if longest == 0:
            return None
        prefix = data_utils.collate_tokens(prefixes, self.tgt_dict.pad(), pad_to_length=longest)
        return prefix.to(sample["net_input"]["src_tokens"].device)

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        if self.cfg.decode_mode == "forced-prefix":
            prefix_tokens = self.forced_prefix(sample)
        if self.cfg.recurrent_memory:
            hypotheses = memory_decoding.inference_step(self.eval_memories, generator, models, sample,
                                                        prefix_tokens, constraints)
        else:
            with torch.no_grad():
                hypotheses = generator.generate(models, sample, prefix_tokens=prefix_tokens, constraints=constraints)
        for row, beam in enumerate(hypotheses):
            for hypothesis in beam:
                keep_last_sentence(hypothesis, self.target_separator)
            if self.cfg.decode_mode == "forced-prefix" and beam:
                current = sample["window"]["current_sentence"][row].item()
                self.translations[current] = beam[0]["tokens"][:-1].cpu()
        if "target" in sample:
            # fairseq-generate prints the reference from sample["target"]: the current sentence
            sample["target"] = sample["target"].masked_fill(
                ~current_sentence_mask(sample["target"], self.target_separator), self.tgt_dict.pad())
        return hypotheses


class MemoryTrainingIterator(iterators.EpochBatchIterator):
    """fairseq's epoch iterator over recurrent-memory training batches, whose checkpointed position
    also holds the memories that the documents being read carry from batch to batch: a run resumed
    in the middle of a document group reads on with the memories an uninterrupted run has (not the
    initial memory). fairseq saves the iterator state of the first worker and hands it to every
    worker on resume; the first worker has every worker's memories from the validation that
    precedes each checkpoint (:meth:`DocTranslationTask.begin_valid_epoch`)."""

    def __init__(self, task: DocTranslationTask, **kwargs):
        super().__init__(**kwargs)
        self.task = task

    def state_dict(self):
        state = super().state_dict()
        if state["iterations_in_epoch"] > 0:  # at the end of an epoch every document has ended
            state["document_memories"] = self.task.train_memories_to_save()
        return state

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict)
        self.task.restore_train_memories(state_dict.get("document_memories") or {})


def _early_stopping_check():
    """fairseq-train's ``should_stop_early`` (fairseq_cli/train.py), where fairseq-train runs."""
    import sys

    train = sys.modules.get("fairseq_cli.train")
    return getattr(train, "should_stop_early", None)


def should_stop_early(cfg, valid_loss) -> bool:
    """fairseq-train's early stopping (``fairseq_cli.train.should_stop_early``, whose place it
    takes) with a minimum gain: a validation resets the patience only when it beats the reference,
    the last validation that reset it, by more than ``--patience-min-gain`` (0, the default, and any
    task without the option: fairseq's rule, any gain). Its state is fairseq's: the attributes
    ``best`` (the reference) and ``num_runs`` of this function (:func:`early_stopping_state`)."""
    if valid_loss is None or cfg.checkpoint.patience <= 0:
        return False
    min_gain = getattr(getattr(cfg, "task", None), "patience_min_gain", 0.0) or 0.0
    reference = getattr(should_stop_early, "best", None)
    if reference is not None:
        gain = valid_loss - reference if cfg.checkpoint.maximize_best_checkpoint_metric else reference - valid_loss
    if reference is None or gain > min_gain:
        should_stop_early.best, should_stop_early.num_runs = valid_loss, 0
        return False
    should_stop_early.num_runs += 1
    if should_stop_early.num_runs >= cfg.checkpoint.patience:
        by = f" by more than {min_gain:g}" if min_gain else ""  # without a minimum, fairseq's own words
        logger.info(f"early stop since valid performance hasn't improved{by} for last {cfg.checkpoint.patience} runs")
        return True
    return False


def install_early_stopping_check() -> None:
    """Put :func:`should_stop_early` in fairseq-train's place (where fairseq-train runs), carrying
    over the state fairseq's kept so far."""
    import sys

    train = sys.modules.get("fairseq_cli.train")
    current = getattr(train, "should_stop_early", None)
    if current is None or current is should_stop_early:
        return
    for name in ("best", "num_runs"):
        if hasattr(current, name):
            setattr(should_stop_early, name, getattr(current, name))
    train.should_stop_early = should_stop_early


def early_stopping_state() -> dict:
    """``{"best", "num_runs"}`` of fairseq-train's early stopping: the best validation metric so far
    and the validations since it improved. fairseq keeps both as attributes of its
    ``should_stop_early`` function and saves neither, so a resumed run would count its patience
    from the first validation after the resume, against that validation's score, and train on
    where an uninterrupted run stops."""
    check = _early_stopping_check()
    return {"best": getattr(check, "best", None), "num_runs": getattr(check, "num_runs", 0)}


def restore_early_stopping(state) -> None:
    """Put back what :func:`early_stopping_state` saved (nothing to do before the first validation)."""
    check = _early_stopping_check()
    if check is None or not state or state.get("best") is None:
        return
    check.best, check.num_runs = state["best"], state["num_runs"]


def memory_rows_on_cpu(memories: DocumentMemories) -> dict:
    return {document: (position, {side: [m.detach().cpu().clone() for m in layers]
                                  for side, layers in memory.items()})
            for document, (position, memory) in memories.rows.items()}


def keep_last_sentence(hypothesis: dict, separator: int) -> None:
    """Cut a window hypothesis down to its last sentence, in place (tokens end with EOS)."""
    kept = last_sentence(hypothesis["tokens"], separator)
    hypothesis["tokens"] = hypothesis["tokens"][kept]
    if hypothesis.get("positional_scores") is not None:
        hypothesis["positional_scores"] = hypothesis["positional_scores"][kept]
    if hypothesis.get("attention") is not None and hypothesis["attention"].numel():
        hypothesis["attention"] = hypothesis["attention"][:, kept]  # [source, target]
