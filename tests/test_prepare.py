"""Data preparation: readers, pre/post-processing, the prepare CLI and its refusals."""

import contextlib
import io
import json
import os
import shutil
import sys

import pytest
import sacrebleu

from rfa_doc_mt.data import prepare, processing, staging
from rfa_doc_mt.data.io import DataError, read_docs, read_lines
from rfa_doc_mt.data.text import (
    KNOWN_LANGUAGES,
    Postprocessor,
    Preprocessor,
    SentencePieceEncoder,
    train_truecaser,
)
from rfa_doc_mt.data.voita import (
    read_context_aware,
    read_contrastive,
    split_sentences,
    validate_contrastive,
)
from rfa_doc_mt.data.wit3 import (
    DEV_SETS,
    TEST_SETS,
    read_parallel_train_tags,
    read_parallel_wit3_xml,
    read_train_tags,
    read_wit3_sets,
    read_wit3_xml,
)

SHARED_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data")
IWSLT_DIR = os.path.join(SHARED_DATA, "iwslt15-zh-en")
VOITA_DIR = os.path.join(SHARED_DATA, "voita-consistency")
needs_iwslt = pytest.mark.skipif(not os.path.isdir(IWSLT_DIR), reason=f"{IWSLT_DIR} not available (shared data)")
needs_voita = pytest.mark.skipif(not os.path.isdir(VOITA_DIR), reason=f"{VOITA_DIR} not available (shared data)")
needs_fairseq = pytest.mark.skipif(not (shutil.which("fairseq-preprocess") or os.path.isfile(
    os.path.join(os.path.dirname(sys.executable), "fairseq-preprocess"))), reason="fairseq-preprocess not installed")


def write(path, text):
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    return str(path)


def run_failing(argv, capsys, *expected):
    """Run the CLI, expect it to stop with a message containing every ``expected`` part."""
    assert prepare.main(argv) == 1
    message = capsys.readouterr().err
    for part in expected:
        assert part in message, f"{part!r} not in {message!r}"
    return message


def assert_nothing_written(out):
    out = str(out)
    assert not os.path.exists(out), f"{out} was written"
    parent, name = os.path.split(out)
    leftovers = [entry for entry in os.listdir(parent) if entry.startswith(f".{name}.")]
    assert not leftovers, f"staging left behind: {leftovers}"


def raw_corpus(directory, source_lang="src", target_lang="tgt", split="train",
               source="a b\nc d\ne f\n", target="A B\nC D\nE F\n", docs="2\tone\n1\ttwo\n"):
    write(os.path.join(directory, f"{split}.{source_lang}"), source)
    write(os.path.join(directory, f"{split}.{target_lang}"), target)
    if docs is not None:
        write(os.path.join(directory, f"{split}.docs"), docs)
    return str(directory)


# ----------------------------------------------------------------------------------------
# Bad input: a DataError naming the file (and line), nothing written


def binarize_argv(raw, out, source_lang="src", target_lang="tgt"):
    return ["binarize", "--raw", str(raw), "--out", str(out), "--source-lang", source_lang,
            "--target-lang", target_lang, "--workers", "1"]


def test_mismatched_line_counts_are_refused(tmp_path, capsys):
    raw = raw_corpus(tmp_path / "raw", target="A B\nC D\n", docs="3\tone\n")
    out = tmp_path / "out"
    run_failing(binarize_argv(raw, out), capsys, os.path.join(raw, "train.src"), os.path.join(raw, "train.tgt"),
                "3 lines", "has 2")
    assert_nothing_written(out)


def test_empty_sentence_is_refused_with_its_line(tmp_path, capsys):
    raw = raw_corpus(tmp_path / "raw", source="a b\n \ne f\n")
    out = tmp_path / "out"
    run_failing(binarize_argv(raw, out), capsys, os.path.join(raw, "train.src") + ":2", "empty sentence")
    assert_nothing_written(out)


def test_empty_document_is_refused_with_its_line(tmp_path, capsys):
    raw = raw_corpus(tmp_path / "raw", docs="3\tone\n0\ttwo\n")
    out = tmp_path / "out"
    run_failing(binarize_argv(raw, out), capsys, os.path.join(raw, "train.docs") + ":2", "empty document")
    assert_nothing_written(out)


