"""Contrastive sets in the formats their authors publish, converted to the project's one
contrastive format (Voita et al.'s JSON examples, :mod:`.voita`) for ``prepare consistency`` and
the one scorer (:mod:`rfa_doc_mt.scoring.consistency`).

* **Voita et al. 2019** (en-ru): a JSON list of ``{"src", "dst", "true_ind", "ctx_dist"}``,
  taken as it is.
* **ContraPro** (Müller et al. 2018, en-de; github.com/ZurichNLP/ContraPro): ``contrapro.json``,
  a JSON list of entries ``{"document id": "1921_12806_3712161.de", "segment id": 70,
  "src segment", "ref segment", "src pronoun", "ref pronoun", "ante distance", "intrasegmental",
  "errors": [{"contrastive": ...}, ...], ...}``. The context is not in the file: it comes from
  the OpenSubtitles2018 documents that ContraPro's ``setup_opensubs.sh`` writes, one pair of
  files per document, ``DIR/<year>/<document>.{en,de}``, one sentence a line; ``segment id``
  counts their lines from 1. Each example carries the ``context_sentences`` lines before its
  sentence (fewer at the start of a document), as Voita et al.'s examples carry three; a model of
  L sentences reads the last L-1 of them. ``ctx_dist`` is the antecedent distance (0: in the
  same sentence), which may lie further back than the context carried.
* **Bawden et al. 2018** (en-fr; github.com/rbawden/discourse-mt-test-sets): a JSON object of
  numbered blocks. Coreference (``anaphora.json``): ``{"src": [previous, current], "trg":
  [{"correct" or "semi-correct": [previous, current], "incorrect": [previous, current],
  "type": "m.sg"}, ...]}``; coherence/cohesion (``lexical-choice.json``): ``{"type": "repet",
  "examples": [{"src": [...], "trg": {"correct": [...], "incorrect": [...]}}, ...]}``. Each
  correct/incorrect pair is one example with its previous sentence as context (``ctx_dist`` 1),
  grouped by its block (the unit the sets are balanced over).

Converted examples keep what the authors' evaluation scripts report by in ``categories``
({axis: value}): ContraPro the reference pronoun, the antecedent distance in the paper's buckets
(0, 1, 2, 3, >3) and ``intrasegmental``; Bawden et al. the block's or pair's ``type`` and, for
coreference, whether the right translation is ``correct`` or ``semi-correct``.
"""

import json
import os
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import List, Optional, Tuple

from .io import DataError, log, text_lines
from .voita import SENTENCE_SEPARATOR, join_sentences, load_json, validate_contrastive

FORMATS = ("voita", "contrapro", "bawden")
FORMAT_NAMES = {"voita": "Voita et al. 2019", "contrapro": "ContraPro", "bawden": "Bawden et al. 2018"}
# the languages each set is published in (the file suffixes of ContraPro's documents)
PUBLISHED_LANGUAGES = {"contrapro": ("en", "de"), "bawden": ("en", "fr")}
DEFAULT_CONTEXT_SENTENCES = 3  # as Voita et al.'s examples: three context sentences and the current one
CONTRAPRO_DISTANCE_BUCKETS = ("0", "1", "2", "3", ">3")  # Müller et al. 2018's table by antecedent distance
# ContraPro's own extraction compares a document's line with the entry's sentence without white
# space and quotes (their forms differ between the two in places)
_IGNORED_IN_COMPARISON = re.compile(r"[\s\"`´']")


@dataclass
class ContrastiveSet:
    """A contrastive set read from ``path``: its examples in the project's format, the format it
    was published in, and its (source, target) languages where the format fixes them."""
    path: str
    format: str
    examples: List[dict]
    languages: Optional[Tuple[str, str]] = None


def detect_format(path: str, data) -> str:
    """``voita``, ``contrapro`` or ``bawden``, from the shape of the parsed JSON ``data``."""
    if isinstance(data, list) and data and isinstance(data[0], dict) and "document id" in data[0]:
        return "contrapro"
    if isinstance(data, list):
        return "voita"
    if isinstance(data, dict):
        return "bawden"
    raise DataError(f"{path}: a {type(data).__name__}, not a contrastive set: expected Voita et al.'s list of "
                    "examples, ContraPro's list of entries or Bawden et al.'s object of numbered blocks")


