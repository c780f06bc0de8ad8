"""Translation from Python (``rfa_doc_mt.Translator``) with the checkpoint of tests/fixtures/rfa_fixed_tau
(a tiny RFA-sgate model of the synthetic corpus, L = 2): docs/training.md's example run as written,
the package's lazy attribute, and what translation says about sentences too long for the model."""

import os
import random
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "rfa_fixed_tau")
CHECKPOINT = os.path.join(FIXTURE, "checkpoint.pt")

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny model (conftest.one_thread)


def documented_block(document: str, heading: str, language: str) -> str:
    """The first ```language block after ``heading`` in ``document``."""
    with open(os.path.join(ROOT, document), encoding="utf-8") as handle:
        text = handle.read()
    return re.search(rf"```{language}\n(.*?)```", text[text.index(heading):], re.S).group(1)


def synthetic_sentence(words: int, seed: int) -> str:
    """``words`` words of the fixture's source vocabulary (the synthetic corpus's words)."""
    with open(os.path.join(FIXTURE, "dict.src.txt"), encoding="utf-8") as handle:
        vocabulary = [line.split()[0] for line in handle if line.split()[0].isalpha()]
    rng = random.Random(seed)
    return " ".join(rng.choice(vocabulary) for _ in range(words))


def test_the_python_example_of_the_training_docs_runs_as_written(tmp_path, monkeypatch, capsys):
    """docs/training.md#translating-from-python, run where its paths lead to the fixture: it prints
    the translation of every sentence, document by document, with its progress line, and what it
    prints is what the command-line tool writes for the same documents."""
    from rfa_doc_mt.data.plain_text import read_documents
    from rfa_doc_mt.generation import translate

    block = documented_block("docs/training.md", "## Translating from Python", "python")
    (tmp_path / "runs" / "my-en-de").mkdir(parents=True)
    (tmp_path / "runs" / "my-en-de" / "checkpoint_best.pt").symlink_to(CHECKPOINT)
    (tmp_path / "data-bin").mkdir()
    (tmp_path / "data-bin" / "my-en-de").symlink_to(FIXTURE)
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__main__"}
    exec(compile(block, "docs/training.md", "exec"), namespace)
    printed = capsys.readouterr()
    documents, translations = namespace["documents"], namespace["translations"]
    assert [len(document) for document in translations] == [len(document) for document in documents] == [2, 3]
    assert all(sentence.strip() for document in translations for sentence in document)
    assert printed.out == "".join("\n".join(document) + "\n\n" for document in translations)
    assert "translate: batch 1 of 1, 5 of 5 windows" in printed.err
    # the command-line tool on the same documents (a file with an empty line between documents)
    source = tmp_path / "documents.txt"
    source.write_text("\n\n".join("\n".join(document) for document in documents) + "\n", encoding="utf-8")
    assert translate.main(["--checkpoint", CHECKPOINT, "--data", FIXTURE, "--input", str(source),
                           "--output", str(tmp_path / "translated.txt"), "--quiet"]) == 0
    written = read_documents(str(tmp_path / "translated.txt"), "blank").documents
    assert [document.sentences for document in written] == translations


