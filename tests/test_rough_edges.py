"""What a new user hits on real data and on second runs (the parts that need no trained model;
tests/test_integration.py has those that do, tests/test_prepare.py the IWSLT15 round trip of
the references)."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from rfa_doc_mt.data import prepare, staging
from rfa_doc_mt.data.io import DataError, Document, read_docs, read_lines
from rfa_doc_mt.data.text import Postprocessor, Preprocessor, train_truecaser
from rfa_doc_mt.data.voita import (
    distinct_candidates,
    read_context_aware,
    read_contrastive,
)
from rfa_doc_mt.data.windows import DocumentWindowDataset
from rfa_doc_mt.data.wit3 import read_train_tags
from rfa_doc_mt.scoring.consistency import accuracy_report, contrastive_files

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
needs_fairseq = pytest.mark.skipif(not (shutil.which("fairseq-preprocess") or os.path.isfile(
    os.path.join(os.path.dirname(sys.executable), "fairseq-preprocess"))), reason="fairseq-preprocess not installed")


def write(path, content):
    path = str(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb" if isinstance(content, bytes) else "w", **({} if isinstance(content, bytes) else
                                                                   {"encoding": "utf-8"})) as handle:
        handle.write(content)
    return path


def failing(argv, capsys):
    """Run the prepare CLI, expect it to stop; its message."""
    assert prepare.main(argv) == 1
    return capsys.readouterr().err


def raw_split(directory, split, source_lang="src", target_lang="tgt", lines=("a b", "c d", "e f"),
              docs="2\tone\n1\ttwo\n"):
    write(os.path.join(directory, f"{split}.{source_lang}"), "".join(line + "\n" for line in lines))
    write(os.path.join(directory, f"{split}.{target_lang}"), "".join(line.upper() + "\n" for line in lines))
    write(os.path.join(directory, f"{split}.docs"), docs)
    return str(directory)


def binarize_argv(raw, out, source_lang="src", target_lang="tgt", *extra):
    return ["binarize", "--raw", str(raw), "--out", str(out), "--source-lang", source_lang,
            "--target-lang", target_lang, "--workers", "1", *extra]


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """A tiny synthetic corpus (no model is trained on it here)."""
    out = tmp_path_factory.mktemp("synthetic") / "data"
    assert prepare.main(["synthetic", "--out", str(out), "--train-documents", "3", "--valid-documents", "2",
                         "--test-documents", "2", "--contrastive-pairs", "2", "--workers", "1"]) == 0
    return str(out)


# ----------------------------------------------------------------------------------------
# Item 1: contrastive sets that repeat a candidate

CONTEXT = "a b . _eos c d . _eos e f . _eos "
TARGET_CONTEXT = "A B . _eos C D . _eos E F . _eos "


def example(candidates, true_ind, ctx_dist=1):
    return {"src": CONTEXT + "g h .", "dst": [TARGET_CONTEXT + c for c in candidates], "true_ind": true_ind,
            "ctx_dist": ctx_dist}


# Voita et al.'s ellipsis_infl / ellipsis_vp repeat a candidate in about 13 examples a file, in
# some the true one; here: the true text twice (true_ind on the second copy), a wrong one twice,
# one example left with a single distinct candidate, and a plain one.
REPEATING = [example(["G .", "X .", "G ."], 2), example(["G .", "X .", "X ."], 0, 2),
             example(["G .", "G ."], 1, 3), example(["G .", "X ."], 1)]


def test_repeated_candidates_are_one_candidate(tmp_path):
    path = write(tmp_path / "ellipsis_infl.json", json.dumps(REPEATING))
    examples = read_contrastive(path)  # was: "two candidates in 'dst' are identical"
    assert [distinct_candidates(e) for e in examples] == [
        ([TARGET_CONTEXT + "G .", TARGET_CONTEXT + "X ."], 0), ([TARGET_CONTEXT + "G .", TARGET_CONTEXT + "X ."], 0),
        ([TARGET_CONTEXT + "G ."], 0), ([TARGET_CONTEXT + "G .", TARGET_CONTEXT + "X ."], 1)]
    # identical candidates get identical losses; "G ." has the lowest loss everywhere
    losses = [[0.5, 0.9, 0.5], [0.5, 0.9, 0.9], [0.7, 0.7], [0.5, 0.9]]
    report = accuracy_report(examples, losses)
    # right: example 0 (the true text wins, whichever copy true_ind names) and 1; wrong: 3;
    # example 2 is skipped, not counted wrong
    assert (report["examples"], report["skipped"], report["repeated_candidates"]) == (3, 1, 3)
    assert report["accuracy"] == pytest.approx(100 * 2 / 3)
    assert report["random"] == pytest.approx(50.0)  # 1 / 2 distinct candidates each
    assert report["by_ctx_dist"] == {"1": {"examples": 2, "accuracy": 50.0}, "2": {"examples": 1, "accuracy": 100.0}}
    with pytest.raises(ValueError, match="identical candidates with different losses"):
        accuracy_report(examples[:1], [[0.5, 0.9, 0.6]])
    with pytest.raises(DataError, match="none of its 1 examples has two distinct candidates"):
        accuracy_report(examples[2:3], [[0.7, 0.7]])


@needs_fairseq
def test_prepare_consistency_reports_repeats(synthetic, tmp_path, capsys):
    sets = write(tmp_path / "ellipsis_infl.json", json.dumps(REPEATING))
    out = tmp_path / "consistency"
    assert prepare.main(["consistency", "--json", sets, "--prep", synthetic, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "note: ellipsis_infl.json: 3 of 4 examples repeat a candidate" in printed
    assert "note: ellipsis_infl.json: 1 examples have a single distinct candidate; the scorer skips them" in printed
    entry = json.load(open(out / "consistency.json"))["sets"]["ellipsis_infl.json"]
    assert (entry["examples"], entry["repeated_candidates"], entry["single_candidate"]) == (4, 3, 1)


# ----------------------------------------------------------------------------------------
# Item 3: bytes that are not UTF-8


def test_non_utf8_text_is_named_by_file_and_line(tmp_path, capsys):
    bad = "ok line\n".encode() + b"caf\xe9 au lait\n"   # Latin-1 "café" on line 2
    raw = raw_split(tmp_path / "raw", "train")
    write(os.path.join(raw, "train.src"), b"a b\n" + b"c \xff\n" + b"e f\n")
    message = failing(binarize_argv(raw, tmp_path / "out"), capsys)
    assert f"{os.path.join(raw, 'train.src')}:2: not UTF-8 (byte 0xff at column 3)" in message

    source = write(tmp_path / "voita" / "dev.src", "a . _eos b . _eos c . _eos d .\n".encode() * 2 + bad)
    target = write(tmp_path / "voita" / "dev.dst", "A . _eos B . _eos C . _eos D .\n" * 3)
    with pytest.raises(DataError, match=r"dev\.src:4: not UTF-8 \(byte 0xe9 at column 4\)"):
        read_context_aware(source, target)
    with pytest.raises(DataError, match=r"train\.tags\.zh-en\.en:2: not UTF-8"):
        read_train_tags(write(tmp_path / "train.tags.zh-en.en", bad))
    with pytest.raises(DataError, match=r"test\.docs:2: not UTF-8"):
        read_docs(write(tmp_path / "test.docs", b"1\tone\n1\tt\xe9\n"))
    with pytest.raises(DataError, match=r"sets\.json:3: not UTF-8"):
        read_contrastive(write(tmp_path / "sets.json", b'[\n{"src": "a",\n "dst": ["\xe9"]}]'))
    # a long file: the text layer fails chunks ahead of the line, the message still names it
    with pytest.raises(DataError, match=r"long\.txt:5001: not UTF-8"):
        read_lines(write(tmp_path / "long.txt", b"word word word\n" * 5000 + b"\xff\n"))


# ----------------------------------------------------------------------------------------
# Item 4: preparing into a folder that already holds something


@needs_fairseq
def test_preparing_again_never_deletes_what_the_user_added(synthetic, tmp_path, capsys):
    out = tmp_path / "corpus"
    shutil.copytree(synthetic, out)  # an earlier output of the synthetic preparation
    staging.check_replaceable(str(out), "prep.json")  # as it was written: a second run may replace it
    argv = ["synthetic", "--out", str(out), "--train-documents", "3", "--valid-documents", "2",
            "--test-documents", "2", "--contrastive-pairs", "2", "--workers", "1"]
    write(out / "notes.txt", "mine")
    write(out / "runs" / "checkpoint_best.pt", "a model trained on it")
    message = failing(argv, capsys)
    assert f"{out}: an earlier output of this script, which also holds what it did not write there: " \
           "notes.txt, runs/. Replacing" in message and "pass --force" in message
    assert (out / "notes.txt").read_text() == "mine" and (out / "runs" / "checkpoint_best.pt").exists()
    assert prepare.main(argv + ["--force"]) == 0
    assert not (out / "notes.txt").exists() and (out / "prep.json").exists() and (out / "consistency").is_dir()


@needs_fairseq
def test_prepare_consistency_adds_to_the_sets_already_there(synthetic, tmp_path, capsys):
    sets = {name: write(tmp_path / "sets" / f"{name}.json", json.dumps(REPEATING[3:])) for name in ("deixis", "lex")}
    out = tmp_path / "consistency"
    assert prepare.main(["consistency", "--json", sets["deixis"], "--prep", synthetic, "--out", str(out)]) == 0
    write(out / "README.txt", "my notes")
    assert prepare.main(["consistency", "--json", sets["lex"], "--prep", synthetic, "--out", str(out)]) == 0
    assert sorted(os.listdir(out)) == ["README.txt", "consistency.json", "deixis.json", "lex.json"]
    assert "consistency deixis.json: 1 examples, 2 candidates (kept)" in capsys.readouterr().out
    assert sorted(json.load(open(out / "consistency.json"))["sets"]) == ["deixis.json", "lex.json"]
    assert contrastive_files([str(out)]) == [str(out / "deixis.json"), str(out / "lex.json")]

    # sets prepared for another corpus (here: a manifest without this corpus's fingerprint)
    manifest = json.load(open(out / "consistency.json"))
    manifest["corpus_fingerprint"] = "another corpus"
    write(out / "consistency.json", json.dumps(manifest))
    message = failing(["consistency", "--json", sets["lex"], "--prep", synthetic, "--out", str(out)], capsys)
    assert f"{out}: holds sets prepared for another corpus (or by an older version of this script): " \
           "deixis.json;" in message and "--force" in message
    assert sorted(os.listdir(out)) == ["README.txt", "consistency.json", "deixis.json", "lex.json"]
    assert prepare.main(["consistency", "--json", sets["lex"], "--prep", synthetic, "--out", str(out), "--force"]) == 0
    assert sorted(os.listdir(out)) == ["consistency.json", "lex.json"]


# ----------------------------------------------------------------------------------------
# Item 6: other WIT3 sets, named by what they hold

WIT3_XML = """<?xml version="1.0" encoding="UTF-8"?>
<mteval><srcset setid="{setid}" srclang="{lang}">
<doc docid="{doc}" genre="lectures"><seg id="1"> {first} </seg><seg id="2"> {second} </seg></doc>
<doc docid="{doc}1" genre="lectures"><seg id="1"> {first} </seg></doc>
</srcset></mteval>
"""


def wit3_file(directory, campaign, set_name, pair, lang, doc):
    text = {"zh": ("你好。", "再见。"), "en": ("Hello there.", "Goodbye, my friend.")}[lang]
    return write(os.path.join(directory, f"{campaign}.TED.{set_name}.{pair}.{lang}.xml"),
                 WIT3_XML.format(setid=set_name, lang=lang, doc=doc, first=text[0], second=text[1]))


@needs_fairseq
def test_iwslt_script_takes_other_test_sets_and_names_them(tmp_path, capsys):
    wit3 = tmp_path / "wit3"
    for lang in ("zh", "en"):
        wit3_file(wit3, "IWSLT15", "dev2010", "zh-en", lang, "1")
    for number, set_name in enumerate(("tst2016", "tst2017")):
        wit3_file(wit3, "IWSLT17", set_name, "zh-en", "zh", f"2{number}")
        wit3_file(wit3, "IWSLT17", set_name, "en-zh", "en", f"2{number}")  # IWSLT17 names the English side en-zh
    out = tmp_path / "out"
    assert prepare.main(["iwslt15", "--wit3-dir", str(wit3), "--out", str(out), "--test-sets", "tst2016,tst2017",
                         "--bpe-size", "60", "--workers", "1"]) == 0
    printed = capsys.readouterr().out
    assert "valid (IWSLT15 dev2010): 2 talks, 3 sentences" in printed
    assert "test (IWSLT17 tst2016+tst2017): 4 talks, 6 sentences" in printed and "iwslt15 test" not in printed
    prep = json.load(open(out / "prep.json"))
    assert prep["corpus"] == "iwslt15+iwslt17" and prep["splits"]["test"]["holds"] == "IWSLT17 tst2016+tst2017"
    assert "IWSLT17.TED.tst2016.en-zh.en.xml" in prep["splits"]["test"]["files"]
    staging.check_replaceable(str(out), "prep.json")  # item 4: all of it is this script's output
    usage = subprocess.run([os.path.join(ROOT, "scripts", "prepare_iwslt15.sh"), "--help"],
                           capture_output=True, text=True).stdout
    assert "--valid-sets A,B" in usage and "--test-sets A,B" in usage and "tst2016,tst2017" in usage


# ----------------------------------------------------------------------------------------
# Item 8: a config copied elsewhere


@pytest.mark.parametrize("config", ["transformer_L4.sh", "memory_both_0.sh"])
def test_a_demo_config_copied_elsewhere_still_loads(tmp_path, config):
    copy = shutil.copy(os.path.join(ROOT, "configs", "demo", config), tmp_path / "mine.sh")
    shell = f'source "{ROOT}/scripts/common.sh"; load_config "{copy}"; echo "$TRAIN_ARGS"'
    result = subprocess.run(["bash", "-c", shell], capture_output=True, text=True)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert "--max-update" in result.stdout and "--criterion label_smoothed_cross_entropy" in result.stdout


# ----------------------------------------------------------------------------------------
# Item 9: where a position limit came from


class Sentences(list):
    @property
    def sizes(self):
        return np.array([len(s) for s in self])


def test_position_limit_message_says_where_the_limit_came_from():
    lengths = [5, 7, 1100]
    source = Sentences(torch.ones(n, dtype=torch.long) for n in lengths)
    dataset = DocumentWindowDataset(source, source, [Document("talk", 3)], 1, 3, 3, 1, 2)
    # windows of 5, 5 + 7 and 7 + 1100 tokens; 64 came from the command line, not the model
    with pytest.raises(DataError, match=r"sentence 2 has 12 tokens, over the limit of 11 source positions set "
                                        r"by --max-source-positions 11 \(2 windows in all\)"):
        dataset.check_positions(11, 2000, "test.docs")
    with pytest.raises(DataError, match=r"sentence 3 has 1107 tokens, over the limit of 1024 target positions set "
                                        r"by --max-target-positions's default \(1 windows in all\)"):
        dataset.check_positions(2000, 1024, "test.docs")


# ----------------------------------------------------------------------------------------
# Item 11: contrastive sets for another language pair

VOITA_LIKE = [{"src": "I saw you . _eos Did you ? _eos Yes . _eos You did .",
               "dst": ["Я тебя видел . _eos Да ? _eos Да . _eos Ты видел .",
                       "Я тебя видел . _eos Да ? _eos Да . _eos Вы видели ."], "true_ind": 0, "ctx_dist": 3}]


@needs_fairseq
def test_contrastive_sets_for_another_language_pair_are_refused(tmp_path, capsys):
    # en-ru sets against a zh-en corpus (its prep.json is all the consistency step reads of a
    # corpus whose text was given tokenized)
    corpus = tmp_path / "zh-en"
    write(corpus / "prep.json", json.dumps({"source_lang": "zh", "target_lang": "en",
                                            "tokenizers": {"zh": "given", "en": "given"}}))
    sets = write(tmp_path / "deixis_test.json", json.dumps(VOITA_LIKE))
    out = tmp_path / "consistency"
    message = failing(["consistency", "--json", sets, "--prep", str(corpus), "--out", str(out)], capsys)
    assert f"{sets}: its sources ('src') are in Latin script and its candidates ('dst') in Cyrillic script, but " \
           f"the corpus {corpus} translates zh -> en (Han -> Latin script)" in message
    message = failing(["consistency", "--json", sets, "--prep", str(corpus), "--out", str(out),
                       "--source-lang", "en", "--target-lang", "ru"], capsys)
    assert (f"the sets are en -> ru (--source-lang/--target-lang), but the corpus {corpus} translates zh -> en"
            in message)
    assert not out.exists()
    zh_en = write(tmp_path / "zh_en.json", json.dumps([{
        "src": "我 看见 你 了 。 _eos 是 吗 ？", "dst": ["I saw you . _eos Did you ?", "I saw you . _eos Do you ?"],
        "true_ind": 0, "ctx_dist": 1}], ensure_ascii=False))
    assert prepare.main(["consistency", "--json", zh_en, "--prep", str(corpus), "--out", str(out)]) == 0
    # the scorer checks the languages a prepared folder was made for against the model's
    manifest = write(tmp_path / "prepared" / "consistency.json",
                     json.dumps({"source_lang": "en", "target_lang": "ru", "sets": {}}))
    with pytest.raises(DataError, match="prepared for en -> ru, but the model translates zh -> en"):
        contrastive_files([os.path.dirname(manifest)], ("zh", "en"))


# ----------------------------------------------------------------------------------------
# Item 12: truecasing changes only what post-processing can undo

SENTENCES = ["One day, Los Angeles Times columnist Steve Lopez heard music.",
             "He heard Beethoven's First and Fourth symphonies.",
             "It was a beautiful fish: flavorful, textured.",
             'And then he added, "We\'re a world unto ourselves."',
             "The times were first states of the world."]


def test_truecasing_changes_only_the_first_word(tmp_path):
    tokenizer = Preprocessor("en")
    tokenized = [tokenizer.tokenize(s) for s in SENTENCES]
    # a truecaser that has seen "times", "first", "states", "we" and "the" mostly lower-cased
    model = train_truecaser(tokenized + ["the times and the first states , we said ."] * 3, str(tmp_path / "tc.en"))
    preprocessor = Preprocessor("en", truecase_model=model)
    processed = [preprocessor(s) for s in SENTENCES]
    assert processed[0] == "One day , Los Angeles Times columnist Steve Lopez heard music ."
    assert processed[4].startswith("the times")  # the first word: lower-cased, given back below
    assert [Postprocessor("en")(p) for p in processed] == SENTENCES
    # Moses' truecaser (corpora prepared before) rewrote "Times" and "First" mid-sentence
    moses = Preprocessor("en", truecase_model=model, truecasing="moses")
    assert "Angeles times" in moses(SENTENCES[0])


# ----------------------------------------------------------------------------------------
# Item 13: training without a train split


@needs_fairseq
def test_train_without_a_train_split_says_what_is_missing(synthetic, tmp_path):
    corpus = tmp_path / "corpus"  # the state of ../shared: valid and test only
    shutil.copytree(synthetic, corpus, ignore=lambda directory, names: [n for n in names if n.startswith("train.")])
    save_dir = tmp_path / "run"
    result = subprocess.run([os.path.join(ROOT, "scripts", "train.sh"), os.path.join(ROOT, "configs", "demo",
                             "transformer_L1.sh"), str(corpus), str(save_dir)], capture_output=True, text=True)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        f"error: {corpus} has no binarized 'train' split to train on (its splits: test,valid): prepare the corpus "
        f"with its training text (for IWSLT, train.tags.src-tgt.* in --wit3-dir), or pass --train-subset valid "
        f"for a smoke run"]
    assert not save_dir.exists()


@pytest.mark.parametrize("script", ["prepare_synthetic.sh", "prepare_consistency.sh", "prepare_iwslt15.sh",
                                    "prepare_opensubtitles.sh", "prepare_text.sh"])
def test_every_prepare_script_runs_the_python_rfa_doc_mt_python_names(tmp_path, script):
    """A checkout without its own .venv (a second worktree, a GPU machine) runs the scripts with
    RFA_DOC_MT_PYTHON (scripts/common.sh): the preparation scripts too. Here that Python is a
    stand-in that says it ran."""
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho \"stand-in python: $*\"\nexit 3\n")
    fake.chmod(0o755)
    source = tmp_path / "docs.txt"
    source.write_text("a\n")
    arguments = {"prepare_synthetic.sh": ["--out", str(tmp_path / "out")],
                 "prepare_consistency.sh": [str(tmp_path / "data")],
                 "prepare_iwslt15.sh": [str(tmp_path / "wit3"), str(tmp_path / "data")],
                 "prepare_opensubtitles.sh": ["--data-dir", str(tmp_path / "os"), "--out", str(tmp_path / "data")],
                 "prepare_text.sh": ["--src", str(source), "--tgt", str(source), "--out", str(tmp_path / "data")]}
    done = subprocess.run([os.path.join(ROOT, "scripts", script), *arguments[script]], capture_output=True,
                          text=True, env=dict(os.environ, RFA_DOC_MT_PYTHON=str(fake)), timeout=60)
    assert "stand-in python:" in done.stdout + done.stderr, (done.stdout, done.stderr)
