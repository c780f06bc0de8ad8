"""Sliding windows of L sentences over documents (Wu et al. 2022, §4 "Data Processing").

Every sentence of a document is the *current* sentence of one window that also holds the
``context_size`` = L-1 sentences before it (fewer at the start of a document). The
sentences of a window are joined by a separator token; the window ends with EOS::

    context_1 <sep> context_2 <sep> current </s>

In fixed-window mode (corpora whose documents already are L-sentence windows, such as
Voita et al.'s OpenSubtitles), each document gives one window: its last ``context_size + 1``
sentences, the current sentence being its last one.
"""

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch
from fairseq.data import FairseqDataset, data_utils
from fairseq.tasks.translation import TranslationConfig

from .io import DataError, Document, document_offsets


@dataclass(frozen=True)
class WindowIndex:
    """Which sentences make each window. All arrays have one entry per window."""

    first_sentence: np.ndarray  # index of the window's first sentence in the split
    current_sentence: np.ndarray  # index of its last (current) sentence
    document: np.ndarray  # document index
    position: np.ndarray  # position of the current sentence in its document (0-based)

    def __len__(self) -> int:
        return len(self.current_sentence)


def build_window_index(documents: Sequence[Document], context_size: int, fixed_window: bool = False) -> WindowIndex:
    """Stride-one windows (or one window per document when ``fixed_window``)."""
    if context_size < 0:
        raise ValueError(f"context_size must be >= 0, got {context_size}")
    offsets = document_offsets(documents)
    counts = np.array([d.num_sentences for d in documents], dtype=np.int64)
    starts = np.array(offsets[:-1], dtype=np.int64)
    if fixed_window:
        current = starts + counts - 1
        document = np.arange(len(documents), dtype=np.int64)
        position = counts - 1
    else:
        document = np.repeat(np.arange(len(documents), dtype=np.int64), counts)
        current = np.arange(offsets[-1], dtype=np.int64)
        position = current - starts[document]
    first = np.maximum(current - context_size, starts[document])
    return WindowIndex(first, current, document, position)


def join_window(sentences: Sequence[torch.Tensor], separator: int, eos: int) -> torch.Tensor:
    """Concatenate EOS-terminated sentences, replacing every EOS but the last by ``separator``."""
    parts = []
    for k, sentence in enumerate(sentences):
        if len(sentence) == 0 or sentence[-1].item() != eos:
            raise ValueError("every sentence must end with EOS")
        if k < len(sentences) - 1:
            sentence = sentence.clone()
            sentence[-1] = separator
        parts.append(sentence)
    return torch.cat(parts)


def current_sentence_mask(tokens: torch.Tensor, separator: int) -> torch.Tensor:
    """True for tokens after the last separator of each row (the current sentence).

    ``tokens``: [batch, time] (or [time]); padding after the sentence is marked True too,
    so combine with a padding mask where it matters.
    """
    is_separator = tokens.eq(separator).long()
    # separators at or after each position; zero means "no separator from here on".
    separators_from_here = is_separator.flip(-1).cumsum(-1).flip(-1)
    return separators_from_here.eq(0)


def last_sentence(tokens: torch.Tensor, separator: int) -> slice:
    """Slice of a 1-D token sequence holding its last sentence (after the last separator)."""
    positions = (tokens == separator).nonzero()
    start = positions[-1].item() + 1 if len(positions) else 0
    return slice(start, len(tokens))


