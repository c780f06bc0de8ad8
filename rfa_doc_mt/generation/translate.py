"""Translate raw documents with a trained checkpoint.

    python -m rfa_doc_mt.generation.translate --checkpoint CKPT --data DIR [--input FILE] [--output FILE]
        [--beam 4] [--batch-size 64] [--max-len-a 1.2] [--max-len-b 10] [--cpu]

``DIR`` is the prepared corpus the model was trained on: its ``prep.json`` says how text is
pre-processed (tokenizer, truecasing, sentencepiece) and how translations are post-processed,
and its dictionaries encode the pieces. The input is raw source text, one sentence per line,
in any form :mod:`rfa_doc_mt.data.plain_text` reads (``<d>`` lines, empty lines between
documents, a document-id file, or one document); the output holds one detokenized translation
per input sentence, in the input's form with the same boundaries (a file is written whole or
not at all).

The documents go through the same pieces as ``scripts/decode.sh`` + ``collect``: the task of
the checkpoint builds the windows (its context size, decoding mode, the memory model's document
order), fairseq's batch iterator batches them (the same batches as a prepared split of these
documents), the task's ``inference_step`` decodes them with fairseq's sequence generator and
the corpus's post-processor gives the text. So translating the raw test text of a prepared
corpus gives the hypotheses ``decode.sh`` gives for its test split.

No sentence is dropped: a window longer than the model's source positions loses context
sentences, the farthest first, until it fits; a sentence longer than the positions on its own is
cut into parts that fit, each translated without context, and the translations joined (such a
sentence is no context for the sentences after it either: a window's context is whole sentences).
Each case is warned about on standard error with its document and sentence.

From Python, :class:`Translator` (also ``from rfa_doc_mt import Translator``) loads a checkpoint
and its corpus once and translates documents given as lists of sentences::

    translator = Translator("checkpoint_best.pt", "data-bin/my-en-de")
    translator.translate([["First sentence.", "Second one."], ["Another document."]], progress=True)
    # -> [["...", "..."], ["..."]]: one translation per sentence
"""

import argparse
import contextlib
import logging
import os
import sys
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Callable, Iterator, List, Optional, Sequence, Union

import numpy as np
import torch

from ..data.io import DataError, Document
from ..data.plain_text import FORMATS, read_documents, write_documents
from ..data.text import TextDocument, load_prep

logger = logging.getLogger(__name__)

# scripts/decode.sh's defaults
DEFAULT_BEAM = 4
DEFAULT_BATCH_SIZE = 64
DEFAULT_MAX_LEN_A = 1.2
DEFAULT_MAX_LEN_B = 10
WORD_START = "\u2581"  # sentencepiece's mark of a piece that starts a word


# progress(batch, batches, windows translated, windows in all), after each batch
Progress = Callable[[int, int, int, int], None]


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def fairseq_warnings_only() -> Iterator[None]:
    """fairseq logs its set-up (dictionaries, batches) at INFO, and its import has set up the root
    logger at DEBUG: within the block its loggers show warnings only, and standard error is for the
    translation's progress and its warnings about the documents. The level is put back afterwards,
    for a caller in the same process (fairseq-train logs its validation at INFO)."""
    fairseq_logger = logging.getLogger("fairseq")
    level = fairseq_logger.level
    fairseq_logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        fairseq_logger.setLevel(level)


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def sentence_name(document: TextDocument, document_index: int, sentence_index: int) -> str:
    """``document 'talk' (document 2), sentence 3 (line 9)``: name and line where the input has them."""
    named = f"document {document.name!r} (document {document_index + 1})" if document.name else \
        f"document {document_index + 1}"
    line = f" (line {document.line_numbers[sentence_index]})" if sentence_index < len(document.line_numbers) else ""
    return f"{named}, sentence {sentence_index + 1}{line}"


@dataclass
class EncodedSentence:
    """One unit the model translates: a sentence, or a part of one too long for the model."""

    document: int  # index of its document
    sentence: int  # index of its sentence in the document
    tokens: torch.Tensor  # dictionary indices, ending with EOS
    parts: int = 1  # how many parts its sentence was cut into (1: not cut)


