"""Prepare corpora for the ``doc_translation`` task.

    python -m rfa_doc_mt.data.prepare text --source-lang S --target-lang T --out DIR --train SRC TGT
        [--valid SRC TGT] [--test SRC TGT] [--{train,valid,test}-docids FILE] [--bpe-size 30000]
    python -m rfa_doc_mt.data.prepare iwslt15 --wit3-dir DIR --out DIR [--bpe-size 30000]
    python -m rfa_doc_mt.data.prepare opensubtitles --data-dir DIR --out DIR [--bpe-size 30000]
    python -m rfa_doc_mt.data.prepare consistency --json FILE [FILE ...] --prep DIR --out DIR
    python -m rfa_doc_mt.data.prepare synthetic --out DIR [--seed 1] [--{train,valid,test}-documents N]
        [--contrastive-pairs N]
    python -m rfa_doc_mt.data.prepare binarize --raw DIR --out DIR --source-lang S --target-lang T

Steps shared by the corpora, all written into a hidden directory beside ``--out`` that is
renamed to ``--out`` only when every step succeeded (a failed run leaves nothing behind):

1. documents → tokenized text ``raw/{split}.{lang}`` + ``raw/{split}.docs``, and the
   untokenized target reference ``{split}.ref.{tgt}`` (for BLEU);
2. a joint sentencepiece BPE model (``spm.model``) learned on the training split of both
   sides and applied to every split (``bpe/{split}.{lang}``);
3. ``fairseq-preprocess --joined-dictionary`` into ``--out``, with ``{split}.docs`` beside;
4. ``prep.json``: languages, splits (documents, sentences), BPE size, tokenizers and
   truecasing, which decoding reads to undo the pre-processing.
"""

import argparse
import contextlib
import fnmatch
import glob
import hashlib
import json
import multiprocessing
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from .io import (
    DataError,
    Document,
    atomic_write,
    check_parallel,
    read_docs,
    read_lines,
    read_text,
    write_docs,
    write_lines,
)
from .plain_text import DOCUMENT_MARK, check_parallel_text, read_documents
from .plain_text import FORMATS as DOCUMENT_FORMS
from .text import (
    FIRST_WORD_TRUECASING,
    JIEBA_LANGUAGES,
    Preprocessor,
    SentencePieceEncoder,
    TextDocument,
    check_language,
    default_tokenizer,
    detect_script,
    language_script,
    load_prep,
    train_truecaser,
    truecasing_of,
    uses_truecasing,
)
from .voita import (
    count_repeats,
    map_contrastive,
    read_context_aware,
    read_contrastive,
    write_contrastive,
)
from .wit3 import (
    DEV_SETS,
    TEST_SETS,
    describe_sets,
    find_train_tags,
    read_parallel_train_tags,
    read_wit3_sets,
    wit3_campaign,
)

SPLITS = ("train", "valid", "test")
DEFAULT_BPE_SIZE = 30000  # joint BPE size of paper 000
PREP_FILE = "prep.json"
CONSISTENCY_MANIFEST = "consistency.json"
PREP_FORMAT = 1
# Below this many sentences a worker pool costs more than it saves.
PARALLEL_MIN_SENTENCES = 50_000
PROGRESS_EVERY = 100_000


class PrepareError(RuntimeError):
    """A step of the pipeline (not the input data) failed, e.g. fairseq-preprocess."""


def log(message: str) -> None:
    print(message, flush=True)


# ---------------------------------------------------------------------------------------
# Output directory: staged beside --out, renamed into place at the end


# What a corpus directory written by this script holds (consistency/ only for the synthetic
# corpus, which writes its own sets): anything else there was put there by someone else.
CORPUS_OUTPUTS = ("prep.json", "preprocess.log", "dict.*.txt", "*.bin", "*.idx", "*.docs", "*.ref.*", "raw", "bpe",
                  "spm.model", "spm.vocab", "truecase.*.model")


def earlier_outputs(out: str, marker: str) -> List[str]:
    """Entries of ``out`` (an earlier output of this script) that this script wrote there."""
    entries = os.listdir(out)
    if marker == CONSISTENCY_MANIFEST:
        sets = set(read_manifest(out).get("sets", {}))
        return [entry for entry in entries if entry == marker or entry in sets]
    patterns = CORPUS_OUTPUTS
    with contextlib.suppress(DataError):
        if load_prep(out).get("corpus") == "synthetic":
            patterns += ("consistency", "valid_consistency")
    return [entry for entry in entries if any(fnmatch.fnmatchcase(entry, pattern) for pattern in patterns)]


def check_replaceable(out: str, marker: str, force: bool = False, keep: Sequence[str] = ()) -> None:
    """``out`` may be written if absent, empty, or an earlier output of this script holding
    nothing else than what this script wrote and ``keep`` (unless ``force``)."""
    if not os.path.exists(out):
        return
    if not os.path.isdir(out):
        raise DataError(f"{out}: exists and is not a directory")
    if not os.listdir(out):
        return
    if not os.path.isfile(os.path.join(out, marker)):
        raise DataError(
            f"{out}: exists, is not empty and holds no {marker}, so it was not written by this "
            f"script; remove it or choose another --out")
    if force:
        return
    lost = sorted(set(os.listdir(out)) - set(earlier_outputs(out, marker)) - set(keep))
    if lost:
        shown = ", ".join(entry + ("/" if os.path.isdir(os.path.join(out, entry)) else "") for entry in lost[:10])
        more = f" and {len(lost) - 10} more" if len(lost) > 10 else ""
        raise DataError(
            f"{out}: an earlier output of this script, which also holds what it did not write there: "
            f"{shown}{more}. Replacing {out} would delete them: move them elsewhere, or pass --force "
            f"to replace {out} with everything in it")


