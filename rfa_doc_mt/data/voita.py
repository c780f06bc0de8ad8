"""Voita et al. (2019) English-Russian OpenSubtitles formats.

* Context-aware training data (``context_aware/{train,dev,test}.{src,dst}``): each line is
  four consecutive sentences joined by `` _eos ``; each line is read as one document of four
  sentences (the task's fixed-window mode). The text is already Moses-tokenized.
* Contrastive test sets (``deixis_dev.json``, ``lex_cohesion_test.json``, ...): a JSON list
  of ``{"src": str, "dst": [str, ...], "true_ind": int, "ctx_dist": int}``, each string four
  sentences joined by `` _eos ``; ``dst`` holds the candidate translations, ``true_ind``
  the correct one, ``ctx_dist`` how many sentences back the context that decides it lies
  (0: in the current sentence; it may lie further back than the sentences an example carries,
  as ContraPro's antecedents do). Sets converted from other formats
  (:mod:`.contrastive_formats`) add ``categories`` ({axis: value}, reported by the scorer) and
  ``group`` (examples a significance test resamples together).
  The released ``ellipsis_infl`` and ``ellipsis_vp`` sets repeat a candidate in some examples:
  the copies are one candidate (:func:`distinct_candidates`).
"""

import json
import os
from typing import Callable, List, Optional, Sequence, Tuple

from .io import DataError, atomic_write, read_text, text_lines
from .text import TextDocument, check_parallel_documents

SENTENCE_SEPARATOR = "_eos"
SENTENCES_PER_DOCUMENT = 4


def split_sentences(text: str, where: str) -> List[str]:
    """``a _eos b _eos c`` → ``[a, b, c]``; an empty sentence stops with ``where`` named."""
    sentences, words = [], []
    for word in text.split():
        if word == SENTENCE_SEPARATOR:
            sentences.append(words)
            words = []
        else:
            words.append(word)
    sentences.append(words)
    for index, sentence in enumerate(sentences, start=1):
        if not sentence:
            raise DataError(f"{where}: sentence {index} of {len(sentences)} is empty")
    return [" ".join(words) for words in sentences]


def join_sentences(sentences: Sequence[str]) -> str:
    return f" {SENTENCE_SEPARATOR} ".join(sentences)


def read_context_aware(source_path: str, target_path: str, sentences_per_document: int = SENTENCES_PER_DOCUMENT
                       ) -> Tuple[List[TextDocument], List[TextDocument]]:
    """Both sides of a context-aware split: one document per line, ``line<n>`` named."""
    sides = []
    for path in (source_path, target_path):
        documents = []
        for line_number, line in text_lines(path):
            where = f"{path}:{line_number}"
            sentences = split_sentences(line, where)
            if len(sentences) != sentences_per_document:
                raise DataError(
                    f"{where}: {len(sentences)} sentences joined by ' {SENTENCE_SEPARATOR} ', "
                    f"expected {sentences_per_document}")
            documents.append(TextDocument(f"line{line_number}", sentences, [line_number] * len(sentences)))
        if not documents:
            raise DataError(f"{path}: empty file")
        sides.append(documents)
    check_parallel_documents(source_path, target_path, sides[0], sides[1])
    return sides[0], sides[1]


def load_json(path: str):
    """A JSON file, stopping with the line of what is not JSON."""
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as error:
        raise DataError(f"{path}:{error.lineno}: invalid JSON: {error.msg}")


def read_contrastive(path: str) -> List[dict]:
    """A contrastive JSON set, validated (see :func:`validate_contrastive`)."""
    examples = load_json(path)
    validate_contrastive(path, examples)
    return examples


