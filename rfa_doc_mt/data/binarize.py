"""Binarization and ``prep.json``, the last steps of ``python -m rfa_doc_mt.data.prepare``.

* ``fairseq-preprocess --joined-dictionary`` of tokenized (and BPE-encoded) text into the
  corpus directory, with the document boundaries (``{split}.docs``) beside (:func:`binarize`;
  :func:`check_raw_splits` and :func:`binarize_raw` for text that is already tokenized);
* ``prep.json`` (:func:`write_prep`): languages, splits, BPE, tokenizers and truecasing, which
  decoding reads to undo the pre-processing (:mod:`rfa_doc_mt.data.processing`).
"""

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Sequence

from .io import DataError, PrepareError, atomic_write, check_parallel, log, read_docs, read_lines, write_lines

SPLITS = ("train", "valid", "test")
PREP_FILE = "prep.json"
PREP_FORMAT = 1


def fairseq_preprocess_command() -> List[str]:
    """fairseq-preprocess through :mod:`rfa_doc_mt.fairseq_command` (fairseq's own ``cli_main``,
    imported as this project's commands import fairseq: 1.5-2 s of CPU less than its console script)."""
    if importlib.util.find_spec("fairseq_cli") is None:
        raise PrepareError("fairseq not found: install fairseq-fixed into this environment (make setup)")
    return [sys.executable, "-m", "rfa_doc_mt.fairseq_command", "fairseq-preprocess"]


def _run_fairseq_preprocess(arguments: List[str]) -> None:
    command = fairseq_preprocess_command() + arguments
    # this package from wherever the caller imported it, as scripts/common.sh's fairseq_command does
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.environ.get("PYTHONPATH")
    environment = dict(os.environ, PYTHONPATH=root + (os.pathsep + path if path else ""))
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment)
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


def write_prep(stage: str, prep: dict) -> None:
    with atomic_write(os.path.join(stage, PREP_FILE)) as handle:
        json.dump(prep, handle, indent=2, ensure_ascii=False)
        handle.write("\n")


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