class DocumentWindowDataset(FairseqDataset):
    """Windows over binarized sentence datasets, with document-aware batching.

    Args:
        source, target: fairseq indexed datasets, one EOS-terminated sentence per item
        documents: the split's documents (``.docs`` file), covering every sentence
        context_size: L - 1
        source_separator, target_separator: index of the separator token in each dictionary
        supervise_window: loss on the whole target window (True) or only on the current
            sentence (False: context positions are padding in ``target``)
        document_ordered: batches hold the k-th sentence of a group of documents, in
            order of k (needed when decoding reads translations of earlier windows); batches
            then also say which document and position each row is (``window["document"]``,
            ``window["position"]``)
        sentence_steps: a batch may hold several sentence positions of a document group (an
            optimisation window of the recurrent-memory model, :func:`memory_training_batches`);
            the collater returns them as ``{"steps": [one batch per position, in order],
            "context_steps": 0 or 1, ...}``. Needs ``document_ordered``.
        split: the split's name, carried by every batch (``batch["split"]``): validation BLEU
            reads the split's references by it (tasks/validation.py)
    """

    def __init__(self, source, target, documents: Sequence[Document], context_size: int,
                 source_separator: int, target_separator: int, pad: int, eos: int, fixed_window: bool = False,
                 supervise_window: bool = True, shuffle: bool = True,
                 document_ordered: bool = False, sentence_steps: bool = False, split: Optional[str] = None):
        self.source = source
        self.target = target
        self.documents = list(documents)
        self.context_size = context_size
        self.source_separator = source_separator
        self.target_separator = target_separator
        self.pad = pad
        self.eos = eos
        self.fixed_window = fixed_window
        self.supervise_window = supervise_window
        self.shuffle = shuffle
        self.document_ordered = document_ordered
        if sentence_steps and not document_ordered:
            raise ValueError("sentence_steps needs document_ordered batches")
        self.sentence_steps = sentence_steps
        self.split = split
        self.index = build_window_index(self.documents, context_size, fixed_window)
        self.source_sizes = self._window_sizes(np.asarray(source.sizes))
        self.target_sizes = self._window_sizes(np.asarray(target.sizes)) if target is not None else None
        self.sizes = (np.vstack((self.source_sizes, self.target_sizes)).T
                      if target is not None else self.source_sizes)

    def _window_sizes(self, sentence_sizes: np.ndarray) -> np.ndarray:
        cumulative = np.concatenate([[0], np.cumsum(sentence_sizes, dtype=np.int64)])
        return cumulative[self.index.current_sentence + 1] - cumulative[self.index.first_sentence]

    def check_positions(self, max_source_positions: int, max_target_positions: int, path: str) -> None:
        """Stop, naming the document and sentence, when a window exceeds a position limit (the
        task's ``--max-source-positions`` / ``--max-target-positions``)."""
        for side, sizes, limit in (("source", self.source_sizes, max_source_positions),
                                   ("target", self.target_sizes, max_target_positions)):
            if sizes is None or limit is None:
                continue
            too_long = np.nonzero(sizes > limit)[0]
            if len(too_long):
                i = too_long[0]
                document = self.documents[self.index.document[i]]
                option = f"--max-{side}-positions"
                # the task's value: given (command line or config) or fairseq's default
                origin = (f"{option}'s default" if limit == TranslationConfig.__dataclass_fields__[
                    f"max_{side}_positions"].default else f"{option} {limit}")
                raise DataError(
                    f"{path}: the {side} window of document {document.name!r} (document "
                    f"{self.index.document[i] + 1}), sentence {self.index.position[i] + 1} has "
                    f"{sizes[i]} tokens, over the limit of {limit} {side} positions set by {origin} "
                    f"({len(too_long)} windows in all); use a smaller --context-size or raise {option}")

    def limit_context(self, first_allowed: np.ndarray) -> None:
        """Start window i at sentence ``first_allowed[i]`` when its context reaches further back
        (at its current sentence at the latest): fewer context sentences, never more."""
        first = np.maximum(self.index.first_sentence, np.asarray(first_allowed, dtype=np.int64))
        self._start_windows_at(np.minimum(first, self.index.current_sentence))

    def fit_source_positions(self, max_source_positions: int) -> List[Tuple[int, int]]:
        """Drop context sentences, the farthest first, from every window whose source exceeds
        ``max_source_positions`` tokens, until it fits (a sentence too long on its own stays:
        :meth:`check_positions` reports it). Returns (window, context sentences dropped) of each
        window changed."""
        first = self.index.first_sentence.copy()
        sizes = np.asarray(self.source.sizes, dtype=np.int64)
        changed = []
        for i in np.nonzero(self.source_sizes > max_source_positions)[0]:
            current, total = self.index.current_sentence[i], self.source_sizes[i]
            start = first[i]
            while start < current and total > max_source_positions:
                total -= sizes[start]
                start += 1
            changed.append((int(i), int(start - first[i])))
            first[i] = start
        if changed:
            self._start_windows_at(first)
        return changed

    def _start_windows_at(self, first: np.ndarray) -> None:
        """The windows' first sentences set to ``first``, and their sizes with them."""
        self.index = WindowIndex(first, self.index.current_sentence, self.index.document, self.index.position)
        self.source_sizes = self._window_sizes(np.asarray(self.source.sizes))
        self.target_sizes = self._window_sizes(np.asarray(self.target.sizes)) if self.target is not None else None
        self.sizes = (np.vstack((self.source_sizes, self.target_sizes)).T
                      if self.target is not None else self.source_sizes)

    def window_tokens(self, sentences, separator: int, i: int) -> torch.Tensor:
        first, current = self.index.first_sentence[i], self.index.current_sentence[i]
        return join_window([sentences[k] for k in range(first, current + 1)], separator, self.eos)

    def __getitem__(self, i):
        item = {"id": i, "source": self.window_tokens(self.source, self.source_separator, i)}
        if self.target is not None:
            item["target"] = self.window_tokens(self.target, self.target_separator, i)
        return item

    def __len__(self):
        return len(self.index)

    def num_tokens(self, i):
        if self.target_sizes is None:
            return self.source_sizes[i]
        return max(self.source_sizes[i], self.target_sizes[i])

    def num_tokens_vec(self, indices):
        sizes = self.source_sizes[indices]
        if self.target_sizes is not None:
            sizes = np.maximum(sizes, self.target_sizes[indices])
        return sizes

    def size(self, i):
        if self.target_sizes is None:
            return (self.source_sizes[i], 0)
        return (self.source_sizes[i], self.target_sizes[i])

    def ordered_indices(self):
        if self.document_ordered:
            # (document, position) order; batch_by_size regroups it by position.
            return np.lexsort((self.index.position, self.index.document))
        if not self.shuffle:
            # by source length alone, ties in window order: a split decoded with its references
            # is batched exactly as the same documents translated without them
            # (generation/translate.py), and batches decide each row's length bound
            return np.argsort(self.source_sizes, kind="mergesort")
        order = np.random.permutation(len(self))
        if self.target_sizes is not None:
            order = order[np.argsort(self.target_sizes[order], kind="mergesort")]
        return order[np.argsort(self.source_sizes[order], kind="mergesort")]

    def batch_by_size(self, indices, max_tokens=None, max_sentences=None, required_batch_size_multiple=1):
        if not self.document_ordered:
            return super().batch_by_size(indices, max_tokens, max_sentences, required_batch_size_multiple)
        return document_ordered_batches(self.index, indices, self.num_tokens_vec(np.arange(len(self))),
                                        max_tokens, max_sentences)

    def collater(self, samples):
        if self.sentence_steps and samples:
            return self.collate_sentence_steps(samples)
        return self.collate_windows(samples)

    def collate_sentence_steps(self, samples):
        """One batch per sentence position, in order. When the first position is not a
        document's first sentence, a *context step* comes first: the sentences just before it,
        of the same documents (no loss: the memory model recomputes them for the memory they
        write, generation/memory_decoding.py)."""
        ids = np.array([s["id"] for s in samples])
        positions = self.index.position[ids]
        steps = [self.collate_windows([s for s, p in zip(samples, positions) if p == position])
                 for position in np.unique(positions)]
        context_steps = 0
        if positions.min() > 0:
            previous = ids[positions == positions.min()] - 1
            # windows are numbered document by document: window i - 1 holds the sentence before
            assert np.all(self.index.document[previous] == self.index.document[previous + 1])
            steps.insert(0, self.collate_windows([self[i] for i in previous.tolist()]))
            context_steps = 1
        supervised = steps[context_steps:]
        return {
            "id": torch.cat([step["id"] for step in supervised]),
            "steps": steps,
            "context_steps": context_steps,
            "nsentences": sum(step["nsentences"] for step in supervised),
            "ntokens": sum(step["ntokens"] for step in supervised),
        }

    def collate_windows(self, samples):
        if not samples:
            return {}
        ids = torch.LongTensor([s["id"] for s in samples])
        source = data_utils.collate_tokens([s["source"] for s in samples], self.pad, self.eos)
        batch = {
            "id": ids,
            "nsentences": len(samples),
            # which sentences of the split each window holds (decoding needs them)
            "window": {
                "first_sentence": torch.from_numpy(self.index.first_sentence[ids.numpy()]),
                "current_sentence": torch.from_numpy(self.index.current_sentence[ids.numpy()]),
            },
            "net_input": {
                "src_tokens": source,
                "src_lengths": torch.LongTensor([len(s["source"]) for s in samples]),
            },
        }
        if self.split is not None:
            batch["split"] = self.split
        if self.document_ordered:
            batch["window"]["document"] = torch.from_numpy(self.index.document[ids.numpy()])
            batch["window"]["position"] = torch.from_numpy(self.index.position[ids.numpy()])
        if self.target is not None:
            targets = [s["target"] for s in samples]
            target = data_utils.collate_tokens(targets, self.pad, self.eos)
            batch["net_input"]["prev_output_tokens"] = data_utils.collate_tokens(
                targets, self.pad, self.eos, move_eos_to_beginning=True)
            if not self.supervise_window:
                target = target.masked_fill(~current_sentence_mask(target, self.target_separator), self.pad)
            batch["target"] = target
            batch["ntokens"] = int(target.ne(self.pad).sum())
        else:
            batch["ntokens"] = int(source.ne(self.pad).sum())
        return batch

    @property
    def supports_prefetch(self):
        return False

    @property
    def can_reuse_epoch_itr_across_epochs(self):
        # fairseq then builds each epoch's batches anew, from seed + epoch; reusing them would keep
        # the batches of the epoch a run (re)started in, so a run resumed in a later epoch would
        # train on other batches than an uninterrupted one
        return False

    def filter_indices_by_size(self, indices, max_sizes):
        return data_utils.filter_paired_dataset_indices_by_size(
            self.source_sizes, self.target_sizes, indices, max_sizes)