def _make_readable(directory: str) -> None:
    """Give staged files the modes the umask allows: mkdtemp/mkstemp create them private."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(directory, 0o777 & ~umask)
    for root, directories, files in os.walk(directory):
        for name in directories:
            os.chmod(os.path.join(root, name), 0o777 & ~umask)
        for name in files:
            os.chmod(os.path.join(root, name), 0o666 & ~umask)


@contextlib.contextmanager
def staged_output(out: str, marker: str, force: bool = False, keep: Sequence[str] = ()) -> Iterator[str]:
    """Yield a temporary directory that replaces ``out`` when the block succeeds.

    ``keep``: entries of an earlier ``out`` copied into the temporary directory first (the
    block may overwrite them). Anything else an earlier ``out`` holds besides what this script
    wrote there stops the run before any work, unless ``force``."""
    out = os.path.abspath(out)
    check_replaceable(out, marker, force, keep)
    parent, name = os.path.split(out)
    os.makedirs(parent, exist_ok=True)
    stage = tempfile.mkdtemp(prefix=f".{name}.partial-", dir=parent)
    try:
        for entry in keep:
            source = os.path.join(out, entry)
            if os.path.isdir(source):
                shutil.copytree(source, os.path.join(stage, entry), symlinks=True)
            elif os.path.lexists(source):
                shutil.copy2(source, os.path.join(stage, entry), follow_symlinks=False)
        yield stage
        if not os.path.isfile(os.path.join(stage, marker)):
            raise PrepareError(f"internal error: {marker} was not written")
        check_replaceable(out, marker, force, keep)
        _make_readable(stage)
        if os.path.isdir(out) and not os.listdir(out):
            os.rmdir(out)
        if os.path.exists(out):
            previous = tempfile.mkdtemp(prefix=f".{name}.previous-", dir=parent)
            os.rmdir(previous)
            os.rename(out, previous)
            try:
                os.rename(stage, out)
            except BaseException:
                os.rename(previous, out)  # put the earlier output back
                raise
            shutil.rmtree(previous)
        else:
            os.rename(stage, out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise


# ---------------------------------------------------------------------------------------
# Step 1: tokenization (+ truecasing)

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
# Step 2: joint sentencepiece BPE


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
# Step 3: fairseq binarization


def fairseq_preprocess_command() -> List[str]:
    beside_python = os.path.join(os.path.dirname(sys.executable), "fairseq-preprocess")
    if os.path.isfile(beside_python):
        return [beside_python]
    on_path = shutil.which("fairseq-preprocess")
    if on_path:
        return [on_path]
    raise PrepareError("fairseq-preprocess not found (install fairseq into this environment)")


def _run_fairseq_preprocess(arguments: List[str]) -> None:
    command = fairseq_preprocess_command() + arguments
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output, shown = [], set()
    for line in process.stdout:
        output.append(line)
        # fairseq logs every argument; show only its summary lines, without logger prefix or paths
        if any(key in line for key in ("Dictionary:", " sents, ")):
            summary = re.sub(r"^.*?(\[\w+\] )", r"\1", line.rstrip())
            summary = re.sub(r"\S*/([^/\s]+:)", r"\1", summary)
            if summary not in shown:
                shown.add(summary)
                log("  " + summary)
    if process.wait() != 0:
        raise PrepareError(
            f"fairseq-preprocess failed (exit {process.returncode}):\n  {shlex.join(command)}\n"
            + "".join(output[-20:]))


def write_sentencepiece_dictionary(vocabulary_path: str, dictionary_path: str) -> int:
    """fairseq dictionary holding every sentencepiece piece, in the model's order.

    A dictionary counted from the encoded training text would miss the pieces that BPE only
    produces on unseen words (``▁д`` + ``верью``), turning them into ``<unk>``."""
    pieces = []
    for line in read_lines(vocabulary_path):
        piece = line.split("\t", 1)[0]
        if piece not in ("<unk>", "<s>", "</s>", "<pad>"):  # fairseq has its own
            pieces.append(piece)
    # the counts only order the file; keep sentencepiece's order
    write_lines(dictionary_path, [f"{piece} {len(pieces) - rank}" for rank, piece in enumerate(pieces)])
    return len(pieces)


def binarize(text_dir: str, out_dir: str, splits: Sequence[str], source_lang: str, target_lang: str,
             workers: int, dictionary_path: Optional[str] = None) -> List[str]:
    """``fairseq-preprocess --joined-dictionary`` of ``text_dir/{split}.{lang}`` into ``out_dir``.

    The joined dictionary is ``dictionary_path`` when given, else counted from the train
    split (from every split when there is none). Returns what it was built from."""
    log(f"binarizing {', '.join(splits)} with fairseq-preprocess ({workers} workers)")
    common = ["--source-lang", source_lang, "--target-lang", target_lang, "--joined-dictionary",
              "--workers", str(max(1, workers))]
    prefixes = []
    for split, option in (("train", "--trainpref"), ("valid", "--validpref"), ("test", "--testpref")):
        if split in splits:
            prefixes += [option, os.path.join(text_dir, split)]
    dictionary_dir = None
    if dictionary_path:
        common += ["--srcdict", dictionary_path]
        built_from = [os.path.basename(dictionary_path)]
    elif "train" not in splits:
        # Without training text no model is trained on this corpus; a dictionary of every
        # split keeps smoke tests free of <unk>.
        dictionary_dir = tempfile.mkdtemp(prefix=".dictionary-", dir=out_dir)
        log(f"note: no train split; the dictionary is built from {' + '.join(splits)}")
        for lang in (source_lang, target_lang):
            with open(os.path.join(dictionary_dir, f"all.{lang}"), "w", encoding="utf-8") as combined:
                for split in splits:
                    with open(os.path.join(text_dir, f"{split}.{lang}"), encoding="utf-8") as part:
                        shutil.copyfileobj(part, combined)
        _run_fairseq_preprocess(common + ["--trainpref", os.path.join(dictionary_dir, "all"),
                                          "--destdir", dictionary_dir, "--dict-only"])
        common += ["--srcdict", os.path.join(dictionary_dir, f"dict.{source_lang}.txt")]
        built_from = list(splits)
    else:
        built_from = ["train"]
    try:
        _run_fairseq_preprocess(common + prefixes + ["--destdir", out_dir])
    finally:
        if dictionary_dir:
            shutil.rmtree(dictionary_dir, ignore_errors=True)
    return built_from


# ---------------------------------------------------------------------------------------
# Step 4: prep.json


def write_prep(stage: str, prep: dict) -> None:
    with atomic_write(os.path.join(stage, PREP_FILE)) as handle:
        json.dump(prep, handle, indent=2, ensure_ascii=False)
        handle.write("\n")


def check_language_pair(source_lang: str, target_lang: str) -> None:
    check_language(source_lang, "--source-lang")
    check_language(target_lang, "--target-lang")
    if source_lang == target_lang:
        raise DataError(f"source and target language are both {source_lang!r}")


def count_summary(documents: Sequence[TextDocument]) -> dict:
    return {"documents": len(documents), "sentences": sum(len(d.sentences) for d in documents)}


def prepare_parallel_corpus(corpus: str, splits: Dict[str, Tuple[List[TextDocument], List[TextDocument]]],
                            split_files: Dict[str, List[str]], out: str, source_lang: str, target_lang: str,
                            tokenizers: Dict[str, str], bpe_size: int, workers: int, command: str,
                            force: bool = False, split_origins: Optional[Dict[str, str]] = None,
                            truecased: Optional[Sequence[str]] = None, extra: Optional[dict] = None) -> dict:
    """Steps 1-4 for documents already read and checked; returns prep.json's content.
    ``split_origins``: what each split holds, in words (recorded in prep.json); ``truecased``:
    the languages to truecase (default: :func:`uses_truecasing`); ``extra``: more prep.json fields."""
    if bpe_size < 1:
        raise DataError(f"--bpe-size must be positive, got {bpe_size}")
    learn_split = "train" if "train" in splits else "valid"
    if learn_split not in splits:
        raise DataError(f"{corpus}: neither a train nor a valid split to learn BPE from")
    if learn_split != "train":
        log("note: no train split: BPE and truecasing are learned on the valid split")
    languages = (source_lang, target_lang)
    if truecased is None:
        truecased = [lang for lang in languages if uses_truecasing(lang)]
    with staged_output(out, PREP_FILE, force=force) as stage:
        for split, (source, target) in splits.items():
            write_docs(os.path.join(stage, "raw", f"{split}.docs"),
                       [Document(d.name, len(d.sentences)) for d in source])
            write_lines(os.path.join(stage, f"{split}.ref.{target_lang}"),
                        [sentence for document in target for sentence in document.sentences])
        truecase_models = tokenize_corpus(stage, splits, languages, tokenizers, learn_split, workers, truecased)

        log(f"learning joint BPE (sentencepiece, size {bpe_size}) on {learn_split}.{source_lang} + "
            f"{learn_split}.{target_lang}")
        coverage = 0.9995 if set(languages) & set(JIEBA_LANGUAGES) else 1.0  # sentencepiece's advice for CJK
        learned_size = train_sentencepiece(
            [os.path.join(stage, "raw", f"{learn_split}.{lang}") for lang in languages],
            os.path.join(stage, "spm"), bpe_size, workers, coverage)
        for split in splits:
            for lang in languages:
                apply_sentencepiece(os.path.join(stage, "spm.model"), os.path.join(stage, "raw", f"{split}.{lang}"),
                                    os.path.join(stage, "bpe", f"{split}.{lang}"))

        ordered_splits = [split for split in SPLITS if split in splits]
        dictionary_path = os.path.join(stage, "bpe", "dict.txt")
        write_sentencepiece_dictionary(os.path.join(stage, "spm.vocab"), dictionary_path)
        binarize(os.path.join(stage, "bpe"), stage, ordered_splits, source_lang, target_lang, workers,
                 dictionary_path=dictionary_path)
        os.unlink(dictionary_path)  # the same as dict.{lang}.txt
        for split in ordered_splits:
            shutil.copyfile(os.path.join(stage, "raw", f"{split}.docs"), os.path.join(stage, f"{split}.docs"))
        prep = {
            "format": PREP_FORMAT,
            "corpus": corpus,
            "source_lang": source_lang,
            "target_lang": target_lang,
            "splits": {split: dict(count_summary(splits[split][0]), files=split_files.get(split, []),
                                   **({"holds": split_origins[split]} if split in (split_origins or {}) else {}))
                       for split in ordered_splits},
            "tokenizers": {lang: tokenizers[lang] for lang in languages},
            "truecased": {lang: lang in truecase_models for lang in languages},
            "truecase_models": truecase_models,
            "truecasing": FIRST_WORD_TRUECASING,
            "bpe": "sentencepiece-bpe",
            "bpe_size": learned_size,
            "requested_bpe_size": bpe_size,
            "bpe_learned_on": learn_split,
            "sentencepiece_model": "spm.model",
            "dictionary_from": ["spm.vocab"],
            "references": {split: f"{split}.ref.{target_lang}" for split in ordered_splits},
            "command": command,
            **(extra or {}),
        }
        write_prep(stage, prep)
    return prep


def print_counts(label: str, splits: Dict[str, Tuple[List[TextDocument], List[TextDocument]]],
                 origins: Dict[str, str], unit: str) -> None:
    for split in SPLITS:
        if split in splits:
            counts = count_summary(splits[split][0])
            origin = f" ({origins[split]})" if origins.get(split, split) != split else ""
            log(f"{label + ' ' if label else ''}{split}{origin}: "
                f"{counts['documents']} {unit}, {counts['sentences']} sentences")


# ---------------------------------------------------------------------------------------
# Already tokenized text: checks shared by `binarize` and `synthetic`


def check_raw_splits(raw_dir: str, source_lang: str, target_lang: str) -> Dict[str, dict]:
    """Documents and sentences of each split present in ``raw_dir``, after checking its files."""
    counts = {}
    for split in SPLITS:
        paths = [os.path.join(raw_dir, f"{split}.{suffix}") for suffix in (source_lang, target_lang, "docs")]
        if not any(os.path.exists(path) for path in paths):
            continue
        source_path, target_path, docs_path = paths
        source, target = read_lines(source_path), read_lines(target_path)
        check_parallel(source_path, target_path, source, target)
        documents = read_docs(docs_path, num_sentences=len(source))
        counts[split] = {"documents": len(documents), "sentences": len(source)}
    if not counts:
        raise DataError(f"{raw_dir}: no {{train,valid,test}}.{source_lang}/.{target_lang} files")
    if "train" not in counts and "valid" not in counts:
        raise DataError(f"{raw_dir}: neither train.{source_lang} nor valid.{source_lang}")
    return counts


def binarize_raw(raw_dir: str, stage: str, counts: Dict[str, dict], source_lang: str, target_lang: str,
                 workers: int) -> List[str]:
    """Binarize checked text and copy its boundaries; returns the dictionary's splits."""
    ordered_splits = [split for split in SPLITS if split in counts]
    dictionary_splits = binarize(raw_dir, stage, ordered_splits, source_lang, target_lang, workers)
    for split in ordered_splits:
        shutil.copyfile(os.path.join(raw_dir, f"{split}.docs"), os.path.join(stage, f"{split}.docs"))
    return dictionary_splits


