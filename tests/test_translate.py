"""Raw text in, translations out: ``prepare text`` on messy files, and scripts/translate.sh
against scripts/decode.sh + collect on the same documents."""

import contextlib
import io
import logging
import os
import random
import subprocess
import sys

import pytest

from rfa_doc_mt.data import prepare
from rfa_doc_mt.data.io import DataError, read_docs, read_lines
from rfa_doc_mt.data.plain_text import read_documents
from rfa_doc_mt.data.processing import corpus_postprocessor, corpus_preprocessor
from rfa_doc_mt.data.text import load_prep

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.path.isfile(os.path.join(BIN, "fairseq-train")),
                                 reason="fairseq is not installed")]

NOUNS = [("house", "Haus", "das"), ("dog", "Hund", "der"), ("tree", "Baum", "der"), ("city", "Stadt", "die"),
         ("car", "Auto", "das"), ("river", "Fluss", "der"), ("book", "Buch", "das"), ("street", "Straße", "die")]
VERBS = [("sees", "sieht"), ("likes", "mag"), ("finds", "findet"), ("needs", "braucht")]
ADJECTIVES = [("big", "große"), ("old", "alte"), ("red", "rote")]


def sentence_pair(rng):
    subject, verb, obj = rng.choice(NOUNS), rng.choice(VERBS), rng.choice(NOUNS)
    adjective = rng.choice(ADJECTIVES)
    english = f"The {adjective[0]} {subject[0]} {verb[0]} the {obj[0]}"
    german = f"{subject[2].capitalize()} {adjective[1]} {subject[1]} {verb[1]} {obj[2]} {obj[1]}"
    ending = rng.choice([".", "!", ", doesn't it?"])
    return english + ending, german + {".": ".", "!": "!", ", doesn't it?": ", nicht wahr?"}[ending]


def documents(rng, count):
    return [[sentence_pair(rng) for _ in range(rng.randint(2, 5))] for _ in range(count)]


def marked(docs, side, line_end="\n", mark="<d>"):
    return "".join(f"{mark}{line_end}" + "".join(f"{pair[side]}{line_end}" for pair in doc) for doc in docs)


def run(*command, **kwargs):
    # one torch thread: tiny models decode faster so, and the machine may be busy
    result = subprocess.run([str(part) for part in command], capture_output=True, text=True,
                            env=dict(os.environ, OMP_NUM_THREADS="1"), **kwargs)
    assert result.returncode == 0, f"{command[0]} failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def text_corpus(tmp_path_factory):
    """A tiny en-de corpus in Maruf et al.'s form, the test source as messy as real files
    (CRLF, byte-order mark, spaces at the ends and inside lines, a <d> with trailing spaces, no
    final newline), prepared by ``prepare text`` (what scripts/prepare_text.sh runs)."""
    raw = tmp_path_factory.mktemp("raw")
    rng = random.Random(5)
    splits = {"train": documents(rng, 60), "valid": documents(rng, 4), "test": documents(rng, 5)}
    for split, docs in splits.items():
        for side, lang in enumerate(("en", "de")):
            (raw / f"{split}.{lang}").write_text(marked(docs, side), encoding="utf-8")
    messy_en = "\ufeff" + marked(splits["test"], 0, "\r\n").replace("<d>\r\n", "<d>  \r\n", 1)
    messy_en = messy_en.replace("The big", "  The   big", 1).rstrip("\r\n")
    (raw / "test.en").write_bytes(messy_en.encode("utf-8"))
    out = tmp_path_factory.mktemp("corpus") / "en-de"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):  # in this process: fairseq is imported once
        assert prepare.main(["text", "--source-lang", "en", "--target-lang", "de", "--out", str(out),
                             "--train", str(raw / "train.en"), str(raw / "train.de"), "--valid", str(raw / "valid.en"),
                             str(raw / "valid.de"), "--test", str(raw / "test.en"), str(raw / "test.de"),
                             "--bpe-size", "120", "--workers", "1"]) == 0
    return {"raw": raw, "data": out, "splits": splits, "log": printed.getvalue()}


