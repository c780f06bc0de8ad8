"""The corpus's own processing of text, as ``prep.json`` records it: one place for both ways.

* At preparation (``python -m rfa_doc_mt.data.prepare``): tokenization and truecasing of many
  sentences in a worker pool (:func:`preprocess_sentences`, :func:`tokenize_corpus`), a joint
  sentencepiece BPE model learned and applied (:func:`train_sentencepiece`,
  :func:`apply_sentencepiece`).
* At run time, from a prepared corpus: :func:`corpus_preprocessor` gives a raw sentence the
  corpus's pre-processing (contrastive sets, documents to translate), and
  :func:`corpus_postprocessor` undoes it on a model's output (scoring, validation BLEU,
  translation). Both are built from ``prep.json`` alone.

The per-sentence steps themselves (tokenizers, truecasing, detokenization) are
:mod:`rfa_doc_mt.data.text`'s.
"""

import hashlib
import json
import os
import re
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .io import DataError, PrepareError, log, read_lines, write_lines
from .text import (
    Postprocessor,
    Preprocessor,
    SentencePieceEncoder,
    TextDocument,
    load_prep,
    train_truecaser,
    truecasing_of,
)

# Below this many sentences a worker pool costs more than it saves.
PARALLEL_MIN_SENTENCES = 50_000
PROGRESS_EVERY = 100_000


# ---------------------------------------------------------------------------------------
# Preparation: tokenization (+ truecasing) of a corpus, in a worker pool

_worker_preprocessor: Optional[Preprocessor] = None


def _start_worker(lang: str, truecase_model: Optional[str], tokenizer: str) -> None:
    global _worker_preprocessor
    _worker_preprocessor = Preprocessor(lang, truecase_model=truecase_model, tokenizer=tokenizer)


def _preprocess_in_worker(sentence: str) -> str:
    return _worker_preprocessor(sentence)


def preprocess_sentences(sentences: Sequence[str], lang: str, tokenizer: str, truecase_model: Optional[str],
                         workers: int, label: str) -> List[str]:
    """Run :class:`Preprocessor` over many sentences, in a worker pool when they are many."""
    processed: List[str] = []

    def progress() -> None:
        if len(processed) % PROGRESS_EVERY == 0:
            log(f"  {label}: {len(processed)}/{len(sentences)} sentences")

    if workers <= 1 or len(sentences) < PARALLEL_MIN_SENTENCES:
        preprocessor = Preprocessor(lang, truecase_model=truecase_model, tokenizer=tokenizer)
        for sentence in sentences:
            processed.append(preprocessor(sentence))
            progress()
    else:
        import multiprocessing  # here: scoring and collect, which post-process, start without it

        with multiprocessing.Pool(workers, initializer=_start_worker,
                                  initargs=(lang, truecase_model, tokenizer)) as pool:
            for sentence in pool.imap(_preprocess_in_worker, sentences, chunksize=1000):
                processed.append(sentence)
                progress()
    return processed


def tokenize_corpus(stage: str, splits: Dict[str, Tuple[List[TextDocument], List[TextDocument]]],
                    languages: Tuple[str, str], tokenizers: Dict[str, str], learn_split: str,
                    workers: int, truecased: Sequence[str]) -> Dict[str, str]:
    """Write ``raw/{split}.{lang}``; returns the truecasing model file of each language in ``truecased``."""
    raw = os.path.join(stage, "raw")
    truecase_models = {}
    for side, lang in enumerate(languages):
        tokenized = {}
        for split, documents in splits.items():
            sentences = [sentence for document in documents[side] for sentence in document.sentences]
            log(f"tokenizing {split}.{lang} ({tokenizers[lang]}, {len(sentences)} sentences)")
            tokenized[split] = preprocess_sentences(sentences, lang, tokenizers[lang], None, workers, f"{split}.{lang}")
        if lang in truecased:
            model_name = f"truecase.{lang}.model"
            log(f"training the {lang} truecaser on {learn_split}.{lang}")
            # sacremoses parallelizes per sentence through joblib: slower than one process
            train_truecaser(tokenized[learn_split], os.path.join(stage, model_name))
            truecase_models[lang] = model_name
            for split in splits:
                tokenized[split] = preprocess_sentences(tokenized[split], lang, "given",
                                                        os.path.join(stage, model_name), workers,
                                                        f"truecasing {split}.{lang}")
        for split in splits:
            write_lines(os.path.join(raw, f"{split}.{lang}"), tokenized[split])
    return truecase_models


# ---------------------------------------------------------------------------------------
# Preparation: joint sentencepiece BPE