def unprocessed_prep(corpus: str, source_lang: str, target_lang: str, counts: Dict[str, dict], tokenizer: str,
                     dictionary_splits: List[str], references: Dict[str, str], command: str) -> dict:
    return {
        "format": PREP_FORMAT,
        "corpus": corpus,
        "source_lang": source_lang,
        "target_lang": target_lang,
        "splits": counts,
        "tokenizers": {source_lang: tokenizer, target_lang: tokenizer},
        "truecased": {source_lang: False, target_lang: False},
        "truecase_models": {},
        "bpe": None,
        "bpe_size": None,
        "requested_bpe_size": None,
        "bpe_learned_on": None,
        "sentencepiece_model": None,
        "dictionary_from": dictionary_splits,
        "references": references,
        "command": command,
    }


# ---------------------------------------------------------------------------------------
# Contrastive sets


class CorpusSentenceProcessor:
    """One sentence → the corpus's pre-processing, then its sentencepiece pieces if any."""

    def __init__(self, preprocessor: Preprocessor, encoder: Optional[SentencePieceEncoder]):
        self.preprocessor = preprocessor
        self.encoder = encoder

    def __call__(self, sentence: str) -> str:
        processed = self.preprocessor(sentence)
        return self.encoder(processed) if self.encoder else processed