def validate_contrastive(path: str, examples) -> None:
    """Stop at the first malformed example, naming the file and the example's index."""
    if not isinstance(examples, list) or not examples:
        raise DataError(f"{path}: expected a non-empty JSON list of examples")
    for index, example in enumerate(examples):
        where = f"{path}: example {index} (0-based)"
        if not isinstance(example, dict):
            raise DataError(f"{where}: expected an object, got {type(example).__name__}")
        missing = [key for key in ("src", "dst", "true_ind", "ctx_dist") if key not in example]
        if missing:
            raise DataError(f"{where}: missing {', '.join(missing)}")
        if not isinstance(example["src"], str):
            raise DataError(f"{where}: 'src' must be a string")
        candidates = example["dst"]
        if not isinstance(candidates, list) or len(candidates) < 2 or not all(isinstance(c, str) for c in candidates):
            raise DataError(f"{where}: 'dst' must be a list of at least two candidate strings")
        true_index = example["true_ind"]
        # bool is an int subclass; true/false is a typo here, not an index
        if not isinstance(true_index, int) or isinstance(true_index, bool) or not 0 <= true_index < len(candidates):
            raise DataError(f"{where}: 'true_ind' {true_index!r} is not an index into its {len(candidates)} candidates")
        source_sentences = split_sentences(example["src"], f"{where}: 'src'")
        for candidate_index, candidate in enumerate(candidates):
            candidate_sentences = split_sentences(candidate, f"{where}: 'dst'[{candidate_index}]")
            if len(candidate_sentences) != len(source_sentences):
                raise DataError(
                    f"{where}: 'dst'[{candidate_index}] has {len(candidate_sentences)} sentences but 'src' has "
                    f"{len(source_sentences)}")
        distance = example["ctx_dist"]
        if not isinstance(distance, int) or isinstance(distance, bool) or distance < 0:
            raise DataError(f"{where}: 'ctx_dist' {distance!r} is not a distance (sentences back, 0 or more)")
        categories = example.get("categories", {})
        if not isinstance(categories, dict) or not all(isinstance(axis, str) and isinstance(value, str)
                                                       for axis, value in categories.items()):
            raise DataError(f"{where}: 'categories' must map each axis to a value, both strings")


def distinct_candidates(example: dict) -> Tuple[List[str], int]:
    """The example's distinct candidate texts (first occurrence order) and the index among them
    of the true text: identical candidates are one candidate, scored once."""
    texts: List[str] = []
    for candidate in example["dst"]:
        if candidate not in texts:
            texts.append(candidate)
    return texts, texts.index(example["dst"][example["true_ind"]])


def count_repeats(examples: Sequence[dict]) -> Tuple[int, int]:
    """(examples that repeat a candidate, examples left with a single distinct candidate)."""
    repeating = single = 0
    for example in examples:
        distinct = len(distinct_candidates(example)[0])
        repeating += distinct < len(example["dst"])
        single += distinct < 2
    return repeating, single


def map_contrastive(examples: Sequence[dict], source_sentence: Callable[[str], str],
                    target_sentence: Callable[[str], str]) -> List[dict]:
    """Apply per-sentence processing to every ``src`` and ``dst``; other fields are kept."""
    mapped = []
    for example in examples:
        example = dict(example)
        example["src"] = join_sentences([source_sentence(s) for s in split_sentences(example["src"], "src")])
        example["dst"] = [join_sentences([target_sentence(s) for s in split_sentences(candidate, "dst")])
                          for candidate in example["dst"]]
        mapped.append(example)
    return mapped


def write_contrastive(path: str, examples: Sequence[dict]) -> None:
    with atomic_write(path) as handle:
        json.dump(list(examples), handle, ensure_ascii=False)
        handle.write("\n")


def phenomenon_name(path: str) -> str:
    name = os.path.splitext(os.path.basename(path))[0]
    for suffix in ("_dev", "_test"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


def contrastive_files(paths: Sequence[str], languages: Optional[Tuple[str, str]] = None) -> List[str]:
    """Expand directories written by ``prepare consistency`` into the sets they list; stop when
    a directory's sets were prepared for other ``languages`` (source, target) than the model's."""
    files = []
    for path in paths:
        if os.path.isdir(path):
            manifest_path = os.path.join(path, "consistency.json")
            if not os.path.isfile(manifest_path):
                raise DataError(f"{manifest_path}: not found (is {path} written by `prepare consistency`?)")
            manifest = json.loads(read_text(manifest_path))
            prepared_for = (manifest.get("source_lang"), manifest.get("target_lang"))
            if languages and None not in (*prepared_for, *languages) and prepared_for != tuple(languages):
                raise DataError(f"{manifest_path}: these sets were prepared for {prepared_for[0]} -> "
                                f"{prepared_for[1]}, but the model translates {languages[0]} -> {languages[1]}")
            files += [os.path.join(path, name) for name in sorted(manifest["sets"])]
        else:
            files.append(path)
    return files