def test_boundaries_disagreeing_with_the_text_are_refused(tmp_path, capsys):
    raw = raw_corpus(tmp_path / "raw", docs="2\tone\n2\ttwo\n")
    out = tmp_path / "out"
    run_failing(binarize_argv(raw, out), capsys, os.path.join(raw, "train.docs"), "4 sentences", "3 lines")
    assert_nothing_written(out)


def test_missing_boundary_file_is_refused(tmp_path, capsys):
    raw = raw_corpus(tmp_path / "raw", docs=None)
    out = tmp_path / "out"
    run_failing(binarize_argv(raw, out), capsys, os.path.join(raw, "train.docs"), "not found")
    assert_nothing_written(out)


def test_missing_wit3_file_is_refused(tmp_path, capsys):
    wit3 = tmp_path / "wit3"
    wit3.mkdir()
    out = tmp_path / "out"
    run_failing(["iwslt15", "--wit3-dir", str(wit3), "--out", str(out)], capsys,
                os.path.join(str(wit3), "IWSLT15.TED.dev2010.zh-en.zh.xml"), "not found")
    assert_nothing_written(out)


@pytest.mark.parametrize("command", ["binarize", "iwslt15", "opensubtitles"])
def test_unknown_language_pair_is_refused(tmp_path, capsys, command):
    raw = raw_corpus(tmp_path / "raw", source_lang="xx", target_lang="en")
    out = tmp_path / "out"
    argv = {
        "binarize": binarize_argv(raw, out, "xx", "en"),
        "iwslt15": ["iwslt15", "--wit3-dir", raw, "--out", str(out), "--source-lang", "xx"],
        "opensubtitles": ["opensubtitles", "--data-dir", raw, "--out", str(out), "--source-lang", "xx"],
    }[command]
    message = run_failing(argv, capsys, "'xx'", "--source-lang")
    assert all(repr(lang)[1:-1] in message for lang in KNOWN_LANGUAGES)
    assert_nothing_written(out)


def test_same_source_and_target_language_is_refused(tmp_path, capsys):
    raw = raw_corpus(tmp_path / "raw", source_lang="en", target_lang="en")
    run_failing(binarize_argv(raw, tmp_path / "out", "en", "en"), capsys, "both 'en'")


def test_language_processors_refuse_unknown_codes():
    for make in (Preprocessor, Postprocessor):
        with pytest.raises(DataError, match="unknown language code 'klingon'; known: .*en.*zh"):
            make("klingon")


def test_failed_run_leaves_no_output_and_keeps_the_previous_one(tmp_path):
    out = tmp_path / "corpus"
    with pytest.raises(RuntimeError):
        with staging.staged_output(str(out), "prep.json") as stage:
            write(os.path.join(stage, "half.txt"), "half")
            raise RuntimeError("step failed")
    assert_nothing_written(out)

    with staging.staged_output(str(out), "prep.json") as stage:
        write(os.path.join(stage, "prep.json"), "{}")
        write(os.path.join(stage, "valid.docs"), "1\tfirst\n")
    with pytest.raises(RuntimeError):
        with staging.staged_output(str(out), "prep.json") as stage:
            write(os.path.join(stage, "prep.json"), "{}")
            raise RuntimeError("step failed")
    assert sorted(os.listdir(out)) == ["prep.json", "valid.docs"]
    assert not [entry for entry in os.listdir(tmp_path) if entry.startswith(".corpus.")]


def test_an_unrelated_directory_is_not_overwritten(tmp_path, capsys):
    raw = raw_corpus(tmp_path / "raw")
    out = tmp_path / "precious"
    write(os.path.join(str(out), "notes.txt"), "keep me")
    run_failing(binarize_argv(raw, out), capsys, str(out), "not written by this script")
    assert os.listdir(out) == ["notes.txt"]


# ----------------------------------------------------------------------------------------
# WIT3 readers

WIT3_XML = """<?xml version="1.0" encoding="UTF-8"?>
<mteval>
<srcset setid="iwslt2015-dev2010" srclang="{lang}">
<doc docid="69" genre="lectures">
<url>http://www.ted.com/talks/a.html</url>
<talkid>69</talkid>
<title>A</title>
<seg id="1"> {first} </seg>
<seg id="2"> R&amp;D matters. </seg>
</doc>
<doc docid="129" genre="lectures">
<seg id="1"> {third} </seg>
</doc>
</srcset>
</mteval>
"""