def corpus_processors(prep_dir: str, prep: dict) -> List[CorpusSentenceProcessor]:
    """Source and target sentence processors of the corpus described by ``prep`` (its contrastive
    sets and the documents translated with a model trained on it go through these)."""
    model = prep.get("sentencepiece_model")
    encoder = SentencePieceEncoder(os.path.join(prep_dir, model)) if model else None
    processors = []
    for lang in (prep["source_lang"], prep["target_lang"]):
        truecase_model = prep.get("truecase_models", {}).get(lang)
        preprocessor = Preprocessor(
            lang, truecase_model=os.path.join(prep_dir, truecase_model) if truecase_model else None,
            tokenizer=prep["tokenizers"][lang], truecasing=truecasing_of(prep))
        processors.append(CorpusSentenceProcessor(preprocessor, encoder))
    return processors


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


def read_manifest(directory: str) -> dict:
    path = os.path.join(directory, CONSISTENCY_MANIFEST)
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as error:
        raise DataError(f"{path}:{error.lineno}: invalid JSON: {error.msg}")


def check_set_languages(path: str, examples: Sequence[dict], prep_dir: str, prep: dict,
                        languages: Optional[Tuple[str, str]]) -> None:
    """Stop when a contrastive set's languages (``languages`` when given, else the writing
    systems of its ``src`` and ``dst`` text) are not the corpus's."""
    corpus = (prep["source_lang"], prep["target_lang"])
    where = f"the corpus {prep_dir} translates {corpus[0]} -> {corpus[1]}"
    if languages:
        if tuple(languages) != corpus:
            raise DataError(f"{path}: the sets are {languages[0]} -> {languages[1]} (--source-lang/--target-lang), "
                            f"but {where}; prepare them against a {languages[0]}-{languages[1]} corpus")
        return
    sample = examples[:200]
    found = (detect_script(example["src"] for example in sample),
             detect_script(candidate for example in sample for candidate in example["dst"]))
    expected = tuple(language_script(lang) for lang in corpus)
    if any(seen is not None and seen != wanted for seen, wanted in zip(found, expected)):
        raise DataError(
            f"{path}: its sources ('src') are in {found[0] or 'no'} script and its candidates ('dst') in "
            f"{found[1] or 'no'} script, but {where} ({expected[0]} -> {expected[1]} script): these sets "
            f"are for another language pair. Prepare them against a corpus of their languages, or pass "
            f"--source-lang/--target-lang if this guess from the script is wrong")