def test_translator_is_a_lazy_attribute_of_the_package():
    """``from rfa_doc_mt import Translator`` works, and a light tool's start (python -m
    rfa_doc_mt.scoring.bleu, as the package sees it) imports neither it nor torch nor fairseq."""
    import rfa_doc_mt
    from rfa_doc_mt import Translator
    from rfa_doc_mt.generation.translate import Translator as defined

    assert Translator is defined and "Translator" in dir(rfa_doc_mt)
    with pytest.raises(AttributeError, match="no attribute 'Translators'"):
        rfa_doc_mt.Translators
    code = ("import sys\n"
            "sys.argv, sys.orig_argv = ['-m'], [sys.executable, '-m', 'rfa_doc_mt.scoring.bleu']\n"
            "import rfa_doc_mt\n"
            "print('Translator' in dir(rfa_doc_mt), sorted(name for name in"
            " ('torch', 'fairseq', 'rfa_doc_mt.generation.translate') if name in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "True []\n"


def test_a_sentence_over_the_source_positions_is_translated_in_parts_and_said_so(capsys):
    """A three-sentence document whose first sentence has 3000 words, more than the model's 1024
    source positions, at L = 3: one warning says that sentence is translated in 3 parts (none about
    its context: it has none), each part's window is the part alone, the next two sentences are
    translated without it as context and say so, and progress counts the 5 windows."""
    from rfa_doc_mt.generation.translate import Translator, context_starts

    translator = Translator(CHECKPOINT, FIXTURE, cpu=True, max_len_a=0, max_len_b=4)  # short hypotheses
    translator.task.cfg.context_size = 2  # L = 3: each part would have the parts before it as context
    document = [synthetic_sentence(3000, seed=1), synthetic_sentence(5, seed=2), synthetic_sentence(4, seed=3)]
    reported = []
    translations = translator.translate([document], progress=lambda *arguments: reported.append(arguments))
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "warning: document 1, sentence 1 is longer than the model's 1024 source positions (3000 tokens): translated "
        "in 3 parts, each without context, joined",
        "warning: document 1, sentence 2: translated with 1 context sentence fewer (sentence 1 was cut into parts, "
        "and parts of a sentence are no context)",
        "warning: document 1, sentence 3: translated with 1 context sentence fewer (sentence 1 was cut into parts, "
        "and parts of a sentence are no context)"]
    assert reported[-1] == (1, 1, 5, 5)  # batch 1 of 1, 5 of 5 windows
    assert len(translations) == 1 and len(translations[0]) == 3 and all(translations[0])
    # the windows as translated: each part alone; sentence 2 alone; sentence 3 with sentence 2
    units = translator.encode(translator_documents(document))
    assert [unit.sentence for unit in units] == [0, 0, 0, 1, 2]
    dataset = translator.dataset(units, translator_documents(document))
    capsys.readouterr()
    assert dataset.index.first_sentence.tolist() == [0, 1, 2, 3, 3]
    assert context_starts(units).tolist() == [0, 1, 2, 3, 3]


def translator_documents(*documents):
    from rfa_doc_mt.generation.translate import as_text_documents

    return as_text_documents(list(documents))


def test_a_window_over_the_source_positions_loses_context_and_says_so(capsys):
    """Positions shrunk to 12 (L = 2): sentence 2's window (8 + 6 words and their ends, 16
    positions) is translated without sentence 1, with a warning that names the document, the
    sentence and its line; a sentence whose window fits says nothing."""
    from rfa_doc_mt.data.text import TextDocument
    from rfa_doc_mt.generation.translate import Translator

    translator = Translator(CHECKPOINT, FIXTURE, cpu=True)
    translator.max_positions = (12, 12)
    document = TextDocument("talk", [synthetic_sentence(8, seed=4), synthetic_sentence(6, seed=5),
                                     synthetic_sentence(2, seed=6)], line_numbers=[2, 3, 4])
    translations = translator.translate([document], progress=True)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == ("warning: document 'talk' (document 1), sentence 2 (line 3): translated with 1 context "
                      "sentence fewer (its window is over the model's 12 source positions)")
    assert len(err) == 2 and err[1].startswith("translate: batch 1 of 1, 3 of 3 windows, ")
    assert [len(document) for document in translations] == [3]


@pytest.mark.parametrize("documents, message", [
    (["a whole document as one string"], "document 1 is a string: give each document as a list of its sentences"),
    ([["ka le"], []], "document 2 has no sentences"),
    ([["ka le", 3]], "document 1, sentence 2 is not a string: 3 (int)")])
def test_documents_that_are_not_lists_of_sentences_are_refused(documents, message):
    from rfa_doc_mt.data.io import DataError
    from rfa_doc_mt.generation.translate import Translator

    translator = Translator(CHECKPOINT, FIXTURE, cpu=True)
    with pytest.raises(DataError, match=re.escape(message)):
        translator.translate(documents)