def test_wit3_xml_reader_on_a_fixture(tmp_path):
    english = write(tmp_path / "x.en.xml", WIT3_XML.format(lang="english", first="Hello  there.", third="Bye."))
    chinese = write(tmp_path / "x.zh.xml", WIT3_XML.format(lang="chinese", first="你好。", third="再见。"))
    source, target = read_parallel_wit3_xml(chinese, english)
    assert [d.name for d in source] == ["69", "129"]
    assert target[0].sentences == ["Hello there.", "R&D matters."]
    assert target[0].line_numbers == [8, 9]


def test_wit3_xml_mismatch_names_the_files(tmp_path):
    english = write(tmp_path / "x.en.xml", WIT3_XML.format(lang="english", first="Hello.", third="Bye."))
    shorter = WIT3_XML.replace('<seg id="2"> R&amp;D matters. </seg>\n', "")
    chinese = write(tmp_path / "x.zh.xml", shorter.format(lang="chinese", first="你好。", third="再见。"))
    with pytest.raises(DataError, match=r"document '69' has 1 sentences in .*x\.zh\.xml:8 but 2 in .*x\.en\.xml:8"):
        read_parallel_wit3_xml(chinese, english)


def test_wit3_xml_empty_segment_and_malformed_xml_name_the_line(tmp_path):
    empty = write(tmp_path / "empty.xml", WIT3_XML.format(lang="english", first=" ", third="Bye."))
    with pytest.raises(DataError, match=r"empty\.xml:8: empty segment"):
        read_wit3_xml(empty)
    broken = write(tmp_path / "broken.xml", WIT3_XML.format(lang="english", first="a < b", third="Bye."))
    with pytest.raises(DataError, match=r"broken\.xml:8: malformed XML"):
        read_wit3_xml(broken)


@needs_iwslt
def test_wit3_xml_reader_counts_the_paper_sets():
    for sets, talks, sentences in ((DEV_SETS, 8, 887), (TEST_SETS, 56, 5473)):
        source, target, files = read_wit3_sets(IWSLT_DIR, sets, "zh", "en")
        assert (len(source), sum(len(d.sentences) for d in source)) == (talks, sentences)
        assert [d.name for d in source] == [d.name for d in target]
        assert len(files) == 2 * len(sets)


TRAIN_TAGS = {
    "en": """<url>http://www.ted.com/talks/one.html</url>
<keywords>talks, science</keywords>
<speaker>Ann Author</speaker>
<talkid>1</talkid>
<title>One</title>
<description>TED Talk Subtitles and Transcript: first talk</description>
Hello everyone.
This is the first talk.
<url>http://www.ted.com/talks/two.html</url>
<keywords>talks, art</keywords>
<speaker>Bob Builder</speaker>
<talkid>2</talkid>
<title>Two</title>
<description>second talk</description>
<reviewer href="http://www.ted.com/profiles/1">Rev</reviewer>
<translator href="http://www.ted.com/profiles/2">Tra</translator>
Second talk, first line.

Third line.
""",
    "zh": """<url>http://www.ted.com/talks/one.html</url>
<keywords>演讲, 科学</keywords>
<speaker>Ann Author</speaker>
<talkid>1</talkid>
<title>一</title>
<description>第一个演讲</description>
大家好。
这是第一个演讲。
<url>http://www.ted.com/talks/two.html</url>
<keywords>演讲, 艺术</keywords>
<speaker>Bob Builder</speaker>
<talkid>2</talkid>
<title>二</title>
<description>第二个演讲</description>
<reviewer href="http://www.ted.com/profiles/1">Rev</reviewer>
<translator href="http://www.ted.com/profiles/2">Tra</translator>
第二个演讲，第一行。
第二行。
第三行。
""",
}