def write_consistency_sets(json_paths: Sequence[str], prep_dir: str, prep: dict, out_dir: str,
                           relative_paths: bool = False, languages: Optional[Tuple[str, str]] = None,
                           manifest_sets: Optional[Dict[str, dict]] = None) -> Dict[str, dict]:
    """Validate contrastive sets and write them processed like the corpus (copied when no
    processing applies) into ``out_dir`` with a ``consistency.json`` manifest.

    ``relative_paths``: the manifest names files relative to ``out_dir`` (for sets inside a
    corpus being staged, whose temporary name disappears at the end). ``languages``: the sets'
    (source, target) languages, checked against the corpus's (else guessed from the script).
    ``manifest_sets``: entries of sets already in ``out_dir`` that the manifest keeps."""

    def recorded(path: str) -> str:
        return os.path.relpath(path, out_dir) if relative_paths else os.path.abspath(path)

    names = {}
    for path in json_paths:
        name = os.path.basename(path)
        if name in names:
            raise DataError(f"{path}: same file name as {names[name]}; outputs would collide")
        names[name] = path
    examples = {path: read_contrastive(path) for path in json_paths}
    for path in json_paths:
        check_set_languages(path, examples[path], prep_dir, prep, languages)
    processing = needs_processing(prep)
    if processing:
        source_sentence, target_sentence = corpus_processors(prep_dir, prep)
    manifest = dict(manifest_sets or {})
    for path in json_paths:
        name = os.path.basename(path)
        output_path = os.path.join(out_dir, name)
        if processing:
            log(f"processing {path if not relative_paths else name} ({len(examples[path])} examples)")
            written = map_contrastive(examples[path], source_sentence, target_sentence)
            write_contrastive(output_path, written)
        else:
            log(f"checked {path if not relative_paths else name} ({len(examples[path])} examples); "
                f"copied as is (no processing for this corpus)")
            written = examples[path]
            with atomic_write(output_path, "wb") as handle, open(path, "rb") as source:
                shutil.copyfileobj(source, handle)
        # counted on what is scored: processing may make two candidates identical
        repeating, single = count_repeats(written)
        if repeating:
            log(f"note: {name}: {repeating} of {len(written)} examples repeat a candidate; identical candidates "
                f"are one candidate, scored once")
        if single:
            log(f"note: {name}: {single} examples have a single distinct candidate; the scorer skips them")
        manifest[name] = {"examples": len(written), "from": recorded(path),
                          "candidates": sum(len(example["dst"]) for example in written),
                          "repeated_candidates": repeating, "single_candidate": single}
    with atomic_write(os.path.join(out_dir, CONSISTENCY_MANIFEST)) as handle:
        json.dump({"prep": recorded(prep_dir), "source_lang": prep["source_lang"], "target_lang": prep["target_lang"],
                   "corpus_fingerprint": corpus_fingerprint(prep_dir, prep), "processed": processing,
                   "sets": dict(sorted(manifest.items()))},
                  handle, indent=2, ensure_ascii=False)
        handle.write("\n")
    return manifest


# ---------------------------------------------------------------------------------------
# Subcommands


def run_iwslt15(args, command: str) -> None:
    source_lang, target_lang = args.source_lang, args.target_lang
    check_language_pair(source_lang, target_lang)
    splits, split_files, origins = {}, {}, {}
    train_source, train_target = find_train_tags(args.wit3_dir, source_lang, target_lang)
    if train_source:
        log(f"reading {train_source} and {train_target}")
        source, target, dropped = read_parallel_train_tags(train_source, train_target)
        if dropped:
            log(f"note: dropped {dropped} line pairs of train.tags with an empty side")
        splits["train"] = (source, target)
        split_files["train"] = [os.path.basename(train_source), os.path.basename(train_target)]
        origins["train"] = os.path.basename(train_source).rsplit(".", 1)[0]
    else:
        log(f"note: no train.tags.{source_lang}-{target_lang}.{{{source_lang},{target_lang}}} in {args.wit3_dir}: "
            f"preparing the valid and test splits only")
    campaigns = set()
    for split, option in (("valid", args.valid_sets), ("test", args.test_sets)):
        set_names = [name.strip() for name in option.split(",") if name.strip()]
        if not set_names:
            raise DataError(f"--{split}-sets is empty")
        source, target, files = read_wit3_sets(args.wit3_dir, set_names, source_lang, target_lang)
        splits[split] = (source, target)
        split_files[split] = files
        # named by what it holds: "IWSLT15 tst2010+tst2011", "IWSLT17 tst2016+tst2017"
        origins[split] = describe_sets(set_names, files)
        campaigns.update(wit3_campaign(name) for name in files)
    corpus = "+".join(sorted(campaigns)).lower()
    print_counts("", splits, origins, "talks")
    tokenizers = {lang: default_tokenizer(lang) for lang in (source_lang, target_lang)}
    prepare_parallel_corpus(corpus, splits, split_files, args.out, source_lang, target_lang, tokenizers,
                            args.bpe_size, args.workers, command, force=args.force,
                            split_origins=origins)
    print_counts("", splits, origins, "talks")
    log(f"wrote {os.path.abspath(args.out)}")


