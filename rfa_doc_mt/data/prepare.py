"""Prepare corpora for the ``doc_translation`` task.

    python -m rfa_doc_mt.data.prepare text --source-lang S --target-lang T --out DIR --train SRC TGT
        [--valid SRC TGT] [--test SRC TGT] [--{train,valid,test}-docids FILE] [--bpe-size 30000]
    python -m rfa_doc_mt.data.prepare iwslt15 --wit3-dir DIR --out DIR [--bpe-size 30000]
    python -m rfa_doc_mt.data.prepare opensubtitles --data-dir DIR --out DIR [--bpe-size 30000]
    python -m rfa_doc_mt.data.prepare consistency --json FILE [FILE ...] --prep DIR --out DIR
        [--documents DIR] [--context-sentences 3]
    python -m rfa_doc_mt.data.prepare synthetic --out DIR [--seed 1] [--{train,valid,test}-documents N]
        [--contrastive-pairs N]
    python -m rfa_doc_mt.data.prepare binarize --raw DIR --out DIR --source-lang S --target-lang T
    python -m rfa_doc_mt.data.prepare bible --out DIR [--source-module M --source-lang S]
        [--target-module M --target-lang T] [--sword-path DIR] [--books B1,B2] [--bpe-size 8000]

Steps shared by the corpora, all written into a hidden directory beside ``--out`` that is
renamed to ``--out`` only when every step succeeded (a failed run leaves nothing behind;
:mod:`.staging`):

1. documents → tokenized text ``raw/{split}.{lang}`` + ``raw/{split}.docs``, and the
   untokenized target reference ``{split}.ref.{tgt}`` (for BLEU) (:mod:`.processing`);
2. a joint sentencepiece BPE model (``spm.model``) learned on the training split of both
   sides and applied to every split (``bpe/{split}.{lang}``) (:mod:`.processing`);
3. ``fairseq-preprocess --joined-dictionary`` into ``--out``, with ``{split}.docs`` beside
   (:mod:`.binarize`);
4. ``prep.json``: languages, splits (documents, sentences), BPE size, tokenizers and
   truecasing, which decoding reads to undo the pre-processing (:mod:`.binarize`; read back by
   :mod:`.processing`).

``consistency`` processes contrastive sets like a prepared corpus (:mod:`.contrastive_sets`);
``bible`` reads two SWORD modules into documents first (:mod:`.bible`) and, for en-es, writes a
contrastive pronoun set from its test chapters into ``consistency/`` (:mod:`.bible_pronouns`).
This module holds the subcommands, the pipeline they share and the command line.
"""

import argparse
import glob
import os
import shlex
import shutil
import sys
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .bible import SPLIT_PERIOD as BIBLE_SPLIT_PERIOD
from .binarize import (
    PREP_FILE,
    PREP_FORMAT,
    SPLITS,
    binarize,
    binarize_raw,
    check_raw_splits,
    unprocessed_prep,
    write_prep,
    write_sentencepiece_dictionary,
)
from .contrastive_formats import DEFAULT_CONTEXT_SENTENCES
from .contrastive_sets import CONSISTENCY_MANIFEST, read_manifest, write_consistency_sets
from .io import DataError, Document, PrepareError, log, write_docs, write_lines
from .plain_text import DOCUMENT_MARK, check_parallel_text, read_documents
from .plain_text import FORMATS as DOCUMENT_FORMS
from .processing import apply_sentencepiece, corpus_fingerprint, tokenize_corpus, train_sentencepiece
from .staging import check_replaceable, staged_output
from .text import (
    FIRST_WORD_TRUECASING,
    JIEBA_LANGUAGES,
    TextDocument,
    check_language,
    default_tokenizer,
    load_prep,
    uses_truecasing,
)
from .voita import read_context_aware
from .wit3 import (
    DEV_SETS,
    TEST_SETS,
    describe_sets,
    find_train_tags,
    read_parallel_train_tags,
    read_wit3_sets,
    wit3_campaign,
)

DEFAULT_BPE_SIZE = 30000  # joint BPE size of Wu et al. 2022
# The Bible's joint BPE size (some 0.7M words a side in 28k training verses): the best validation
# s-BLEU of the sizes whose updates the experiment's budget affords (4k and 8k; 16k's and 27k's cost
# 1.5 and 2.2 times as much), by rfa_doc_mt.reproduce.bible_search (docs/reproduction.md)
BIBLE_BPE_SIZE = 8000
BIBLE_MODULES = {"source": ("engWEB2015eb", "en"), "target": ("spaRV1909eb", "es")}


