"""Contrastive sets (Voita et al.'s JSON format, as ``prepare consistency`` writes them) as a
fairseq validation subset, so that ``fairseq-train`` can select checkpoints on consistency
accuracy (``--valid-subset valid_consistency --best-checkpoint-metric consistency``).

One item per example; the collater gives one row per *distinct* candidate (identical candidates
are one candidate, as in scoring/consistency.py), each row the example's source window and the
candidate's target window (the last ``context_size + 1`` sentences of each side, as the scorer
encodes them), and keeps in ``sample["contrastive"]`` which rows belong to which example, so
that an example's candidates are always scored in one batch. Examples left with a single distinct
candidate are skipped, as the scorer skips them.
"""

import os
from typing import List, Sequence, Tuple

import numpy as np
import torch
from fairseq.data import FairseqDataset, data_utils

from .io import DataError
from .voita import distinct_candidates, read_contrastive, split_sentences
from .windows import join_window


def encode_sentences(text: str, dictionary, where: str) -> List[torch.Tensor]:
    """``a _eos b`` -> [EOS-terminated token tensor of each sentence] (words the dictionary lacks
    become <unk>, as in ``CandidateScorer.encode_window``)."""
    return [dictionary.encode_line(sentence, add_if_not_exist=False, append_eos=True).long()
            for sentence in split_sentences(text, where)]


class ContrastiveDataset(FairseqDataset):
    """Contrastive examples of several sets, for validation.

    Args:
        sets: (set name, examples) of each set; the name is what ``consistency_<name>`` reports
        src_dict, tgt_dict: the task's dictionaries
        source_separator, target_separator: the separator token of each dictionary
        sentences_per_window: the model's L (``--context-size`` + 1): how many of an example's
            last sentences each row holds
        sentence_lists: also collate every sentence of each row (the recurrent-memory model reads
            the context sentence by sentence: ``score_candidates``)
        path: where the sets came from, for messages
    """

    def __init__(self, sets: Sequence[Tuple[str, List[dict]]], src_dict, tgt_dict, source_separator: int,
                 target_separator: int, sentences_per_window: int, sentence_lists: bool = False, path: str = ""):
        self.set_names = [name for name, _ in sets]
        self.pad, self.eos = tgt_dict.pad(), tgt_dict.eos()
        self.sentence_lists = sentence_lists
        self.sources, self.candidates, self.source_sentences, self.candidate_sentences = [], [], [], []
        true_index, set_index, ctx_dist = [], [], []
        self.skipped = {}
        for number, (name, examples) in enumerate(sets):
            self.skipped[name] = 0
            for k, example in enumerate(examples):
                texts, true = distinct_candidates(example)
                if len(texts) < 2:
                    self.skipped[name] += 1
                    continue
                where = f"{path}: set {name}, example {k} (0-based)"
                source = encode_sentences(example["src"], src_dict, where)
                candidates = [encode_sentences(text, tgt_dict, where) for text in texts]
                self.sources.append(join_window(source[-sentences_per_window:], source_separator, self.eos))
                self.candidates.append([join_window(c[-sentences_per_window:], target_separator, self.eos)
                                        for c in candidates])
                if sentence_lists:
                    self.source_sentences.append(source)
                    self.candidate_sentences.append(candidates)
                true_index.append(true)
                set_index.append(number)
                ctx_dist.append(int(example["ctx_dist"]))
            if len(true_index) == 0 or set_index[-1] != number:
                raise DataError(f"{path}: set {name}: none of its {len(examples)} examples has two distinct "
                                "candidates")
        self.true_index = np.array(true_index, dtype=np.int64)
        self.set_index = np.array(set_index, dtype=np.int64)
        self.ctx_dist = np.array(ctx_dist, dtype=np.int64)
        self.num_candidates = np.array([len(c) for c in self.candidates], dtype=np.int64)
        self.src_sizes = np.array([len(s) for s in self.sources], dtype=np.int64)
        self.tgt_sizes = np.array([max(len(c) for c in candidates) for candidates in self.candidates], dtype=np.int64)
        self.sizes = np.vstack((self.src_sizes, self.tgt_sizes)).T

    @classmethod
    def from_files(cls, files: Sequence[str], name_of, **kwargs) -> "ContrastiveDataset":
        """The sets of ``files`` (contrastive JSON), each named ``name_of(path)``."""
        sets = [(name_of(path), read_contrastive(path)) for path in files]
        names = [name for name, _ in sets]
        if len(set(names)) < len(names):
            raise DataError(f"{', '.join(files)}: two sets have the same name; their accuracies would mix")
        return cls(sets, path=os.path.commonpath(files) if files else "", **kwargs)

    def __getitem__(self, index):
        return {"id": index, "source": self.sources[index], "candidates": self.candidates[index]}

    def __len__(self):
        return len(self.sources)

    def num_tokens(self, index):
        # every candidate is a row: the example costs that many windows
        return max(self.src_sizes[index], self.tgt_sizes[index]) * self.num_candidates[index]

    def num_tokens_vec(self, indices):
        return np.maximum(self.src_sizes[indices], self.tgt_sizes[indices]) * self.num_candidates[indices]

    def size(self, index):
        return self.src_sizes[index], self.tgt_sizes[index]

    def ordered_indices(self):
        return np.arange(len(self), dtype=np.int64)

    def filter_indices_by_size(self, indices, max_sizes):
        return data_utils.filter_paired_dataset_indices_by_size(self.src_sizes, self.tgt_sizes, indices, max_sizes)

    @property
    def supports_prefetch(self):
        return False

    def collater(self, samples):
        """One row per candidate; ``sample["contrastive"]``: ``example`` [rows] (which example of
        the batch each row is), ``true_row`` / ``set`` / ``ctx_dist`` [examples], and with
        ``sentence_lists`` the sentences of each row (``source_sentences``, ``target_sentences``)."""
        if not samples:
            return {}
        ids = [s["id"] for s in samples]
        sources, targets, example_of_row, true_row = [], [], [], []
        for number, sample in enumerate(samples):
            true_row.append(len(targets) + int(self.true_index[sample["id"]]))
            for candidate in sample["candidates"]:
                sources.append(sample["source"])
                targets.append(candidate)
                example_of_row.append(number)
        target = data_utils.collate_tokens(targets, self.pad, self.eos)
        contrastive = {
            "example": torch.LongTensor(example_of_row),
            "true_row": torch.LongTensor(true_row),
            "set": torch.from_numpy(self.set_index[ids]),
            "ctx_dist": torch.from_numpy(self.ctx_dist[ids]),
        }
        if self.sentence_lists:
            contrastive["source_sentences"] = [self.source_sentences[i] for i in ids
                                               for _ in range(self.num_candidates[i])]
            contrastive["target_sentences"] = [c for i in ids for c in self.candidate_sentences[i]]
        return {
            "id": torch.LongTensor(ids),
            "nsentences": len(targets),
            "ntokens": int(target.ne(self.pad).sum()),
            "net_input": {
                "src_tokens": data_utils.collate_tokens(sources, self.pad, self.eos),
                "src_lengths": torch.LongTensor([len(s) for s in sources]),
                "prev_output_tokens": data_utils.collate_tokens(targets, self.pad, self.eos,
                                                                move_eos_to_beginning=True),
            },
            "target": target,
            "contrastive": contrastive,
        }