def read_text_split(split: str, source_path: str, target_path: str, boundaries: str,
                    docids: Optional[str]) -> Tuple[List[TextDocument], List[TextDocument], Tuple[str, str]]:
    """Both sides of one split of raw document-level text, checked against each other."""
    log(f"reading {split}: {source_path} and {target_path}")
    source = read_documents(source_path, boundaries, docids)
    target = read_documents(target_path, boundaries, docids)
    check_parallel_text(source, target)
    for side in (source, target):
        if side.form == "single":
            log(f"note: {side.path} has no document boundaries ({DOCUMENT_MARK} lines, empty lines between "
                f"documents, or --{split}-docids): it is read as one document")
    return source.documents, target.documents, (source.form, target.form)


# Small training text: at most one BPE piece per this many words of it (both sides), and no
# fewer than the floor (scripts of thousands of characters need room beyond them). With 30k pieces
# learned on a few thousand sentences most pieces are whole words seen once or twice; Sennrich &
# Zhang (2019, "Revisiting Low-Resource Neural Machine Translation") found much smaller
# vocabularies better in that regime.
WORDS_PER_BPE_PIECE = 50
SMALL_TEXT_BPE_FLOOR = 1000


def bpe_size_for(learn_split: Tuple[List[TextDocument], List[TextDocument]], requested: int) -> int:
    """``requested``, lowered (with a note) when the text BPE is learned on is small."""
    words = sum(len(sentence.split()) for side in learn_split for document in side for sentence in document.sentences)
    cap = max(SMALL_TEXT_BPE_FLOOR, words // WORDS_PER_BPE_PIECE)
    if requested > cap:
        log(f"note: BPE is learned on {words} words: a vocabulary of {requested} would hold mostly pieces seen "
            f"once or twice; using {cap} (one piece per {WORDS_PER_BPE_PIECE} words; --bpe-size sets a smaller one)")
        return cap
    return requested


def run_text(args, command: str) -> None:
    source_lang, target_lang = args.source_lang, args.target_lang
    check_language_pair(source_lang, target_lang)
    if not args.train and not args.valid:
        raise DataError("give --train SRC TGT or --valid SRC TGT (BPE and truecasing are learned on train, "
                        "else on valid)")
    splits, split_files, origins, forms = {}, {}, {}, {}
    for split in SPLITS:
        paths, docids = getattr(args, split), getattr(args, f"{split}_docids")
        if not paths:
            if docids:
                raise DataError(f"--{split}-docids {docids} without --{split} SRC TGT")
            continue
        source, target, forms[split] = read_text_split(split, paths[0], paths[1], args.boundaries, docids)
        splits[split] = (source, target)
        split_files[split] = [os.path.basename(path) for path in paths] + ([os.path.basename(docids)] if docids else [])
        origins[split] = " + ".join(split_files[split])
    print_counts("", splits, origins, "documents")
    bpe_size = bpe_size_for(splits["train" if "train" in splits else "valid"], args.bpe_size)
    tokenizers = {lang: default_tokenizer(lang) for lang in (source_lang, target_lang)}
    # first-word truecasing is undone exactly, so every language with Moses rules is truecased
    truecased = [lang for lang in (source_lang, target_lang) if tokenizers[lang] == "moses"]
    prepare_parallel_corpus("text", splits, split_files, args.out, source_lang, target_lang, tokenizers,
                            bpe_size, args.workers, command, force=args.force, split_origins=origins,
                            truecased=truecased,
                            extra={"boundaries": {split: dict(zip((source_lang, target_lang), form))
                                                  for split, form in forms.items()}})
    log(f"wrote {os.path.abspath(args.out)}")


def run_opensubtitles(args, command: str) -> None:
    source_lang, target_lang = args.source_lang, args.target_lang
    check_language_pair(source_lang, target_lang)
    splits, split_files, origins = {}, {}, {}
    for split, prefix in (("train", "train"), ("valid", "dev"), ("test", "test")):
        source_path = os.path.join(args.data_dir, f"{prefix}.src")
        target_path = os.path.join(args.data_dir, f"{prefix}.dst")
        if split == "train" and not os.path.exists(source_path) and not os.path.exists(target_path):
            log(f"note: no train.src/train.dst in {args.data_dir}: preparing dev and test only")
            continue
        log(f"reading {source_path} and {target_path}")
        splits[split] = read_context_aware(source_path, target_path)
        split_files[split] = [os.path.basename(source_path), os.path.basename(target_path)]
        origins[split] = prefix
    print_counts("opensubtitles", splits, origins, "documents")
    # Voita et al. release Moses-tokenized text; tokenizing again would split "n 't" further.
    tokenizers = {source_lang: "pretokenized", target_lang: "pretokenized"}
    prepare_parallel_corpus("opensubtitles", splits, split_files, args.out, source_lang, target_lang, tokenizers,
                            args.bpe_size, args.workers, command, force=args.force)
    print_counts("opensubtitles", splits, origins, "documents")
    log(f"wrote {os.path.abspath(args.out)}")


def run_consistency(args, command: str) -> None:
    prep = load_prep(args.prep)
    if (args.source_lang is None) != (args.target_lang is None):
        raise DataError("give both --source-lang and --target-lang, or neither")
    languages = (args.source_lang, args.target_lang) if args.source_lang else None
    out = os.path.abspath(args.out)
    # sets already in --out are kept (the new ones are added), when prepared for this corpus
    keep, kept_sets = [], {}
    if os.path.isfile(os.path.join(out, CONSISTENCY_MANIFEST)) and not args.force:
        earlier = read_manifest(out)
        replaced = {os.path.basename(path) for path in args.json}
        others = sorted(set(earlier.get("sets", {})) - replaced)
        if others and earlier.get("corpus_fingerprint") != corpus_fingerprint(args.prep, prep):
            raise DataError(
                f"{out}: holds sets prepared for another corpus (or by an older version of this script): "
                f"{', '.join(others)}; adding to them would mix two preparations and replacing {out} would "
                f"delete them. Prepare these sets again with this --prep, choose another --out, or pass "
                f"--force to replace {out}")
        kept_sets = {name: earlier["sets"][name] for name in others}
        keep = [entry for entry in os.listdir(out) if entry != CONSISTENCY_MANIFEST and entry not in replaced]
    with staged_output(out, CONSISTENCY_MANIFEST, force=args.force, keep=keep) as stage:
        manifest = write_consistency_sets(args.json, args.prep, prep, stage, languages=languages,
                                          manifest_sets=kept_sets)
    for name, entry in manifest.items():
        status = "kept" if name in kept_sets else "written"
        log(f"consistency {name}: {entry['examples']} examples, {entry['candidates']} candidates ({status})")
    log(f"wrote {out}")


def run_synthetic(args, command: str) -> None:
    from .synthetic import write_corpus

    source_lang, target_lang = "src", "tgt"
    options = {"seed": args.seed, "max_distance": args.max_distance, "document_sentences": args.document_sentences}
    for flag, name in (("train_documents", "num_train_documents"), ("valid_documents", "num_valid_documents"),
                       ("test_documents", "num_test_documents"), ("contrastive_pairs", "num_contrastive_pairs"),
                       ("valid_contrastive_pairs", "num_valid_contrastive_pairs")):
        value = getattr(args, flag)
        if value is not None:
            if value < 1:
                raise DataError(f"--{flag.replace('_', '-')} must be at least 1, got {value}")
            options[name] = value
    with staged_output(args.out, PREP_FILE, force=args.force) as stage:
        raw_dir = os.path.join(stage, "raw")
        log(f"writing the synthetic corpus (seed {args.seed}, antecedents 1-{args.max_distance} sentences back, "
            f"documents of {args.document_sentences[0]}-{args.document_sentences[1]} sentences)")
        try:
            summary = write_corpus(raw_dir, **options)
        except ValueError as error:
            raise DataError(str(error)) from None
        counts = check_raw_splits(raw_dir, source_lang, target_lang)
        for split, count in counts.items():
            log(f"synthetic {split + ':':6s} {count['documents']} documents, {count['sentences']} sentences")
        dictionary_splits = binarize_raw(raw_dir, stage, counts, source_lang, target_lang, args.workers)
        references = {}
        for split in counts:
            references[split] = f"{split}.ref.{target_lang}"
            shutil.copyfile(os.path.join(raw_dir, f"{split}.{target_lang}"), os.path.join(stage, references[split]))
        prep = unprocessed_prep("synthetic", source_lang, target_lang, counts, "identity", dictionary_splits,
                                references, command)
        prep["seed"] = args.seed
        prep["max_distance"] = summary["max_distance"]
        prep["document_sentences"] = summary["document_sentences"]
        prep["contrastive_examples_by_distance"] = summary["contrastive_examples_by_distance"]
        write_prep(stage, prep)
        # the test sets, and the validation sets fairseq-train selects on (--valid-subset valid_consistency)
        for sets in ("consistency", "valid_consistency"):
            json_paths = sorted(glob.glob(os.path.join(raw_dir, sets, "*.json")))
            if json_paths:
                consistency_dir = os.path.join(stage, sets)
                os.makedirs(consistency_dir)
                write_consistency_sets(json_paths, stage, prep, consistency_dir, relative_paths=True)
            else:
                log(f"note: the synthetic corpus wrote no {sets} sets")
    log(f"wrote {os.path.abspath(args.out)}")


def run_binarize(args, command: str) -> None:
    check_language_pair(args.source_lang, args.target_lang)
    counts = check_raw_splits(args.raw, args.source_lang, args.target_lang)
    for split, count in counts.items():
        log(f"{split + ':':6s} {count['documents']} documents, {count['sentences']} sentences")
    with staged_output(args.out, PREP_FILE, force=args.force) as stage:
        dictionary_splits = binarize_raw(args.raw, stage, counts, args.source_lang, args.target_lang, args.workers)
        prep = unprocessed_prep("binarize", args.source_lang, args.target_lang, counts, "given", dictionary_splits,
                                {}, command)
        prep["raw_dir"] = os.path.abspath(args.raw)
        write_prep(stage, prep)
    log(f"wrote {os.path.abspath(args.out)}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m rfa_doc_mt.data.prepare", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    default_workers = min(8, os.cpu_count() or 1)

    def add_force(subparser):
        subparser.add_argument("--force", action="store_true",
                               help="replace --out even when it holds files this script did not write there")

    def add_workers(subparser):
        subparser.add_argument("--workers", type=int, default=default_workers,
                               help="processes for tokenization, BPE and fairseq-preprocess "
                                    f"(default {default_workers})")

    iwslt = commands.add_parser("iwslt15", help="TED talks from WIT3 files (IWSLT15 zh-en by default; any "
                                                 "IWSLT campaign's sets with --valid-sets/--test-sets)")
    iwslt.add_argument("--wit3-dir", required=True,
                       help="directory of IWSLT*.TED.<set>.<pair>.<lang>.xml (and train.tags.* if any)")
    iwslt.add_argument("--out", required=True, help="output directory (binarized corpus)")
    iwslt.add_argument("--source-lang", default="zh", help="source language code (default zh)")
    iwslt.add_argument("--target-lang", default="en", help="target language code (default en)")
    iwslt.add_argument("--bpe-size", type=int, default=DEFAULT_BPE_SIZE,
                       help="joint BPE vocabulary size (lowered when the training text is too small)")
    iwslt.add_argument("--valid-sets", default=",".join(DEV_SETS),
                       help=f"comma-separated WIT3 sets forming the valid split (default {','.join(DEV_SETS)})")
    iwslt.add_argument("--test-sets", default=",".join(TEST_SETS),
                       help=f"comma-separated WIT3 sets forming the test split (default {','.join(TEST_SETS)}); "
                            f"e.g. tst2016,tst2017 for IWSLT17's files, of either pair direction")
    add_workers(iwslt)
    add_force(iwslt)

    text = commands.add_parser(
        "text", help="raw document-level parallel text of any language pair, one sentence per line",
        description="Raw parallel text, one sentence per line, documents marked by a <d> line before each, by an "
                    "empty line between two, or by a document-id file per split; the boundaries of each file are "
                    "detected unless --boundaries says. Tokenized (jieba for zh, Moses otherwise) and truecased "
                    "(first word, Moses languages), joint sentencepiece BPE, binarized.")
    text.add_argument("--source-lang", required=True, help="source language code")
    text.add_argument("--target-lang", required=True, help="target language code")
    text.add_argument("--out", required=True, help="output directory (binarized corpus)")
    for split in SPLITS:
        text.add_argument(f"--{split}", nargs=2, metavar=("SRC", "TGT"),
                          help=f"the {split} split: source and target file" + (
                              " (train or valid must be given)" if split != "test" else ""))
        text.add_argument(f"--{split}-docids", metavar="FILE",
                          help=f"document id of each sentence line of the {split} files, one per line")
    text.add_argument("--boundaries", default="auto", choices=("auto",) + DOCUMENT_FORMS,
                      help="how documents are delimited: auto (default: a <d> line before each document if the "
                           "file has one, else empty lines between documents, else one document), marked, "
                           "blank, docids (with --SPLIT-docids), single")
    text.add_argument("--bpe-size", type=int, default=DEFAULT_BPE_SIZE,
                      help="joint BPE vocabulary size (default 30000 as paper 000; lowered, with a note, when "
                           "the training text is too small)")
    add_workers(text)
    add_force(text)

    subtitles = commands.add_parser("opensubtitles", help="Voita et al.'s context-aware OpenSubtitles en-ru")
    subtitles.add_argument("--data-dir", required=True, help="directory of {train,dev,test}.{src,dst}")
    subtitles.add_argument("--out", required=True, help="output directory (binarized corpus)")
    subtitles.add_argument("--source-lang", default="en", help="language of *.src (default en)")
    subtitles.add_argument("--target-lang", default="ru", help="language of *.dst (default ru)")
    subtitles.add_argument("--bpe-size", type=int, default=DEFAULT_BPE_SIZE,
                           help="joint BPE vocabulary size (lowered when the training text is too small)")
    add_workers(subtitles)
    add_force(subtitles)

    consistency = commands.add_parser("consistency", help="contrastive JSON sets, processed like a prepared corpus")
    consistency.add_argument("--json", nargs="+", required=True, help="contrastive JSON files")
    consistency.add_argument("--prep", required=True, help="a corpus directory written by this script")
    consistency.add_argument("--out", required=True,
                             help="output directory for the processed JSON sets; sets already there (prepared "
                                  "for the same corpus) are kept")
    consistency.add_argument("--source-lang", help="language of the sets' 'src' (default: guessed from its script)")
    consistency.add_argument("--target-lang", help="language of the sets' 'dst' (default: guessed from its script)")
    consistency.add_argument("--force", action="store_true",
                             help="replace --out with only these sets, whatever it holds")

    from .synthetic import add_long_range_arguments

    synthetic = commands.add_parser("synthetic", help="the embedded synthetic corpus (no BPE)")
    synthetic.add_argument("--out", required=True, help="output directory (binarized corpus)")
    synthetic.add_argument("--seed", type=int, default=1, help="corpus seed (default 1)")
    for split in ("train", "valid", "test"):
        synthetic.add_argument(f"--{split}-documents", type=int, default=None,
                               help=f"number of {split} documents (default: the generator's)")
    synthetic.add_argument("--contrastive-pairs", type=int, default=None,
                           help="mirrored example pairs per contrastive set (default: the generator's)")
    synthetic.add_argument("--valid-contrastive-pairs", type=int, default=None,
                           help="mirrored example pairs per validation set (default: --contrastive-pairs)")
    add_long_range_arguments(synthetic)
    add_workers(synthetic)
    add_force(synthetic)

    binarize_parser = commands.add_parser("binarize", help="binarize already tokenized text (steps 3 and 4)")
    binarize_parser.add_argument("--raw", required=True, help="directory of {split}.{lang} and {split}.docs")
    binarize_parser.add_argument("--out", required=True, help="output directory (binarized corpus)")
    binarize_parser.add_argument("--source-lang", required=True, help="source language code (file suffix)")
    binarize_parser.add_argument("--target-lang", required=True, help="target language code (file suffix)")
    add_workers(binarize_parser)
    add_force(binarize_parser)
    return parser


COMMANDS = {
    "text": run_text,
    "iwslt15": run_iwslt15,
    "opensubtitles": run_opensubtitles,
    "consistency": run_consistency,
    "synthetic": run_synthetic,
    "binarize": run_binarize,
}


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    command = shlex.join(["python", "-m", "rfa_doc_mt.data.prepare"] + argv)
    try:
        COMMANDS[args.command](args, command)
    except (DataError, PrepareError) as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