class TokenList:
    """Encoded sentences as the indexed dataset ``DocumentWindowDataset`` reads."""

    def __init__(self, tokens: Sequence[torch.Tensor]):
        self.tokens = list(tokens)
        self.sizes = np.array([len(t) for t in self.tokens], dtype=np.int64)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.tokens[index]

    def __len__(self) -> int:
        return len(self.tokens)


def split_pieces(pieces: List[str], limit: int) -> List[List[str]]:
    """``pieces`` cut into parts of at most ``limit`` pieces, each cut before a word start in
    the last half of the part where there is one."""
    parts = []
    while len(pieces) > limit:
        cut = next((index for index in range(limit, limit // 2, -1) if pieces[index].startswith(WORD_START)), limit)
        parts.append(pieces[:cut])
        pieces = pieces[cut:]
    return parts + [pieces]


def encode_documents(documents: Sequence[TextDocument], preprocess: Callable[[str], str], dictionary,
                     source_limit: int) -> List[EncodedSentence]:
    """Every sentence pre-processed as the corpus was (``preprocess``: raw sentence -> pieces) and
    encoded with its ``dictionary`` as fairseq-preprocess binarizes it; a sentence longer than
    ``source_limit`` positions (EOS included) is cut into parts that fit, with a warning."""
    limit = source_limit - 1  # and EOS
    units = []
    for document_index, document in enumerate(documents):
        for sentence_index, sentence in enumerate(document.sentences):
            pieces = preprocess(sentence).split()
            parts = split_pieces(pieces, limit) if len(pieces) > limit else [pieces]
            if len(parts) > 1:
                warn(f"{sentence_name(document, document_index, sentence_index)} is longer than the model's "
                     f"{source_limit} source positions ({len(pieces)} tokens): translated in {len(parts)} parts, "
                     f"each without context, joined")
            for part in parts:
                tokens = dictionary.encode_line(" ".join(part), add_if_not_exist=False, append_eos=True)
                units.append(EncodedSentence(document_index, sentence_index, tokens.long(), len(parts)))
    return units


def context_starts(units: Sequence[EncodedSentence]) -> np.ndarray:
    """The first unit each unit's window may hold: a window's context is whole sentences, so the
    part of a cut sentence is translated on its own, and no window reaches back to a cut sentence
    or past it. (Units of one document are consecutive; the windows never cross a document.)"""
    starts = np.zeros(len(units), dtype=np.int64)
    after_cut = 0
    for index, unit in enumerate(units):
        if unit.parts > 1:
            after_cut = index + 1
        starts[index] = index if unit.parts > 1 else after_cut
    return starts


def as_text_documents(documents: Sequence[Union[TextDocument, Sequence[str]]]) -> List[TextDocument]:
    """Documents as :class:`TextDocument` (read from a file) or as lists of sentences (strings)."""
    converted = []
    for index, document in enumerate(documents):
        if not isinstance(document, TextDocument):
            if isinstance(document, str):
                raise DataError(f"document {index + 1} is a string: give each document as a list of its sentences")
            document = TextDocument("", list(document))
        for sentence_index, sentence in enumerate(document.sentences):
            if not isinstance(sentence, str):
                raise DataError(f"document {index + 1}, sentence {sentence_index + 1} is not a string: "
                                f"{sentence!r} ({type(sentence).__name__})")
        if not document.sentences:
            raise DataError(f"document {index + 1} has no sentences")
        converted.append(document)
    return converted


class Translator:
    """A checkpoint with its task, generator and the corpus's pre- and post-processing: the API
    behind ``python -m rfa_doc_mt.generation.translate`` and ``scripts/translate.sh``.

    ``checkpoint``: a model trained with this plugin; ``data``: the prepared corpus it was trained
    on (its ``prep.json``, dictionaries, sentencepiece model); the other arguments as the command's
    options (beam 4, 64 windows a batch, at most 1.2 x source + 10 target tokens; ``cpu`` keeps a
    GPU machine on the CPU). :meth:`translate` translates documents."""

    def __init__(self, checkpoint: str, data: str, beam: int = DEFAULT_BEAM, batch_size: int = DEFAULT_BATCH_SIZE,
                 max_len_a: float = DEFAULT_MAX_LEN_A, max_len_b: int = DEFAULT_MAX_LEN_B,
                 max_tokens: Optional[int] = None, cpu: bool = False, lenpen: float = 1.0):
        if not os.path.isfile(checkpoint):
            raise DataError(f"{checkpoint}: checkpoint not found")
        prep = load_prep(data)
        from fairseq import checkpoint_utils
        from fairseq.dataclass.configs import GenerationConfig

        import rfa_doc_mt  # noqa: F401  (registers the task and models; compat loads checkpoints)

        from ..data.processing import corpus_postprocessor, corpus_preprocessor

        with fairseq_warnings_only():
            models, _, task = checkpoint_utils.load_model_ensemble_and_task([checkpoint],
                                                                            arg_overrides={"data": data})
        languages = (task.cfg.source_lang, task.cfg.target_lang)
        if languages != (prep["source_lang"], prep["target_lang"]):
            raise DataError(f"{checkpoint} translates {languages[0]} -> {languages[1]}, but {data} is a "
                            f"{prep['source_lang']}-{prep['target_lang']} corpus: give the corpus the model was "
                            f"trained on")
        # every sentence of a new document is translated, also by a model trained on corpora whose
        # documents already are windows (--fixed-window): sliding windows of its size
        task.cfg.fixed_window = False
        self.task, self.models, self.data = task, models, data
        self.use_cuda = torch.cuda.is_available() and not cpu
        self.generation = GenerationConfig(beam=beam, max_len_a=max_len_a, max_len_b=max_len_b, lenpen=lenpen)
        for model in models:
            model.prepare_for_inference_(SimpleNamespace(generation=self.generation))
            if self.use_cuda:
                model.cuda()
        self.generator = task.build_generator(models, self.generation,
                                              extra_gen_cls_kwargs={"lm_model": None, "lm_weight": 0.0})
        self.batch_size, self.max_tokens = batch_size, max_tokens
        self.preprocess = corpus_preprocessor(data, prep, task.cfg.source_lang)
        self.postprocess = corpus_postprocessor(data, task.cfg.target_lang)
        from fairseq import utils

        self.max_positions = utils.resolve_max_positions(task.max_positions(), *[m.max_positions() for m in models])

    @property
    def source_limit(self) -> int:
        limit = self.max_positions[0] if isinstance(self.max_positions, tuple) else self.max_positions
        return int(limit)

    def describe(self) -> str:
        cfg = self.task.cfg
        mode = "recurrent memory, one sentence at a time" if cfg.recurrent_memory else \
            f"windows of {cfg.context_size + 1} sentences, {cfg.decode_mode} decoding"
        return (f"{type(self.models[0]).__name__} ({mode}); beam {self.generation.beam}, at most "
                f"{self.generation.max_len_a} x source + {self.generation.max_len_b} tokens; "
                f"{'GPU' if self.use_cuda else 'CPU'}")

    # ---- pre-processing ---------------------------------------------------------------------

    def encode(self, documents: Sequence[TextDocument]) -> List[EncodedSentence]:
        return encode_documents(documents, self.preprocess, self.task.src_dict, self.source_limit)

    def dataset(self, units: Sequence[EncodedSentence], documents: Sequence[TextDocument]):
        """The windows of ``units`` (window i translates unit i), each with the context that fits:
        none for the parts of a cut sentence, none reaching back to one, then the farthest
        sentences dropped from windows over the source positions; each sentence translated with
        fewer context sentences than the model's is warned about, with the reason."""
        counts = np.bincount([unit.document for unit in units], minlength=len(documents))
        split_documents = [Document(document.name.replace("\t", " ") or f"doc{index + 1}", int(count))
                           for index, (document, count) in enumerate(zip(documents, counts))]
        dataset = self.task.window_dataset("translate", TokenList([unit.tokens for unit in units]), None,
                                           split_documents)
        planned = dataset.index.first_sentence.copy()
        starts = context_starts(units)
        dataset.limit_context(starts)
        over = {window for window, _ in dataset.fit_source_positions(self.source_limit)}
        first = dataset.index.first_sentence
        for window in np.nonzero(first > planned)[0]:
            unit = units[window]
            if unit.parts > 1:
                continue  # the warning about its parts says it
            lost = units[planned[window]:first[window]]
            reasons = []
            if starts[window] > planned[window]:  # the nearest sentence cut into parts before it
                reasons.append(f"sentence {units[starts[window] - 1].sentence + 1} was cut into parts, and "
                               f"parts of a sentence are no context")
            if window in over:
                reasons.append(f"its window is over the model's {self.source_limit} source positions")
            sentences = len({other.sentence for other in lost})
            warn(f"{sentence_name(documents[unit.document], unit.document, unit.sentence)}: translated with "
                 f"{plural(sentences, 'context sentence')} fewer ({'; '.join(reasons)})")
        return dataset

    # ---- decoding ---------------------------------------------------------------------------

    def batches(self, dataset):
        """fairseq-generate's batches of ``dataset`` (its defaults: seed 1, batch sizes a multiple of 8)."""
        return self.task.get_batch_iterator(
            dataset=dataset, max_tokens=self.max_tokens, max_sentences=self.batch_size,
            max_positions=self.max_positions, ignore_invalid_inputs=False, required_batch_size_multiple=8,
            seed=1, num_shards=1, shard_id=0, num_workers=0).next_epoch_itr(shuffle=False)

    def hypotheses(self, dataset, progress: Optional[Progress] = None) -> List[str]:
        """The tokens (pieces) of the best hypothesis of every window, by window index;
        ``progress`` is called after each batch."""
        from fairseq import utils
        from fairseq.sequence_generator import SequenceGenerator

        strip = (self.generator.symbols_to_strip_from_output if isinstance(self.generator, SequenceGenerator)
                 else {self.task.tgt_dict.eos()})
        if self.task.cfg.recurrent_memory:
            self.task.eval_memories.clear()
        self.task.translations.clear()
        iterator = self.batches(dataset)
        found: List[Optional[str]] = [None] * len(dataset)
        done = 0
        for batch_number, sample in enumerate(iterator, start=1):
            if self.use_cuda:
                sample = utils.move_to_cuda(sample)
            if "net_input" in sample:
                hypotheses = self.task.inference_step(self.generator, self.models, sample)
                for row, window in enumerate(sample["id"].tolist()):
                    tokens = hypotheses[row][0]["tokens"].int().cpu()
                    found[window] = self.task.tgt_dict.string(tokens, None, extra_symbols_to_ignore=strip)
                done += len(sample["id"])
            if progress:
                progress(batch_number, len(iterator), done, len(dataset))
        missing = [window for window, text in enumerate(found) if text is None]
        if missing:
            raise RuntimeError(f"{len(missing)} windows were not translated (first: {missing[:5]})")
        return found

    def translate(self, documents: Sequence[Union[TextDocument, Sequence[str]]],
                  progress: Union[bool, Progress, None] = None) -> List[List[str]]:
        """One detokenized translation per sentence of each document: ``documents`` is a list of
        documents, each a list of raw sentences (strings; or a :class:`TextDocument` as
        :func:`rfa_doc_mt.data.plain_text.read_documents` reads them); the result has the same
        shape. ``progress``: True prints a progress line on standard error every few seconds
        (:class:`ProgressLine`); a callable gets (batch, batches, windows done, windows) after
        each batch. A sentence cut into parts or translated with less context than the model's
        is warned about on standard error (the module's docstring)."""
        documents = as_text_documents(documents)
        if progress is True:
            progress = ProgressLine()
        units = self.encode(documents)
        with fairseq_warnings_only():
            hypotheses = self.hypotheses(self.dataset(units, documents), progress or None)
        translations: List[List[List[str]]] = [[[] for _ in document.sentences] for document in documents]
        for unit, hypothesis in zip(units, hypotheses):
            translations[unit.document][unit.sentence].append(self.postprocess(hypothesis.strip()))
        return [[" ".join(part for part in parts if part) for parts in document] for document in translations]


class ProgressLine:
    """``translate: batch i of n, k of m windows, r windows/s`` on standard error, every ``every``
    seconds and after the last batch. A window is what the model translates: one per sentence,
    one per part of a sentence cut into parts."""

    def __init__(self, every: float = 5.0):
        self.every = every
        self.start = self.last = time.perf_counter()

    def __call__(self, batch: int, batches: int, done: int, total: int) -> None:
        now = time.perf_counter()
        if now - self.last >= self.every or batch == batches:
            self.last = now
            print(f"translate: batch {batch} of {batches}, {done} of {total} windows, "
                  f"{done / max(now - self.start, 1e-9):.1f} windows/s", file=sys.stderr, flush=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m rfa_doc_mt.generation.translate",
        description="Translate raw documents with a trained checkpoint, as it was trained (its context size, "
                    "decoding mode, recurrent memory), keeping the input's document boundaries.")
    parser.add_argument("--checkpoint", required=True, help="the model (checkpoint_best.pt)")
    parser.add_argument("--data", required=True,
                        help="the prepared corpus the model was trained on (prep.json, dictionaries, spm.model)")
    parser.add_argument("--input", default="-", help="raw source documents, one sentence per line (default: stdin)")
    parser.add_argument("--output", default="-",
                        help="translations, one line per input sentence, same boundaries (default: stdout)")
    parser.add_argument("--docids", help="document id of each input line (contextual-mt's .docids)")
    parser.add_argument("--boundaries", default="auto", choices=("auto",) + FORMATS,
                        help="how the input's documents are delimited (default: detected)")
    parser.add_argument("--beam", type=int, default=DEFAULT_BEAM, help=f"beam size (default {DEFAULT_BEAM})")
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE,
                        help=f"windows per batch (default {DEFAULT_BATCH_SIZE})")
    parser.add_argument("--max-tokens", type=int, help="source tokens per batch (default: no bound)")
    parser.add_argument("--max-len-a", type=float, default=DEFAULT_MAX_LEN_A,
                        help=f"at most A x source tokens + B per window (default A = {DEFAULT_MAX_LEN_A})")
    parser.add_argument("--max-len-b", type=int, default=DEFAULT_MAX_LEN_B,
                        help=f"(default B = {DEFAULT_MAX_LEN_B})")
    parser.add_argument("--lenpen", type=float, default=1.0, help="length penalty (default 1)")
    parser.add_argument("--cpu", action="store_true", help="decode on the CPU even when a GPU is available")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    # (torch's warning of pinned memory without a GPU is silenced by rfa_doc_mt.compat)
    with fairseq_warnings_only():
        return translate_documents(argv)


def translate_documents(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    for name in ("beam", "batch_size"):
        if getattr(args, name) < 1:
            raise DataError(f"--{name.replace('_', '-')} must be at least 1")
    if args.output != "-" and os.path.isdir(args.output):
        raise DataError(f"{args.output}: is a directory")
    started = time.perf_counter()
    text = read_documents(args.input, args.boundaries, args.docids)
    sentences = len(text.sentences)
    translator = Translator(args.checkpoint, args.data, beam=args.beam, batch_size=args.batch_size,
                            max_len_a=args.max_len_a, max_len_b=args.max_len_b, max_tokens=args.max_tokens,
                            cpu=args.cpu, lenpen=args.lenpen)
    if not args.quiet:
        print(f"translate: {plural(len(text.documents), 'document')}, {plural(sentences, 'sentence')} "
              f"({text.form} boundaries) with {translator.describe()}", file=sys.stderr, flush=True)
    translations = translator.translate(text.documents, not args.quiet)
    empty = [(d, k) for d, document in enumerate(translations) for k, line in enumerate(document) if not line]
    if empty:
        d, k = empty[0]
        boundary = (": in a file with empty lines between documents each reads as a document boundary"
                    if text.form == "blank" else "")
        warn(f"{len(empty)} translations are empty (the first: document {text.documents[d].name!r}, sentence "
             f"{k + 1}){boundary}")
    write_documents(args.output, translations, text.form)
    seconds = time.perf_counter() - started
    if not args.quiet:
        print(f"translate: {plural(sentences, 'sentence')} in {seconds:.1f} s ({sentences / seconds:.2f} sentences/s)"
              + (f", written to {args.output}" if args.output != "-" else ""), file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    try:
        sys.exit(main())
    except DataError as error:
        sys.exit(f"error: {error}")