def read_contrastive_set(path: str, documents: Optional[str] = None,
                         context_sentences: int = DEFAULT_CONTEXT_SENTENCES,
                         languages: Optional[Tuple[str, str]] = None) -> ContrastiveSet:
    """Read a contrastive set in any of :data:`FORMATS` and return its examples in the project's
    format, validated. ``documents``: the OpenSubtitles2018 documents folder a ContraPro set
    takes its context from; ``languages``: (source, target), the suffixes of its document files
    (default: the set's published languages)."""
    data = load_json(path)
    kind = detect_format(path, data)
    if kind == "voita":
        validate_contrastive(path, data)
        return ContrastiveSet(path, kind, data)
    if kind == "contrapro":
        if documents is None:
            raise DataError(f"{path}: a ContraPro set, whose context sentences come from the OpenSubtitles2018 "
                            "documents: pass --documents DIR (the documents/ folder of ContraPro's "
                            "setup_opensubs.sh)")
        languages = tuple(languages or PUBLISHED_LANGUAGES["contrapro"])
        examples = convert_contrapro(path, data, documents, languages, context_sentences)
    else:
        languages = tuple(languages or PUBLISHED_LANGUAGES["bawden"])
        examples = convert_bawden(path, data)
    # what a converter wrote is what the scorer reads: the same checks
    validate_contrastive(path, examples)
    return ContrastiveSet(path, kind, examples, languages)


def checked_sentence(text, where: str) -> str:
    """A sentence of a set or a document: a non-empty string, without the separator token."""
    if not isinstance(text, str):
        raise DataError(f"{where}: expected a sentence (string), got {type(text).__name__}")
    if not text.strip():
        raise DataError(f"{where}: empty sentence")
    if SENTENCE_SEPARATOR in text.split():
        raise DataError(f"{where}: contains the token {SENTENCE_SEPARATOR!r}, which separates sentences here")
    return " ".join(text.split())


# ---- ContraPro -----------------------------------------------------------------------------------


def distance_bucket(distance: int) -> str:
    """0, 1, 2, 3 or >3 (Müller et al. 2018's buckets) of an antecedent distance."""
    return CONTRAPRO_DISTANCE_BUCKETS[min(distance, len(CONTRAPRO_DISTANCE_BUCKETS) - 1)]


def document_paths(documents: str, document_id: str, languages: Tuple[str, str]) -> List[Tuple[str, str]]:
    """Where the (source, target) files of ``document_id`` may be: ``DIR/<year>/<name>.<lang>``
    (setup_opensubs.sh's layout; the id is the name of the target file) or ``DIR/<name>.<lang>``."""
    name = document_id[: -len(languages[1]) - 1] if document_id.endswith("." + languages[1]) else document_id
    year = name.split("_")[0]
    return [tuple(os.path.join(folder, f"{name}.{lang}") for lang in languages)
            for folder in (os.path.join(documents, year), documents)]


class DocumentReader:
    """The sentences of OpenSubtitles2018 documents; the last ``keep`` documents read are kept
    (a film's entries mostly follow each other; all of them would hold the whole corpus)."""

    def __init__(self, documents: str, languages: Tuple[str, str], keep: int = 256):
        if not os.path.isdir(documents):
            raise DataError(f"{documents}: documents folder not found (ContraPro's setup_opensubs.sh writes it)")
        self.documents, self.languages, self.keep = documents, languages, keep
        self.read: "OrderedDict[str, Tuple[Tuple[str, str], List[str], List[str]]]" = OrderedDict()
        self.seen = set()

    def __call__(self, document_id: str, where: str):
        """((source path, target path), source lines, target lines) of a document."""
        if document_id in self.read:
            self.read.move_to_end(document_id)
        else:
            candidates = document_paths(self.documents, document_id, self.languages)
            paths = next((pair for pair in candidates if all(os.path.isfile(p) for p in pair)), None)
            if paths is None:
                tried = " or ".join(f"{a} + {b}" for a, b in candidates)
                raise DataError(f"{where}: no document files for document id {document_id!r} (looked for {tried})")
            sides = [[line for _, line in text_lines(path)] for path in paths]
            if len(sides[0]) != len(sides[1]):
                raise DataError(f"{where}: {paths[0]} has {len(sides[0])} lines but {paths[1]} has {len(sides[1])}; "
                                "a document's two files are parallel line by line")
            self.read[document_id] = (paths, sides[0], sides[1])
            self.seen.add(document_id)
            if len(self.read) > self.keep:
                self.read.popitem(last=False)
        return self.read[document_id]