# ---------------------------------------------------------------------------------------
# The steps of a parallel corpus


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
                            truecased: Optional[Sequence[str]] = None, extra: Optional[dict] = None,
                            finish: Optional[Callable[[str, dict], None]] = None) -> dict:
    """Steps 1-4 for documents already read and checked; returns prep.json's content.
    ``split_origins``: what each split holds, in words (recorded in prep.json); ``truecased``:
    the languages to truecase (default: :func:`uses_truecasing`); ``extra``: more prep.json fields;
    ``finish``: called with the staged corpus and prep.json's content once both are written (a
    corpus's own contrastive sets, processed like it), still inside the stage."""
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
        if finish is not None:
            finish(stage, prep)
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


def run_bible(args, command: str) -> None:
    from . import bible, bible_pronouns

    source_lang, target_lang = args.source_lang, args.target_lang
    check_language_pair(source_lang, target_lang)
    # everything that can be wrong with the command line stops before the modules are read
    check_replaceable(os.path.abspath(args.out), PREP_FILE, args.force)
    library = bible.SwordLibrary(args.sword_path)
    for module, lang, option in ((args.source_module, source_lang, "--source-lang"),
                                 (args.target_module, target_lang, "--target-lang")):
        bible.check_module_language(module, library.check(module), lang, option)
    books = None
    if args.books is not None:
        requested = [book for book in args.books.split(",") if book.strip()]
        if not requested:
            raise DataError("--books is empty")
        books = bible.resolve_books(requested, library.books(args.source_module) + library.books(args.target_module))
    cleaned = []
    for module in (args.source_module, args.target_module):
        log(f"reading {module} from {', '.join(library.folders)}" + (f" ({', '.join(books)})" if books else ""))
        cleaned.append(bible.clean_module(library.read(module, books)))
    source, target = cleaned
    alignment = bible.align_modules(source, target)
    if not alignment.chapters:
        raise DataError(f"no chapter of {args.source_module} and {args.target_module} is left to pair"
                        + (f" among --books {args.books}" if books else ""))
    record = bible.corpus_record(source, target, alignment, books, library.folders, args.held_out_every)
    chosen = bible.split_chapters(alignment.chapters, args.held_out_every)
    splits = {split: bible.chapter_documents(chapters) for split, chapters in chosen.items()}
    record["words"] = {split: {lang: sum(len(sentence.split()) for document in side for sentence in document.sentences)
                               for lang, side in zip((source_lang, target_lang), sides)}
                       for split, sides in splits.items()}
    valid_offset, test_offset = bible.split_offsets(args.held_out_every)
    origins = {"train": "the other chapters",
               "valid": f"every {args.held_out_every}th kept chapter from number {valid_offset}",
               "test": f"every {args.held_out_every}th kept chapter from number {test_offset}"}
    origins = {split: origins[split] for split in splits}

    # the contrastive pronoun set, from the held-out chapters' verses (valid and test: no model trains on
    # them; the test chapters alone gave 65 examples) as they are before any processing
    pronoun_sets = None
    skipped = bible_pronouns.skip_reason(source_lang, target_lang, chosen)
    if skipped is None:
        lexicon = bible_pronouns.SpanishLexicon(verse for chapters in chosen.values()
                                                for _, _, target_verses, _ in chapters for verse in target_verses)
        pronoun_sets = bible_pronouns.build_pronoun_sets(chosen.get("valid", []) + chosen["test"], lexicon)
        record["pronoun_sets"] = pronoun_sets.record()
        if not any(pronoun_sets.examples.values()):
            skipped = "no test verse passes the rules"
    if skipped is not None:
        record["pronoun_sets"] = dict(record.get("pronoun_sets", {}), skipped=skipped)

    def report() -> None:
        for line in bible.report_lines(record) + bible_pronouns.report_lines(record["pronoun_sets"]):
            log(line)
        print_counts("", splits, origins, "chapters")
        for split, words in record["words"].items():
            log(f"{split} words: " + ", ".join(f"{lang} {count}" for lang, count in words.items()))

    def write_pronoun_sets(stage: str, prep: dict) -> None:
        if skipped is not None:
            return
        paths = bible_pronouns.write_pronoun_sets(pronoun_sets, os.path.join(stage, "raw", "consistency"))
        os.makedirs(os.path.join(stage, "consistency"))
        write_consistency_sets(paths, stage, prep, os.path.join(stage, "consistency"), relative_paths=True,
                               languages=(source_lang, target_lang))

    report()
    bpe_size = bpe_size_for(splits["train" if "train" in splits else "valid"], args.bpe_size)
    tokenizers = {lang: default_tokenizer(lang) for lang in (source_lang, target_lang)}
    # first-word truecasing is undone exactly, so every language with Moses rules is truecased (as `text`)
    truecased = [lang for lang in (source_lang, target_lang) if tokenizers[lang] == "moses"]
    prepare_parallel_corpus("bible", splits, {split: [args.source_module, args.target_module] for split in splits},
                            args.out, source_lang, target_lang, tokenizers, bpe_size, args.workers, command,
                            force=args.force, split_origins=origins, truecased=truecased, extra={"bible": record},
                            finish=write_pronoun_sets)
    report()
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
                                          manifest_sets=kept_sets, documents=args.documents,
                                          context_sentences=args.context_sentences)
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
                      help="joint BPE vocabulary size (default 30000 as Wu et al. 2022; lowered, with a note, when "
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
    consistency.add_argument("--json", nargs="+", required=True,
                             help="contrastive sets as published, the format read from each file: Voita et al.'s "
                                  "JSON, ContraPro's contrapro.json (with --documents), Bawden et al.'s "
                                  "anaphora.json and lexical-choice.json")
    consistency.add_argument("--documents", help="ContraPro: the OpenSubtitles2018 documents folder its "
                                                 "setup_opensubs.sh writes (DIR/<year>/<document>.{en,de})")
    consistency.add_argument("--context-sentences", type=int, default=DEFAULT_CONTEXT_SENTENCES,
                             help="ContraPro: the document sentences before each example's sentence that it "
                                  f"carries as context (default {DEFAULT_CONTEXT_SENTENCES}, as Voita et al.'s "
                                  "examples; a model of L sentences reads the last L-1)")
    consistency.add_argument("--prep", required=True, help="a corpus directory written by this script")
    consistency.add_argument("--out", required=True,
                             help="output directory for the processed JSON sets; sets already there (prepared "
                                  "for the same corpus) are kept")
    consistency.add_argument("--source-lang", help="language of the sets' source side (default: ContraPro's en, "
                                                   "Bawden et al.'s en, else guessed from the script)")
    consistency.add_argument("--target-lang", help="language of the sets' target side (default: ContraPro's de, "
                                                   "Bawden et al.'s fr, else guessed from the script); with "
                                                   "--source-lang, the suffixes of ContraPro's document files")
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

    bible_parser = commands.add_parser(
        "bible", help="two SWORD Bible modules: a chapter a document, a verse a sentence",
        description="Two SWORD Bible modules (pysword reads them) as a document-level corpus: a chapter a document, "
                    "a verse a sentence, verses paired by reference; markup, notes and editorial headings taken out, "
                    "drop capitals normalized; what cannot be paired is left out and counted by reason. Whole "
                    "chapters split into train/valid/test; then tokenized, truecased, joint sentencepiece BPE and "
                    "binarized as `text`.")
    bible_parser.add_argument("--out", required=True, help="output directory (binarized corpus)")
    for side, (module, lang) in BIBLE_MODULES.items():
        bible_parser.add_argument(f"--{side}-module", default=module,
                                  help=f"SWORD module of the {side} side (default {module})")
        bible_parser.add_argument(f"--{side}-lang", default=lang,
                                  help=f"language code of the {side} module (default {lang})")
    bible_parser.add_argument("--sword-path", help="folder holding mods.d/ and modules/ of the SWORD modules "
                                                   "(default: /usr/share/sword, /usr/local/share/sword and ~/.sword)")
    bible_parser.add_argument("--books", help="comma-separated books to prepare, by OSIS name (Gen, Ruth, 3John, Rev) "
                                              "or their English name in pysword (default: every book)")
    bible_parser.add_argument("--held-out-every", type=int, default=BIBLE_SPLIT_PERIOD, metavar="N",
                              help="a valid and a test chapter in every N kept chapters, whole (default %(default)s: "
                                   "2.5%% each; a few books need fewer, e.g. 4)")
    bible_parser.add_argument("--bpe-size", type=int, default=BIBLE_BPE_SIZE,
                              help=f"joint BPE vocabulary size (default {BIBLE_BPE_SIZE}, chosen on validation "
                                   f"s-BLEU; lowered when the training text is small)")
    add_workers(bible_parser)
    add_force(bible_parser)

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
    "bible": run_bible,
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