def collate_sentences(sources: Sequence[torch.Tensor], targets: Sequence[torch.Tensor], pad: int, eos: int,
                      device=None) -> dict:
    """EOS-terminated sentences, one per row -> a batch as the task collates it: ``net_input``
    (src_tokens, src_lengths, prev_output_tokens: EOS + target, right-padded) and ``target``
    (the recurrent-memory model's sentence steps, models/memory_transformer.py)."""
    batch = {
        "net_input": {
            "src_tokens": data_utils.collate_tokens(list(sources), pad, eos),
            "src_lengths": torch.tensor([len(s) for s in sources]),
            "prev_output_tokens": data_utils.collate_tokens(list(targets), pad, eos, move_eos_to_beginning=True),
        },
        "target": data_utils.collate_tokens(list(targets), pad, eos),
    }
    if device is not None:
        batch["net_input"] = {name: value.to(device) for name, value in batch["net_input"].items()}
        batch["target"] = batch["target"].to(device)
    return batch


def document_groups(index: WindowIndex, indices: np.ndarray, num_tokens: np.ndarray,
                    max_tokens: Optional[int], max_sentences: Optional[int]) -> List[List[int]]:
    """Documents (of ``indices``' windows) split into consecutive groups, as many documents
    per group as fit ``max_sentences`` / ``max_tokens`` at their longest window."""
    documents = np.unique(index.document[indices])
    limit_sentences = max_sentences or len(documents)
    groups, group, group_tokens = [], [], 0
    longest = np.zeros(index.document.max() + 1 if len(index) else 0, dtype=np.int64)
    np.maximum.at(longest, index.document, num_tokens)
    for document in documents:
        if group and (len(group) >= limit_sentences
                      or (max_tokens and (len(group) + 1) * max(group_tokens, longest[document]) > max_tokens)):
            groups.append(group)
            group, group_tokens = [], 0
        group.append(document)
        group_tokens = max(group_tokens, longest[document])
    if group:
        groups.append(group)
    return groups