def test_train_tags_reader_on_a_fixture(tmp_path):
    paths = {lang: write(tmp_path / f"train.tags.zh-en.{lang}", text) for lang, text in TRAIN_TAGS.items()}
    english = read_train_tags(paths["en"])
    assert [(d.name, len(d.sentences)) for d in english] == [("1", 2), ("2", 3)]
    assert english[1].line_numbers == [17, 18, 19]
    source, target, dropped = read_parallel_train_tags(paths["zh"], paths["en"])
    assert dropped == 1  # the empty English line and its Chinese partner
    assert [d.sentences for d in target] == [["Hello everyone.", "This is the first talk."],
                                             ["Second talk, first line.", "Third line."]]
    assert source[1].sentences == ["第二个演讲，第一行。", "第三行。"]


def test_train_tags_mismatch_names_the_files(tmp_path):
    zh = write(tmp_path / "train.tags.zh-en.zh", TRAIN_TAGS["zh"].replace("第二行。\n", ""))
    en = write(tmp_path / "train.tags.zh-en.en", TRAIN_TAGS["en"])
    with pytest.raises(DataError, match=r"document '2' has 2 sentences in .*train\.tags\.zh-en\.zh:17 "
                                        r"but 3 in .*train\.tags\.zh-en\.en:17"):
        read_parallel_train_tags(zh, en)
    one_talk = write(tmp_path / "one.en", TRAIN_TAGS["en"].split("<url>http://www.ted.com/talks/two")[0])
    with pytest.raises(DataError, match=r"train\.tags\.zh-en\.zh has 2 talks but .*one\.en has 1"):
        read_parallel_train_tags(zh, one_talk)


@needs_fairseq
def test_iwslt15_prepares_train_tags_when_present(tmp_path, capsys):
    wit3 = tmp_path / "wit3"
    for lang, text in TRAIN_TAGS.items():
        write(wit3 / f"train.tags.zh-en.{lang}", text)
    for set_name in DEV_SETS + TEST_SETS:
        for lang, language, first, third in (("en", "english", "Hello.", "Bye."),
                                             ("zh", "chinese", "你好。", "再见。")):
            write(wit3 / f"IWSLT15.TED.{set_name}.zh-en.{lang}.xml",
                  WIT3_XML.format(lang=language, first=first, third=third))
    out = tmp_path / "out"
    assert prepare.main(["iwslt15", "--wit3-dir", str(wit3), "--out", str(out), "--workers", "1"]) == 0
    printed = capsys.readouterr().out
    assert "train (train.tags.zh-en): 2 talks, 4 sentences" in printed
    assert "test (IWSLT15 tst2010+tst2011+tst2012+tst2013): 8 talks, 12 sentences" in printed
    prep = json.load(open(out / "prep.json"))
    assert prep["bpe_learned_on"] == "train" and prep["splits"]["train"]["documents"] == 2
    assert [d.name for d in read_docs(str(out / "train.docs"))] == ["1", "2"]


# ----------------------------------------------------------------------------------------
# Pre- and post-processing

ENGLISH = ["The cat sat on the mat.", "It's a test, isn't it?", 'She said: "Hello, world!"',
           "Paris is the capital of France -- everyone knows that.", "Why not?"]


def test_postprocessor_undoes_preprocessor_on_english(tmp_path):
    tokenizer = Preprocessor("en")
    tokenized = [tokenizer.tokenize(sentence) for sentence in ENGLISH]
    assert tokenized[1] == "It 's a test , isn 't it ?"
    model = train_truecaser(tokenized + ["the cat is here .", "a test of the cat ."], str(tmp_path / "truecase.en"))
    preprocessor = Preprocessor("en", truecase_model=model)
    processed = [preprocessor(sentence) for sentence in ENGLISH]
    assert processed[0] == "the cat sat on the mat ."  # truecased: "The" is mostly "the"
    assert [Postprocessor("en")(sentence) for sentence in processed] == ENGLISH

    # with sentencepiece pieces in between (the vocabulary is lowered to what the text allows)
    write(tmp_path / "text.en", "\n".join(processed * 3) + "\n")
    size = processing.train_sentencepiece([str(tmp_path / "text.en")], str(tmp_path / "spm"), 30000, 1, 1.0)
    assert size < 30000
    pieces = [SentencePieceEncoder(str(tmp_path / "spm.model"))(sentence) for sentence in processed]
    assert pieces[0].startswith("▁")
    postprocessor = Postprocessor("en", sentencepiece_model=str(tmp_path / "spm.model"))
    assert [postprocessor(sentence) for sentence in pieces] == ENGLISH