_KIND_NAMES = {int: "a whole number", str: "a string", list: "a list"}


def contrapro_field(entry: dict, key: str, kind, where: str):
    if key not in entry:
        raise DataError(f"{where}: missing {key!r}")
    value = entry[key]
    # bool is an int subclass; true/false is not a number here
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise DataError(f"{where}: {key!r} must be {_KIND_NAMES[kind]}, got {value!r}")
    return value


def convert_contrapro(path: str, entries, documents: str, languages: Tuple[str, str],
                      context_sentences: int) -> List[dict]:
    """ContraPro entries -> examples: the ``context_sentences`` document lines before each
    sentence on both sides, then the sentence; candidates the reference and each contrastive."""
    if context_sentences < 0:
        raise DataError(f"{path}: --context-sentences must be 0 or more, not {context_sentences}")
    read_document = DocumentReader(documents, languages)
    examples = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise DataError(f"{path}: entry {index} (0-based): expected an object, got {type(entry).__name__}")
        where = f"{path}: entry {index} (0-based)"
        document_id = contrapro_field(entry, "document id", str, where)
        segment = contrapro_field(entry, "segment id", int, where)
        where = f"{where}, document id {document_id}, segment id {segment}"
        source = checked_sentence(contrapro_field(entry, "src segment", str, where), f"{where}: 'src segment'")
        reference = checked_sentence(contrapro_field(entry, "ref segment", str, where), f"{where}: 'ref segment'")
        pronoun = contrapro_field(entry, "ref pronoun", str, where)
        distance = contrapro_field(entry, "ante distance", int, where)
        if distance < 0:
            raise DataError(f"{where}: 'ante distance' {distance} is negative")
        errors = contrapro_field(entry, "errors", list, where)
        if not errors:
            raise DataError(f"{where}: 'errors' lists no contrastive variant")
        contrastive = []
        for number, error in enumerate(errors):
            if not isinstance(error, dict) or "contrastive" not in error:
                raise DataError(f"{where}: 'errors'[{number}] has no 'contrastive' translation")
            contrastive.append(checked_sentence(error["contrastive"], f"{where}: 'errors'[{number}]"))

        (source_path, target_path), source_lines, target_lines = read_document(document_id, where)
        if not 1 <= segment <= len(source_lines):
            raise DataError(f"{where}: no such line in {source_path} ({len(source_lines)} lines; segment ids "
                            "count from 1)")
        line = source_lines[segment - 1]
        if _IGNORED_IN_COMPARISON.sub("", line) != _IGNORED_IN_COMPARISON.sub("", source):
            raise DataError(f"{where}: {source_path}:{segment} is {line!r}, not the entry's 'src segment' "
                            f"{source!r} (is this the document folder of ContraPro's setup_opensubs.sh?)")
        first = max(0, segment - 1 - context_sentences)
        context = [[checked_sentence(lines[k], f"{where}: context sentence {file}:{k + 1}")
                    for k in range(first, segment - 1)]
                   for lines, file in ((source_lines, source_path), (target_lines, target_path))]
        intrasegmental = entry.get("intrasegmental")
        examples.append({
            "src": join_sentences(context[0] + [source]),
            "dst": [join_sentences(context[1] + [candidate]) for candidate in [reference] + contrastive],
            "true_ind": 0,
            "ctx_dist": distance,
            "categories": {"pronoun": pronoun.lower(), "ante distance": distance_bucket(distance),
                           "intrasegmental": json.dumps(intrasegmental)},
        })
        if (index + 1) % 5000 == 0:
            log(f"{os.path.basename(path)}: {index + 1} of {len(entries)} entries read")
    log(f"{os.path.basename(path)}: {len(examples)} ContraPro entries with up to {context_sentences} context "
        f"sentences from {len(read_document.seen)} documents in {documents}")
    return examples