def train_sentencepiece(input_paths: Sequence[str], model_prefix: str, vocab_size: int, workers: int,
                        character_coverage: float) -> int:
    """Learn a BPE model; lower ``vocab_size`` (with a note) when the text cannot fill it."""
    import sentencepiece

    sentencepiece.set_random_generator_seed(1)  # sampling of --input_sentence_size is seeded
    size = vocab_size
    for _ in range(3):
        try:
            sentencepiece.SentencePieceTrainer.train(
                input=list(input_paths), model_prefix=model_prefix, vocab_size=size, model_type="bpe",
                character_coverage=character_coverage,
                # identity: decoding must give back the tokenized text exactly, for BLEU
                normalization_rule_name="identity",
                input_sentence_size=5_000_000, shuffle_input_sentence=True, max_sentence_length=16384,
                # fairseq adds its own <s>, </s>, <pad>
                bos_id=-1, eos_id=-1, num_threads=max(1, workers), minloglevel=2)
            return size
        except RuntimeError as error:
            match = re.search(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)", str(error))
            if not match:
                raise PrepareError(f"sentencepiece training failed: {error}")
            lower = int(match.group(2))
            log(f"note: the training text is too small for a BPE vocabulary of {size}; using {lower}")
            size = lower
    raise PrepareError(f"sentencepiece could not settle on a vocabulary size (last tried {size})")


def apply_sentencepiece(model_path: str, input_path: str, output_path: str) -> None:
    encoder = SentencePieceEncoder(model_path)
    lines = read_lines(input_path)
    pieces: List[str] = []
    for start in range(0, len(lines), PROGRESS_EVERY):
        pieces += encoder.encode_all(lines[start:start + PROGRESS_EVERY])
        if len(lines) > PROGRESS_EVERY:
            log(f"  {os.path.basename(output_path)}: {len(pieces)}/{len(lines)} sentences")
    write_lines(output_path, pieces)


# ---------------------------------------------------------------------------------------
# Run time: a prepared corpus's processing, from its prep.json


class CorpusSentenceProcessor:
    """One sentence → the corpus's pre-processing, then its sentencepiece pieces if any."""

    def __init__(self, preprocessor: Preprocessor, encoder: Optional[SentencePieceEncoder]):
        self.preprocessor = preprocessor
        self.encoder = encoder

    def __call__(self, sentence: str) -> str:
        processed = self.preprocessor(sentence)
        return self.encoder(processed) if self.encoder else processed


def corpus_preprocessor(prep_dir: str, prep: dict, lang: str) -> CorpusSentenceProcessor:
    """Raw sentence of ``lang`` -> what the corpus described by ``prep`` (its ``prep.json``, in
    ``prep_dir``) made of its sentences: its tokenizer, its truecasing, its sentencepiece pieces.
    Documents translated with a model trained on the corpus (generation/translate.py) and its
    contrastive sets (:func:`corpus_processors`) go through this."""
    model = prep.get("sentencepiece_model")
    truecase_model = prep.get("truecase_models", {}).get(lang)
    preprocessor = Preprocessor(
        lang, truecase_model=os.path.join(prep_dir, truecase_model) if truecase_model else None,
        tokenizer=prep["tokenizers"][lang], truecasing=truecasing_of(prep))
    return CorpusSentenceProcessor(preprocessor, SentencePieceEncoder(os.path.join(prep_dir, model)) if model else None)


def corpus_processors(prep_dir: str, prep: dict) -> List[CorpusSentenceProcessor]:
    """The source and target :func:`corpus_preprocessor` of a corpus."""
    return [corpus_preprocessor(prep_dir, prep, lang) for lang in (prep["source_lang"], prep["target_lang"])]


def corpus_postprocessor(data_dir: str, lang: str) -> Callable[[str], str]:
    """A model's output in ``lang`` (pieces) -> text: the inverse of the corpus's pre-processing
    (sentencepiece decoded, truecasing undone, detokenized) as its ``prep.json`` records it;
    the identity for a data directory without one. Scoring (generation/collect.py), validation
    BLEU and translation (generation/translate.py) post-process with this."""
    if not os.path.isfile(os.path.join(data_dir, "prep.json")):
        return lambda text: text
    prep = load_prep(data_dir)
    model = prep.get("sentencepiece_model")
    tokenizer = prep["tokenizers"].get(lang)
    if tokenizer is None:
        raise DataError(f"{os.path.join(data_dir, 'prep.json')}: no language {lang!r} in this corpus")
    return Postprocessor(lang, sentencepiece_model=os.path.join(data_dir, model) if model else None,
                         truecased=lang in prep.get("truecase_models", {}),
                         detokenize=tokenizer in ("jieba", "moses"), truecasing=truecasing_of(prep))


def needs_processing(prep: dict) -> bool:
    return bool(prep.get("sentencepiece_model") or prep.get("truecase_models")
                or any(tokenizer not in ("identity", "given") for tokenizer in prep["tokenizers"].values()))


def corpus_fingerprint(prep_dir: str, prep: dict) -> str:
    """Hash of what decides how a corpus processes text (languages, tokenizers, truecasing and
    BPE models): sets processed for one corpus are valid for another with the same hash."""
    digest = hashlib.sha256(json.dumps(
        [prep["source_lang"], prep["target_lang"], prep["tokenizers"], truecasing_of(prep)
         if prep.get("truecase_models") else None], sort_keys=True).encode())
    models = [prep.get("sentencepiece_model")] + sorted(prep.get("truecase_models", {}).values())
    for model in filter(None, models):
        with open(os.path.join(prep_dir, model), "rb") as handle:
            digest.update(handle.read())
    return digest.hexdigest()