def test_chinese_segmentation_round_trip():
    preprocessor, postprocessor = Preprocessor("zh"), Postprocessor("zh")
    for sentence in ["我爱北京天安门。", "他在New York工作了3年。"]:
        segmented = preprocessor(sentence)
        assert " " in segmented
        assert postprocessor(segmented) == sentence
    assert preprocessor("对我来说 在世界各地旅行") == preprocessor("对我来说在世界各地旅行")


def test_identity_and_pretokenized_text_pass_unchanged():
    assert Preprocessor("src")("ka  neto dozu") == "ka neto dozu"
    # running Moses again on Voita's tokenized text would split "Didn 't" into "Didn ' t"
    assert Preprocessor("en", tokenizer="pretokenized")("- Didn 't I ?") == "- Didn 't I ?"
    assert Postprocessor("ru", detokenize=False)("Это политика ... .") == "Это политика ... ."


# ----------------------------------------------------------------------------------------
# Voita formats

def contrastive_example(**changes):
    example = {"src": "a b . _eos c d . _eos e f . _eos g h ?",
               "dst": ["A B . _eos C D . _eos E F . _eos G H ?", "A B . _eos C D . _eos E F . _eos G X ?"],
               "true_ind": 0, "ctx_dist": 2}
    example.update(changes)
    return example


@pytest.mark.parametrize("changes, message", [
    ({"true_ind": 2}, "'true_ind' 2 is not an index into its 2 candidates"),
    ({"true_ind": True}, "'true_ind' True"),
    ({"dst": ["A _eos B _eos C _eos D", "A _eos B _eos C"]}, r"'dst'\[1\] has 3 sentences but 'src' has 4"),
    ({"dst": ["A _eos B _eos C _eos D"]}, "at least two candidate"),
    ({"ctx_dist": -1}, "'ctx_dist' -1 is not a distance"),
    ({"src": "a _eos _eos c _eos d"}, "'src': sentence 2 of 4 is empty"),
])
def test_contrastive_validation_names_file_and_example(tmp_path, changes, message):
    examples = [contrastive_example(), contrastive_example(**changes)]
    with pytest.raises(DataError, match=r"sets\.json: example 1 \(0-based\): .*" + message):
        validate_contrastive(str(tmp_path / "sets.json"), examples)


def test_contrastive_reader_refuses_missing_fields_and_bad_json(tmp_path):
    example = contrastive_example()
    del example["ctx_dist"]
    with pytest.raises(DataError, match=r"missing\.json: example 0 \(0-based\): missing ctx_dist"):
        read_contrastive(write(tmp_path / "missing.json", json.dumps([example])))
    with pytest.raises(DataError, match=r"bad\.json:2: invalid JSON"):
        read_contrastive(write(tmp_path / "bad.json", "[\n{oops}]"))
    with pytest.raises(DataError, match=r"absent\.json: file not found"):
        read_contrastive(str(tmp_path / "absent.json"))


@needs_voita
def test_voita_contrastive_sets_are_valid():
    for name in ("deixis_dev.json", "lex_cohesion_dev.json"):
        examples = read_contrastive(os.path.join(VOITA_DIR, name))
        assert len(examples) == 500
        assert all(len(split_sentences(e["src"], name)) == 4 for e in examples)


def test_context_aware_reader_checks_sentences_per_line(tmp_path):
    source = write(tmp_path / "dev.src", "a . _eos b . _eos c . _eos d .\ne . _eos f . _eos g .\n")
    target = write(tmp_path / "dev.dst", "A . _eos B . _eos C . _eos D .\nE . _eos F . _eos G . _eos H .\n")
    with pytest.raises(DataError, match=r"dev\.src:2: 3 sentences joined by ' _eos ', expected 4"):
        read_context_aware(source, target)


# ----------------------------------------------------------------------------------------
# Whole pipeline on small inputs

