"""Contrastive sets processed like a prepared corpus: ``python -m rfa_doc_mt.data.prepare
consistency`` and the synthetic corpus's own sets.

Each set (Voita et al.'s JSON, or ContraPro's or Bawden et al.'s converted to it:
:mod:`.contrastive_formats`) is checked (its languages against the corpus's) and written with the
corpus's pre-processing (:func:`rfa_doc_mt.data.processing.corpus_processors`), or as it is when
the corpus has none (a Voita et al. file copied byte for byte), beside a ``consistency.json``
manifest that names the corpus (and a fingerprint of its processing) it was prepared for. The
fairseq dataset that reads them is :mod:`rfa_doc_mt.data.contrastive`; the scorer,
:mod:`rfa_doc_mt.scoring.consistency`.
"""

import json
import os
import shutil
from typing import Dict, Optional, Sequence, Tuple

from .contrastive_formats import DEFAULT_CONTEXT_SENTENCES, FORMAT_NAMES, read_contrastive_set
from .io import DataError, atomic_write, log, read_text
from .processing import corpus_fingerprint, corpus_processors, needs_processing
from .text import detect_script, language_script
from .voita import count_repeats, map_contrastive, write_contrastive

CONSISTENCY_MANIFEST = "consistency.json"


def read_manifest(directory: str) -> dict:
    path = os.path.join(directory, CONSISTENCY_MANIFEST)
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as error:
        raise DataError(f"{path}:{error.lineno}: invalid JSON: {error.msg}")


def check_set_languages(path: str, examples: Sequence[dict], prep_dir: str, prep: dict,
                        languages: Optional[Tuple[str, str]],
                        languages_from: str = "--source-lang/--target-lang") -> None:
    """Stop when a contrastive set's languages (``languages`` when given, which ``languages_from``
    says where from, else the writing systems of its ``src`` and ``dst`` text) are not the corpus's."""
    corpus = (prep["source_lang"], prep["target_lang"])
    where = f"the corpus {prep_dir} translates {corpus[0]} -> {corpus[1]}"
    if languages:
        if tuple(languages) != corpus:
            raise DataError(f"{path}: the sets are {languages[0]} -> {languages[1]} ({languages_from}), "
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
                           manifest_sets: Optional[Dict[str, dict]] = None, documents: Optional[str] = None,
                           context_sentences: int = DEFAULT_CONTEXT_SENTENCES) -> Dict[str, dict]:
    """Validate contrastive sets and write them processed like the corpus (as they are when no
    processing applies) into ``out_dir`` with a ``consistency.json`` manifest.

    ``relative_paths``: the manifest names files relative to ``out_dir`` (for sets inside a
    corpus being staged, whose temporary name disappears at the end). ``languages``: the sets'
    (source, target) languages, checked against the corpus's (else the languages a format is
    published in, else guessed from the script). ``manifest_sets``: entries of sets already in
    ``out_dir`` that the manifest keeps. ``documents``, ``context_sentences``: where a ContraPro
    set's context comes from and how many sentences of it each example carries."""

    def recorded(path: str) -> str:
        return os.path.relpath(path, out_dir) if relative_paths else os.path.abspath(path)

    names = {}
    for path in json_paths:
        name = os.path.basename(path)
        if name in names:
            raise DataError(f"{path}: same file name as {names[name]}; outputs would collide")
        names[name] = path
    # every set read and checked before anything is written
    sets = {path: read_contrastive_set(path, documents=documents, context_sentences=context_sentences,
                                       languages=languages) for path in json_paths}
    examples = {path: sets[path].examples for path in json_paths}
    for path in json_paths:
        if languages or not sets[path].languages:
            check_set_languages(path, examples[path], prep_dir, prep, languages)
        else:
            check_set_languages(path, examples[path], prep_dir, prep, sets[path].languages,
                                f"{FORMAT_NAMES[sets[path].format]}'s languages; --source-lang/--target-lang to say "
                                f"otherwise")
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
        elif sets[path].format != "voita":
            log(f"converted {path if not relative_paths else name} ({len(examples[path])} examples); "
                f"written as they are (no processing for this corpus)")
            written = examples[path]
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
        manifest[name] = {"examples": len(written), "from": recorded(path), "format": sets[path].format,
                          "candidates": sum(len(example["dst"]) for example in written),
                          "repeated_candidates": repeating, "single_candidate": single}
        if sets[path].format == "contrapro":
            manifest[name].update(documents=os.path.abspath(documents), context_sentences=context_sentences)
    with atomic_write(os.path.join(out_dir, CONSISTENCY_MANIFEST)) as handle:
        json.dump({"prep": recorded(prep_dir), "source_lang": prep["source_lang"], "target_lang": prep["target_lang"],
                   "corpus_fingerprint": corpus_fingerprint(prep_dir, prep), "processed": processing,
                   "sets": dict(sorted(manifest.items()))},
                  handle, indent=2, ensure_ascii=False)
        handle.write("\n")
    return manifest