def test_prepare_text_keeps_counts_and_references(text_corpus):
    data, splits = text_corpus["data"], text_corpus["splits"]
    assert "note: the training text is too small for a BPE vocabulary of 120" in text_corpus["log"] or \
        "learning joint BPE (sentencepiece, size 120)" in text_corpus["log"]
    for split, docs in splits.items():
        assert [d.num_sentences for d in read_docs(str(data / f"{split}.docs"))] == [len(doc) for doc in docs]
        # the reference is the target text as given, whatever the source's line endings
        assert read_lines(str(data / f"{split}.ref.de")) == [pair[1] for doc in docs for pair in doc]
    prep = load_prep(str(data))
    assert prep["corpus"] == "text" and prep["truecase_models"].keys() == {"en", "de"}
    assert prep["boundaries"]["test"] == {"en": "marked", "de": "marked"}
    # the messy source was tokenized like a clean one: same tokens as the clean text gives
    tokenized = read_lines(str(data / "raw" / "test.en"))
    assert tokenized[0].split() == tokenized[0].split(" ") and "  " not in "\n".join(tokenized)
    # translation's pre-processing of a raw sentence (translate.py) is the one the corpus was prepared
    # with (tokenized, first word truecased, sentencepiece pieces), and its post-processing, the
    # one scoring uses, gives the text back
    preprocess = corpus_preprocessor(str(data), prep, "en")
    pieces = [preprocess(pair[0]) for doc in splits["test"] for pair in doc]
    assert pieces == read_lines(str(data / "bpe" / "test.en")) and pieces[0].startswith("▁the ")
    postprocess = corpus_postprocessor(str(data), "en")
    assert [postprocess(line) for line in pieces] == [pair[0] for doc in splits["test"] for pair in doc]


def test_bad_parallel_text_stops_with_file_and_line_and_writes_nothing(text_corpus, tmp_path, capsys):
    raw = text_corpus["raw"]
    bad = tmp_path / "bad.de"
    lines = (raw / "valid.de").read_text(encoding="utf-8").splitlines()
    lines[3] = "<d>"  # a <d> on the target side only
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    assert prepare.main(["text", "--source-lang", "en", "--target-lang", "de", "--out", str(out),
                         "--valid", str(raw / "valid.en"), str(bad)]) == 1
    message = capsys.readouterr().err
    assert "a <d> line on one side only" in message and "bad.de:4" in message, message
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]


TINY_CONFIG = """TASK_ARGS="--context-size 1"
MODEL_ARGS="--arch doc_transformer_tiny --share-all-embeddings"
TRAIN_ARGS="--optimizer adam --lr 2e-3 --max-tokens 1500 --max-update 4 --criterion label_smoothed_cross_entropy
  --label-smoothing 0.1 --no-epoch-checkpoints --num-workers 0 --seed 2"
"""


@pytest.fixture(scope="module")
def trained(text_corpus, tmp_path_factory):
    """A tiny L=2 model trained 4 updates on the text corpus, and its test split decoded by decode.sh."""
    work = tmp_path_factory.mktemp("run")
    config = work / "tiny.sh"
    config.write_text(TINY_CONFIG)
    run(os.path.join(ROOT, "scripts", "train.sh"), config, text_corpus["data"], work / "model")
    checkpoint = work / "model" / "checkpoint_best.pt"
    run(os.path.join(ROOT, "scripts", "decode.sh"), config, text_corpus["data"], checkpoint, work / "test",
        "--batch-size", "8")
    return {"checkpoint": checkpoint, "hyp": read_lines(str(work / "test.hyp")), "work": work}


def test_translate_gives_decodes_hypotheses_in_the_inputs_form(text_corpus, trained, tmp_path):
    """The messy raw test source, translated: exactly decode.sh's hypotheses, one line per input
    sentence, a <d> line before each document as in the input."""
    output = tmp_path / "test.de"
    result = run(os.path.join(ROOT, "scripts", "translate.sh"), "--checkpoint", trained["checkpoint"],
                 "--data", text_corpus["data"], "--input", text_corpus["raw"] / "test.en", "--output", output,
                 "--batch-size", "8")
    assert f"translate: {len(text_corpus['splits']['test'])} documents" in result.stderr
    assert "sentences/s" in result.stderr and "INFO" not in result.stderr
    written = read_documents(str(output))
    assert written.form == "marked"
    assert [len(d.sentences) for d in written.documents] == [len(doc) for doc in text_corpus["splits"]["test"]]
    assert output.read_text(encoding="utf-8").count("\n") == sum(len(d) + 1 for d in text_corpus["splits"]["test"])
    assert [s for d in written.documents for s in d.sentences] == trained["hyp"]