def group_members(index: WindowIndex, indices: np.ndarray, groups: Sequence[Sequence[int]]) -> List[np.ndarray]:
    """For each group of :func:`document_groups`, the windows of ``indices`` that belong to its
    documents, in index order (groups are runs of consecutive documents, and windows are
    numbered document by document, so each group's windows are one slice of the sorted indices)."""
    kept = np.sort(np.asarray(indices, dtype=np.int64))
    documents = index.document[kept]
    if len(documents) > 1 and np.any(np.diff(documents) < 0):
        raise ValueError("windows must be numbered document by document")
    return [kept[np.searchsorted(documents, group[0], "left"):np.searchsorted(documents, group[-1], "right")]
            for group in groups]


def document_ordered_batches(index: WindowIndex, indices: np.ndarray, num_tokens: np.ndarray,
                             max_tokens: Optional[int], max_sentences: Optional[int]) -> List[np.ndarray]:
    """Batches in which sentence k of a document comes after its sentence k-1's batch.

    Documents are split into groups (as many as fit ``max_sentences`` / ``max_tokens`` at
    their longest window); a group yields one batch per sentence position, in order.
    """
    return [batch for group in document_ordered_group_batches(index, indices, num_tokens, max_tokens, max_sentences)
            for batch in group]


def document_ordered_group_batches(index: WindowIndex, indices: np.ndarray, num_tokens: np.ndarray,
                                   max_tokens: Optional[int], max_sentences: Optional[int]) -> List[List[np.ndarray]]:
    """:func:`document_ordered_batches`, kept apart per document group."""
    groups = document_groups(index, indices, num_tokens, max_tokens, max_sentences)
    group_batches = []
    for members in group_members(index, indices, groups):
        positions = index.position[members]
        group_batches.append([members[positions == position] for position in np.unique(positions)])
    return group_batches


