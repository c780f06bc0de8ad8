"""The ``doc_translation`` task: sentence-level binarized data, document windows at load time.

Data directory layout (written by ``python -m rfa_doc_mt.data.prepare``)::

    dict.{src}.txt dict.{tgt}.txt           fairseq dictionaries (joined)
    {split}.{src}-{tgt}.{lang}.bin/.idx     one sentence per item
    {split}.docs                            document boundaries (see data/io.py)

Decoding (``fairseq-generate``) translates every window and keeps only the translation of
its last sentence (paper 000, Figure 1). ``--decode-mode forced-prefix`` instead forces the
model's own translations of the context sentences as the decoder prefix (the behaviour of
the authors' release); windows are then decoded in document order.
"""

import logging
import os
from dataclasses import dataclass, field

import torch
from fairseq import utils
from fairseq.data import data_utils
from fairseq.dataclass import ChoiceEnum
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from ..data.io import DataError, read_docs
from ..data.windows import DocumentWindowDataset, current_sentence_mask, last_sentence

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
        metadata={"help": "free: translate the whole window, keep its last sentence (paper 000); "
                          "forced-prefix: force earlier translations as the decoder prefix"})
    left_pad_source: bool = field(default=False, metadata={"help": "pad the source on the left"})


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
        dataset = DocumentWindowDataset(
            source, target, documents, self.cfg.context_size,
            source_separator=self.source_separator, target_separator=self.target_separator,
            pad=self.src_dict.pad(), eos=self.src_dict.eos(),
            fixed_window=self.cfg.fixed_window,
            supervise_window=self.cfg.supervision == "window",
            shuffle=split == self.cfg.train_subset,
            document_ordered=self.cfg.decode_mode == "forced-prefix" and split != self.cfg.train_subset,
        )
        dataset.check_positions(self.cfg.max_source_positions, self.cfg.max_target_positions, docs_path)
        logger.info(f"{split}: {len(documents)} documents, {len(source)} sentences, {len(dataset)} windows "
                    f"of up to {self.cfg.context_size + 1} sentences")
        self.datasets[split] = dataset

    def build_dataset_for_inference(self, src_tokens, src_lengths, constraints=None):
        raise NotImplementedError("doc_translation decodes binarized documents: use fairseq-generate")

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
        if max(len(p) for p in prefixes) == 0:
            return None
        prefix = data_utils.collate_tokens(prefixes, self.tgt_dict.pad(), pad_to_length=max(1, max(len(p) for p in prefixes)))
        return prefix.to(sample["net_input"]["src_tokens"].device)

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        if self.cfg.decode_mode == "forced-prefix":
            prefix_tokens = self.forced_prefix(sample)
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


def keep_last_sentence(hypothesis: dict, separator: int) -> None:
    """Cut a window hypothesis down to its last sentence, in place (tokens end with EOS)."""
    kept = last_sentence(hypothesis["tokens"], separator)
    hypothesis["tokens"] = hypothesis["tokens"][kept]
    if hypothesis.get("positional_scores") is not None:
        hypothesis["positional_scores"] = hypothesis["positional_scores"][kept]
    if hypothesis.get("attention") is not None and hypothesis["attention"].numel():
        hypothesis["attention"] = hypothesis["attention"][:, kept]  # [source, target]