def opensubtitles_fixture(directory, documents=30):
    words = "time house friend door night policy week room water light".split()
    for split, prefix in (("train", "train"), ("valid", "dev"), ("test", "test")):
        source_lines, target_lines = [], []
        for d in range(documents if split == "train" else 5):
            sentences = [f"- I saw the {words[(d + i) % 10]} , didn 't I ?" for i in range(4)]
            source_lines.append(" _eos ".join(sentences))
            target_lines.append(" _eos ".join(f"Я видел {words[(d + i) % 10]} {i} ." for i in range(4)))
        write(os.path.join(directory, f"{prefix}.src"), "\n".join(source_lines) + "\n")
        write(os.path.join(directory, f"{prefix}.dst"), "\n".join(target_lines) + "\n")
    return str(directory)


@needs_fairseq
def test_opensubtitles_and_consistency_pipeline(tmp_path, capsys):
    data = opensubtitles_fixture(tmp_path / "voita")
    out = tmp_path / "corpus"
    assert prepare.main(["opensubtitles", "--data-dir", data, "--out", str(out), "--bpe-size", "200",
                         "--workers", "1"]) == 0
    printed = capsys.readouterr().out
    assert "opensubtitles valid (dev): 5 documents, 20 sentences" in printed
    prep = json.load(open(out / "prep.json"))
    assert prep["source_lang"] == "en" and prep["target_lang"] == "ru"
    assert prep["splits"]["train"] == {"documents": 30, "sentences": 120, "files": ["train.src", "train.dst"]}
    assert prep["tokenizers"] == {"en": "pretokenized", "ru": "pretokenized"}
    assert prep["truecased"] == {"en": True, "ru": False}
    assert prep["bpe_size"] <= 200 and prep["sentencepiece_model"] == "spm.model"
    for name in ("dict.en.txt", "dict.ru.txt", "train.en-ru.en.bin", "test.en-ru.ru.idx", "valid.docs",
                 "test.ref.ru", "spm.model", "truecase.en.model", "raw/train.en", "bpe/test.ru"):
        assert os.path.isfile(out / name), name
    assert read_lines(str(out / "raw" / "train.en"))[0] == "- I saw the time , didn 't I ?"
    assert read_docs(str(out / "valid.docs"), 20)[0].num_sentences == 4
    postprocessor = processing.corpus_postprocessor(str(out), prep["target_lang"])
    assert [postprocessor(line) for line in read_lines(str(out / "bpe" / "test.ru"))] == \
        read_lines(str(out / "test.ref.ru"))

    sets = write(tmp_path / "sets" / "deixis_test.json", json.dumps([contrastive_example(
        src="- I saw the door . _eos didn 't I ? _eos - yes . _eos the policy .",
        dst=["Я видел дверь . _eos Да . _eos Да . _eos Ты .", "Я видел дверь . _eos Да . _eos Да . _eos Вы ."],
        true_ind=1)]))
    consistency = out / "consistency"
    assert prepare.main(["consistency", "--json", sets, "--prep", str(out), "--out", str(consistency)]) == 0
    processed = read_contrastive(str(consistency / "deixis_test.json"))
    assert processed[0]["true_ind"] == 1 and processed[0]["ctx_dist"] == 2
    assert processed[0]["src"].count(" _eos ") == 3 and processed[0]["src"].startswith("▁")
    assert all(candidate.count(" _eos ") == 3 for candidate in processed[0]["dst"])
    manifest = json.load(open(consistency / "consistency.json"))
    assert manifest["sets"]["deixis_test.json"]["examples"] == 1 and manifest["processed"]

    bad = write(tmp_path / "sets" / "bad.json", json.dumps([contrastive_example(true_ind=5)]))
    run_failing(["consistency", "--json", sets, bad, "--prep", str(out), "--out", str(tmp_path / "c2")],
                capsys, bad, "example 0")
    assert_nothing_written(tmp_path / "c2")


@needs_fairseq
def test_binarize_without_train_split(tmp_path, capsys):
    raw = raw_corpus(tmp_path / "raw", split="valid")
    raw_corpus(tmp_path / "raw", split="test", source="a x\n", target="A X\n", docs="1\tthree\n")
    out = tmp_path / "out"
    assert prepare.main(binarize_argv(raw, out)) == 0
    prep = json.load(open(out / "prep.json"))
    assert prep["splits"] == {"valid": {"documents": 2, "sentences": 3}, "test": {"documents": 1, "sentences": 1}}
    assert prep["bpe_size"] is None and prep["dictionary_from"] == ["valid", "test"]
    assert os.path.isfile(out / "test.src-tgt.tgt.bin") and read_lines(str(out / "test.docs")) == ["1\tthree"]
    assert "x" in [line.split()[0] for line in read_lines(str(out / "dict.src.txt"))]