# ---- Bawden et al. 2018 --------------------------------------------------------------------------


def sentence_pair(value, where: str) -> List[str]:
    """[previous sentence, current sentence] of a Bawden et al. example."""
    if not isinstance(value, list) or len(value) != 2:
        raise DataError(f"{where}: expected [previous sentence, current sentence], got {value!r}")
    return [checked_sentence(text, f"{where}[{k}]") for k, text in enumerate(value)]


def block_numbers(path: str, blocks: dict) -> List[str]:
    """The block keys in the authors' order (numerically, as their evaluate.py reads them)."""
    if not blocks:
        raise DataError(f"{path}: no blocks")
    return sorted(blocks, key=lambda key: (0, int(key), key) if key.isdigit() else (1, 0, key))


def bawden_example(source: List[str], right: List[str], wrong: List[str], block: str, categories: dict) -> dict:
    return {"src": join_sentences(source), "dst": [join_sentences(right), join_sentences(wrong)], "true_ind": 0,
            "ctx_dist": 1, "group": block, "categories": categories}


def convert_bawden(path: str, blocks) -> List[dict]:
    """Bawden et al.'s blocks -> one example per correct/incorrect pair."""
    examples = []
    kind = None
    for block in block_numbers(path, blocks):
        where = f"{path}: block {block!r}"
        content = blocks[block]
        if not isinstance(content, dict):
            raise DataError(f"{where}: expected an object, got {type(content).__name__}")
        shape = "coherence/cohesion" if "examples" in content else "coreference" if "trg" in content else None
        if shape is None:
            raise DataError(f"{where}: neither 'trg' (a coreference block) nor 'examples' (a coherence/cohesion "
                            "block)")
        if kind not in (None, shape):
            raise DataError(f"{where}: a {shape} block in a file of {kind} blocks")
        kind = shape
        if shape == "coreference":
            source = sentence_pair(content.get("src"), f"{where}: 'src'")
            pairs = content["trg"]
            if not isinstance(pairs, list) or not pairs:
                raise DataError(f"{where}: 'trg' must be a non-empty list of correct/incorrect pairs")
            for number, pair in enumerate(pairs):
                at = f"{where}: 'trg'[{number}]"
                right_keys = [key for key in ("correct", "semi-correct") if isinstance(pair, dict) and key in pair]
                if len(right_keys) != 1 or "incorrect" not in pair:
                    raise DataError(f"{at}: expected 'correct' or 'semi-correct' (one of them) and 'incorrect'")
                categories = {"variant": right_keys[0]}
                if "type" in pair:
                    categories["type"] = str(pair["type"])
                examples.append(bawden_example(source, sentence_pair(pair[right_keys[0]], f"{at}: {right_keys[0]!r}"),
                                               sentence_pair(pair["incorrect"], f"{at}: 'incorrect'"), block,
                                               categories))
        else:  # coherence/cohesion
            pairs = content["examples"]
            if not isinstance(pairs, list) or not pairs:
                raise DataError(f"{where}: 'examples' must be a non-empty list")
            categories = {"type": str(content["type"])} if "type" in content else {}
            for number, example in enumerate(pairs):
                at = f"{where}: 'examples'[{number}]"
                target = example.get("trg") if isinstance(example, dict) else None
                if not isinstance(target, dict) or not {"correct", "incorrect"} <= set(target):
                    raise DataError(f"{at}: expected 'trg' with 'correct' and 'incorrect'")
                examples.append(bawden_example(sentence_pair(example.get("src"), f"{at}: 'src'"),
                                               sentence_pair(target["correct"], f"{at}: 'correct'"),
                                               sentence_pair(target["incorrect"], f"{at}: 'incorrect'"), block,
                                               dict(categories)))
    log(f"{os.path.basename(path)}: {len(examples)} {kind} pairs of Bawden et al. 2018 in {len(blocks)} blocks")
    return examples