def test_translate_reads_stdin_and_document_ids(text_corpus, trained, tmp_path, monkeypatch, capsys, one_thread):
    """Empty lines between documents on standard input, and a document-id file: the same
    translations, each in its own form."""
    from rfa_doc_mt.generation import translate

    docs = text_corpus["splits"]["test"]
    blank = "\n\n".join("\n".join(pair[0] for pair in doc) for doc in docs) + "\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(blank.encode("utf-8"))))
    common = ["--checkpoint", str(trained["checkpoint"]), "--data", str(text_corpus["data"]), "--batch-size", "8"]
    assert translate.main(common + ["--quiet"]) == 0
    printed = capsys.readouterr()
    bounds = [sum(map(len, docs[:k])) for k in range(len(docs) + 1)]
    by_document = ["\n".join(trained["hyp"][bounds[k]:bounds[k + 1]]) for k in range(len(docs))]
    assert printed.out == "\n\n".join(by_document) + "\n"
    assert printed.err == ""
    (tmp_path / "in.en").write_text("".join(pair[0] + "\n" for doc in docs for pair in doc))
    (tmp_path / "in.docids").write_text("".join(f"talk{k}\n" for k, doc in enumerate(docs) for _ in doc))
    assert translate.main(common + ["--input", str(tmp_path / "in.en"), "--docids", str(tmp_path / "in.docids"),
                                    "--output", str(tmp_path / "out.de")]) == 0
    assert read_lines(str(tmp_path / "out.de")) == trained["hyp"]
    assert f"translate: {len(docs)} documents, {bounds[-1]} sentences (docids boundaries)" in capsys.readouterr().err
    # fairseq's own logging is as it was, for whatever runs next in this process
    assert logging.getLogger("fairseq").level == logging.NOTSET


def test_translate_refuses_bad_input_and_writes_nothing(text_corpus, trained, tmp_path, one_thread):
    from rfa_doc_mt.generation import translate

    bad = tmp_path / "bad.en"
    bad.write_bytes(b"<d>\nThe dog sees the tree.\n<d>\n<d>\nThe car.\n")
    output = tmp_path / "out.de"
    with pytest.raises(DataError, match=f"{bad}:3: empty document"):
        translate.main(["--checkpoint", str(trained["checkpoint"]), "--data", str(text_corpus["data"]),
                        "--input", str(bad), "--output", str(output)])
    assert not output.exists()
    with pytest.raises(DataError, match="checkpoint not found"):
        translate.main(["--checkpoint", str(tmp_path / "none.pt"), "--data", str(text_corpus["data"]),
                        "--input", str(text_corpus["raw"] / "test.en")])


def test_long_sentences_are_translated_without_context_or_in_parts(text_corpus, trained, capsys, one_thread):
    """Positions shrunk to 12: a window over them loses context (sentences 1 and 2: 11 and 7
    tokens), a sentence over them is cut; every sentence still gets a translation, and the
    warnings name document and sentence."""
    from rfa_doc_mt.data.text import TextDocument
    from rfa_doc_mt.generation.translate import Translator

    translator = Translator(str(trained["checkpoint"]), str(text_corpus["data"]), batch_size=8, cpu=True)
    translator.max_positions = (12, 12)
    document = TextDocument("talk", ["The dog sees the tree.", "The red car.",
                                     "The big house likes the river, the street, the city and the old dog!"])
    translations = translator.translate([document])
    err = capsys.readouterr().err
    assert len(translations) == 1 and len(translations[0]) == 3 and all(translations[0])
    assert err.splitlines() == [
        "warning: document 'talk' (document 1), sentence 3 is longer than the model's 12 source positions (28 "
        "tokens): translated in 3 parts, each without context, joined",
        "warning: document 'talk' (document 1), sentence 2: translated with 1 context sentence fewer (its window is "
        "over the model's 12 source positions)"]


def test_encoding_is_fairseq_preprocess_binarization(text_corpus, trained, one_thread):
    """The raw test source through the corpus's processing and dictionary: the binarized test split."""
    from fairseq.data import data_utils

    from rfa_doc_mt.generation.translate import Translator

    translator = Translator(str(trained["checkpoint"]), str(text_corpus["data"]), cpu=True)
    units = translator.encode(read_documents(str(text_corpus["raw"] / "test.en")).documents)
    binarized = data_utils.load_indexed_dataset(str(text_corpus["data"] / "test.en-de.en"), translator.task.src_dict)
    assert len(units) == len(binarized)
    assert all(unit.tokens.tolist() == binarized[k].tolist() for k, unit in enumerate(units))
    assert not any(translator.task.src_dict.unk() in unit.tokens.tolist() for unit in units)


@pytest.mark.parametrize("script, shown", [("translate.sh", "--checkpoint CKPT"),
                                           ("prepare_text.sh", "--train SRC TGT")])
def test_scripts_answer_help(script, shown):
    result = run(os.path.join(ROOT, "scripts", script), "--help")
    assert shown in result.stdout