@needs_fairseq
def test_synthetic_corpus_is_binarized_with_its_consistency_sets(tmp_path):
    pytest.importorskip("rfa_doc_mt.data.synthetic", reason="rfa_doc_mt.data.synthetic not available")
    out = tmp_path / "synthetic"
    assert prepare.main(["synthetic", "--out", str(out), "--train-documents", "10", "--workers", "1"]) == 0
    prep = json.load(open(out / "prep.json"))
    assert prep["source_lang"] == "src" and prep["bpe_size"] is None and prep["seed"] == 1
    assert prep["splits"]["train"]["documents"] == 10
    assert os.path.isfile(out / "train.src-tgt.src.bin") and os.path.isfile(out / "valid.docs")
    manifest = json.load(open(out / "consistency" / "consistency.json"))
    assert manifest["sets"] and not manifest["processed"]
    for name in manifest["sets"]:
        read_contrastive(str(out / "consistency" / name))


@pytest.fixture(scope="module")
def iwslt_corpus(tmp_path_factory):
    """The shared IWSLT15 dev/test prepared once: (directory, what the prepare step printed)."""
    if not os.path.isdir(IWSLT_DIR):
        pytest.skip(f"{IWSLT_DIR} not available (shared data)")
    out = tmp_path_factory.mktemp("iwslt") / "iwslt15"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert prepare.main(["iwslt15", "--wit3-dir", IWSLT_DIR, "--out", str(out), "--workers", "2"]) == 0
    return out, printed.getvalue()


@needs_iwslt
@needs_fairseq
def test_iwslt15_prepare_on_dev_and_test(iwslt_corpus):
    out, printed = iwslt_corpus
    assert "no train.tags" in printed
    assert "valid (IWSLT15 dev2010): 8 talks, 887 sentences" in printed
    assert "test (IWSLT15 tst2010+tst2011+tst2012+tst2013): 56 talks, 5473 sentences" in printed
    assert "too small for a BPE vocabulary of 30000" in printed
    prep = json.load(open(out / "prep.json"))
    assert prep["splits"]["valid"]["sentences"] == 887 and prep["splits"]["test"]["documents"] == 56
    assert prep["splits"]["test"]["holds"] == "IWSLT15 tst2010+tst2011+tst2012+tst2013" and prep["corpus"] == "iwslt15"
    assert prep["bpe_learned_on"] == "valid" and prep["truecased"] == {"zh": False, "en": True}
    assert len(read_lines(str(out / "test.ref.en"))) == 5473
    assert sum(d.num_sentences for d in read_docs(str(out / "test.docs"))) == 5473


@needs_iwslt
@needs_fairseq
def test_postprocessing_gives_back_the_iwslt_references(iwslt_corpus):
    """Pre-processing the test references (tokenize, truecase, BPE) and
    post-processing them back loses nothing BLEU sees. Moses' own truecaser, learned on the 887
    valid sentences, rewrote mid-sentence capitals ("Los Angeles times"): cased BLEU 98.32."""
    out, _ = iwslt_corpus
    postprocessor = processing.corpus_postprocessor(str(out), "en")
    restored = [postprocessor(line) for line in read_lines(str(out / "bpe" / "test.en"))]
    references = read_lines(str(out / "test.ref.en"))
    bleu = sacrebleu.corpus_bleu(restored, [references])
    assert bleu.score >= 99.9, f"cased BLEU {bleu.score:.2f}"
    # The only case the round trip changes is the first letter of a reference that starts in lower
    # case ("does anyone even know ...": 17 lines). (Other lines differ in a closing quote the Moses
    # detokenizer attaches as an opening one: cased and uncased BLEU alike.)
    case_only = [(r, h) for r, h in zip(restored, references) if r != h and r.lower() == h.lower()]
    assert case_only and all(h[:1].islower() and r == h[:1].upper() + h[1:] for r, h in case_only), case_only[:5]