def parse_optimization_window(value: str) -> Tuple[int, Optional[int]]:
    """``"N"``, ``"A-B"`` or ``"full"`` -> (fewest, most) sentence positions per update;
    None for most means a whole document group."""
    text = str(value).strip()
    if text == "full":
        return 1, None
    try:
        low, _, high = text.partition("-")
        low, high = int(low), int(high or low)
    except ValueError:
        raise ValueError(f"--optimization-window {value!r}: expected N, A-B or full") from None
    if not 1 <= low <= high:
        raise ValueError(f"--optimization-window {value!r}: need 1 <= A <= B")
    return low, high


def memory_training_batches(index: WindowIndex, groups: Sequence[np.ndarray],
                            window: Tuple[int, Optional[int]], rng: np.random.RandomState) -> List[np.ndarray]:
    """Training batches of the recurrent-memory model (Feng et al. 2022, §4.2 and §5.3).

    ``groups``: the windows of each document group (:func:`group_members`). The groups come in
    a random order (``rng``); each group's sentence positions are cut, in order, into
    consecutive *optimisation windows* of a random number of positions drawn uniformly from
    ``window`` (the whole group for ``"full"``). One batch per window, one update per batch:
    the gradients of its sentences are accumulated before the update (§5.3).

    Each sentence's loss reaches the sentence before it through the memory, so training
    recomputes that previous sentence; for the first position of a window the collater
    (``sentence_steps``) adds it as a *context step*.
    """
    return [batch for group in memory_training_group_batches(index, groups, window, rng) for batch in group]


def memory_training_group_batches(index: WindowIndex, groups: Sequence[np.ndarray],
                                  window: Tuple[int, Optional[int]],
                                  rng: np.random.RandomState) -> List[List[np.ndarray]]:
    """:func:`memory_training_batches`, kept apart per document group (in the drawn order)."""
    low, high = window
    group_batches = []
    for group_number in rng.permutation(len(groups)):
        members = groups[group_number]
        positions = index.position[members]
        ends = np.unique(positions)
        batches, start = [], 0
        while start < len(ends):
            size = len(ends) if high is None else int(rng.randint(low, high + 1))
            stop = min(start + size, len(ends))
            batches.append(members[(positions >= ends[start]) & (positions <= ends[stop - 1])])
            start = stop
        group_batches.append(batches)
    return group_batches


def interleave_group_shards(group_batches: Sequence[Sequence[np.ndarray]], num_shards: int) -> List[np.ndarray]:
    """One batch list for ``num_shards`` workers that gives each worker whole document groups.

    fairseq shards a batch list round robin (batch i goes to worker i mod ``num_shards``,
    ``iterators.ShardedIterator``). Here each group, in order, goes to the worker with the fewest
    batches so far (the lowest-numbered one on a tie), so a document's sentences stay on one
    worker and in order; the workers' lists are padded with empty batches to the same length
    (every worker runs the same number of steps, as DDP's collective all-reduces need; fairseq's
    trainer runs an empty batch as a dummy batch with zero gradient) and interleaved so that the
    round robin deals each worker its own list.
    """
    shards: List[List[np.ndarray]] = [[] for _ in range(num_shards)]
    for batches in group_batches:
        min(shards, key=len).extend(batches)  # min returns the first of equals
    length = max(len(shard) for shard in shards)
    empty = np.zeros(0, dtype=np.int64)
    for shard in shards:
        shard.extend([empty] * (length - len(shard)))
    return [shard[step] for step in range(length) for shard in shards]
