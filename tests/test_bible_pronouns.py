"""The Bible's contrastive pronoun set (rfa_doc_mt/data/bible_pronouns.py and what `prepare bible`
writes into DIR/consistency): finding and flipping Spanish third-person pronouns, the English
check, the antecedent label, the JSON the project's reader accepts; end to end on the installed
modules where they are.

No Bible text is in this file: every sentence below is invented."""

import json
import os
import shutil
import sys
from collections import Counter

import pytest

from rfa_doc_mt.data import bible_pronouns, prepare
from rfa_doc_mt.data.bible_pronouns import (
    AGREEMENT,
    BEYOND_CONTEXT,
    ENCLITIC,
    ENGLISH_GENDERED,
    ENGLISH_NO_OPEN,
    FEMININE,
    FIRST_VERSE,
    MASCULINE,
    NO_PRONOUN,
    NOUN,
    PLURAL,
    PROCLITIC,
    SINGULAR,
    STRESSED_FORM,
    TWO_PRONOUNS,
    UNSURE,
    UNSURE_WORD,
    VERB,
    SpanishLexicon,
    build_pronoun_sets,
    english_reason,
    find_pronouns,
    flip,
    spanish_reason,
    write_pronoun_sets,
)
from rfa_doc_mt.data.contrastive_formats import read_contrastive_set
from rfa_doc_mt.data.io import DataError
from rfa_doc_mt.data.staging import check_replaceable
from rfa_doc_mt.data.voita import phenomenon_name, read_contrastive, split_sentences

# Invented Spanish whose word pairs give the lexicon its evidence: "puso", "hace" and "lleva"
# follow clitics and "no" (verbs); "casa", "piedra", "mesa", "libro", "hombres", "mujeres" follow
# determiners (nouns); "era" follows both (either); "agua" takes "el" but "esta" (feminine); the
# infinitives "tomar", "hacer", the plain "toma" and the participle "ido" are words of it; it
# writes no accent on a capital (no "Él").
LEXICON_TEXT = [
    "No puso nada en la mesa. Se puso el sombrero. No hace frío. Se hace tarde.",
    "No lleva nada. Se lleva el libro. Le lleva flores. Me lleva a casa.",
    "La casa es grande. Una casa nueva. Esta casa y aquella casa. Su casa está lejos.",
    "La piedra es dura. Una piedra gris. Esta piedra. Mi piedra. La mesa es larga. Una mesa. Esta mesa.",
    "El libro es rojo. Un libro. Este libro. Aquel libro. Los hombres llegan. Estos hombres. Unos hombres.",
    "Las mujeres cantan. Estas mujeres. Unas mujeres. El agua está fría. Esta agua. Aquella agua.",
    "No era tarde. Ya no era joven. Yo era feliz. Una era de trigo.",
    "Quiere tomar el libro. Quiere hacer la cena. Toma el pan. Dar es bueno. Pon el vaso. Se ha ido.",
    "El muchacho y Ana hablan. Habla con él. Ella canta. Ellos cantan. Ellas bailan.",
    "Fue al pilar. Un pilar alto. Su pilar. Quiere pilar el grano.",
]


@pytest.fixture(scope="module")
def lexicon():
    return SpanishLexicon(LEXICON_TEXT)


def pronouns_of(text, lexicon):
    return [(p.word, p.form, p.gender, p.number) for p in find_pronouns(text, lexicon).pronouns]


# ---------------------------------------------------------------------------------------
# What a word after la/lo/los/las is


def test_the_lexicon_tells_verbs_from_nouns_by_the_words_before_them(lexicon):
    assert lexicon.kind("puso") == VERB  # after no, se: a verb
    assert lexicon.kind("tomó") == VERB  # an accented last vowel: a preterite
    assert lexicon.kind("tomase") == VERB and lexicon.kind("tomare") == VERB  # subjunctives of "tomar"
    assert lexicon.kind("casa") == NOUN  # after la, una, esta
    assert lexicon.kind("era") == UNSURE  # after no and se, and after una
    assert lexicon.kind(None) == UNSURE  # nothing after: punctuation
    assert lexicon.kind("zorbo") == NOUN  # never seen: not a verb
    assert not lexicon.subjunctive("clase")  # no "clar": not a verb
    # "pilar" is written after determiners (and once as an infinitive): "pilares" is its plural, a
    # noun, not the future subjunctive of "pilar"; "pilaren" is
    assert lexicon.kind("pilares") == NOUN and lexicon.subjunctive("pilaren")


# ---------------------------------------------------------------------------------------
# Finding the pronouns


@pytest.mark.parametrize("text, expected", [
    # articles before nouns are not pronouns; before a verb the same word is
    ("Pedro tomó la piedra y la puso en la mesa.", [("la", PROCLITIC, FEMININE, SINGULAR)]),
    ("Los hombres llegaron y los hace sentar.", [("los", PROCLITIC, MASCULINE, PLURAL)]),
    ("Lo puso allí.", [("Lo", PROCLITIC, MASCULINE, SINGULAR)]),
    ("Lo que dijo era bueno.", []),  # neuter article before "que"
    ("Las mujeres cantan en la casa.", []),
    # enclitics on infinitives, imperatives, gerunds, preterites, with a dative before
    ("Quiere tomarlo ahora.", [("tomarlo", ENCLITIC, MASCULINE, SINGULAR)]),
    ("Quiere hacerla bien.", [("hacerla", ENCLITIC, FEMININE, SINGULAR)]),
    ("Tómalos ahora.", [("Tómalos", ENCLITIC, MASCULINE, PLURAL)]),
    ("Ponla aquí.", [("Ponla", ENCLITIC, FEMININE, SINGULAR)]),
    ("Y tomándolas se fue.", [("tomándolas", ENCLITIC, FEMININE, PLURAL)]),
    ("Y tomólo con cuidado.", [("tomólo", ENCLITIC, MASCULINE, SINGULAR)]),
    ("Tomadla pronto.", [("Tomadla", ENCLITIC, FEMININE, SINGULAR)]),
    ("Dámelo ya.", [("Dámelo", ENCLITIC, MASCULINE, SINGULAR)]),
    # words that end like an enclitic but are not one
    ("El cielo y la escuela, sola y calla, malo y velo, sólo ídolos.", []),
    ("Aquella casa y aquellos hombres.", []),
    # stressed pronouns; the module's capital El before a verb is the pronoun, before a noun the article
    ("Habló con él.", [("él", STRESSED_FORM, MASCULINE, SINGULAR)]),
    ("Ella canta.", [("Ella", STRESSED_FORM, FEMININE, SINGULAR)]),
    ("Cantan con ellos y ellas.", [("ellos", STRESSED_FORM, MASCULINE, PLURAL),
                                   ("ellas", STRESSED_FORM, FEMININE, PLURAL)]),
    ("El puso el libro allí.", [("El", STRESSED_FORM, MASCULINE, SINGULAR)]),
    ("El libro es rojo.", []),
])
def test_pronouns_are_found_and_articles_are_not(lexicon, text, expected):
    assert pronouns_of(text, lexicon) == expected


def test_a_word_that_may_be_either_refuses_the_verse(lexicon):
    found = find_pronouns("Pedro la era de trigo.", lexicon)
    assert found.unsure == ["la"] and spanish_reason(found) == UNSURE_WORD
    assert spanish_reason(find_pronouns("Y no la puso.", lexicon)) is None
    assert spanish_reason(find_pronouns("Él la puso allí.", lexicon)) == TWO_PRONOUNS
    assert spanish_reason(find_pronouns("La casa es grande.", lexicon)) == NO_PRONOUN


# ---------------------------------------------------------------------------------------
# Flipping


@pytest.mark.parametrize("text, flipped", [
    ("Y la puso allí.", "Y lo puso allí."),
    ("Lo puso allí.", "La puso allí."),
    ("Quiere tomarlo.", "Quiere tomarla."),
    ("Tómalos ahora.", "Tómalas ahora."),  # the accent stays: the stress does not move
    ("Y tomándolas se fue.", "Y tomándolos se fue."),
    ("Habló con él.", "Habló con ella."),
    ("Habló con ella.", "Habló con él."),
    ("Cantan con ellos.", "Cantan con ellas."),
    ("Ellas bailan.", "Ellos bailan."),
    ("El puso el libro allí.", "Ella puso el libro allí."),
    ("Ella canta.", "El canta."),  # the module writes no accent on capitals
])
def test_the_variant_flips_the_gender_and_keeps_accents_and_casing(lexicon, text, flipped):
    [pronoun] = find_pronouns(text, lexicon).pronouns
    assert flip(text, pronoun, lexicon) == flipped


def test_a_module_that_accents_capitals_gets_el_with_its_accent():
    lexicon = SpanishLexicon(LEXICON_TEXT + ["Él vino."])
    [pronoun] = find_pronouns("Ella canta.", lexicon).pronouns
    assert flip("Ella canta.", pronoun, lexicon) == "Él canta."


# ---------------------------------------------------------------------------------------
# The English side


def test_the_english_must_leave_the_gender_open(lexicon):
    [clitic] = find_pronouns("Y la puso allí.", lexicon).pronouns
    [stressed] = find_pronouns("Habló con él.", lexicon).pronouns
    [plural] = find_pronouns("Cantan con ellos.", lexicon).pronouns
    assert english_reason("And he put it there.", clitic) is None  # the subject "he" is another word
    assert english_reason("And he put the cup there.", clitic) == ENGLISH_NO_OPEN
    assert english_reason("And she put its lid there.", clitic) == ENGLISH_NO_OPEN  # its: Spanish "su"
    assert english_reason("He put him and it there.", clitic) == ENGLISH_GENDERED
    assert english_reason("He spoke with it.", stressed) == ENGLISH_GENDERED  # él may be "he"
    assert english_reason("The wind spoke with it.", stressed) is None
    assert english_reason("They sing with it.", plural) is None
    assert english_reason("She sings with it.", plural) == ENGLISH_NO_OPEN  # singular it, plural ellos
    assert english_reason("She sings with them.", plural) is None


# ---------------------------------------------------------------------------------------
# Examples, the antecedent label and the JSON


def chapter(name, pairs):
    return (name, [english for english, _ in pairs], [spanish for _, spanish in pairs], list(range(1, len(pairs) + 1)))


CHAPTERS = [
    chapter("Zorb.1", [
        ("Ann found a stone and took it.", "Ana halló una piedra y la tomó."),  # first verse: refused
        ("She carried it home.", "Y la puso en la mesa."),  # antecedent in the context (distance 1)
        ("The men came.", "Los hombres llegaron."),  # no pronoun
        ("She took the stone and set it down.", "Tomó la piedra y la puso allí."),  # in the verse
        ("And he set it there.", "Y él la puso allí."),  # two pronouns
        ("They sang with them themselves.", "Cantaban con ellos mismos."),  # agreement beside it
        ("Then the wind carried it away.", "Y luego lo puso lejos."),  # no masculine noun in reach
    ]),
]


def test_examples_are_labelled_by_where_a_noun_of_the_gender_stands(lexicon):
    sets = build_pronoun_sets(CHAPTERS, lexicon)
    assert sets.verses == 7
    assert sets.refused == Counter({FIRST_VERSE: 1, NO_PRONOUN: 1, TWO_PRONOUNS: 1, AGREEMENT: 1})
    assert [example["verse"] for example in sets.examples["verse"]] == ["Zorb.1.4"]
    assert [example["verse"] for example in sets.examples["context"]] == ["Zorb.1.2", "Zorb.1.7"]
    first, beyond = sets.examples["context"]
    assert first["ctx_dist"] == 1 and sets.examples["verse"][0]["ctx_dist"] == 0
    assert beyond["ctx_dist"] == BEYOND_CONTEXT  # neither the verse nor the three before hold one
    # the context is the chapter's verses before, at most three of them, on both sides
    assert split_sentences(first["src"], "src") == ["Ann found a stone and took it.", "She carried it home."]
    assert split_sentences(first["dst"][0], "dst") == ["Ana halló una piedra y la tomó.", "Y la puso en la mesa."]
    assert split_sentences(first["dst"][1], "dst") == ["Ana halló una piedra y la tomó.", "Y lo puso en la mesa."]
    assert split_sentences(beyond["dst"][1], "dst")[-1] == "Y luego la puso lejos."
    assert len(split_sentences(beyond["src"], "src")) == 4
    assert first["true_ind"] == 0 and first["categories"] == {
        "pronoun": "la", "form": PROCLITIC, "gender": FEMININE, "number": SINGULAR}
    record = sets.record()
    assert record["examples"] == {"pronoun_gender_verse": 1, "pronoun_gender_context": 2}
    assert record["refused"][FIRST_VERSE] == 1 and record["by_pronoun"] == {"la": 2, "lo": 1}
    assert record["verses"] == sum(record["refused"].values()) + sum(record["examples"].values())


def test_the_sets_are_written_in_the_format_the_projects_reader_accepts(lexicon, tmp_path):
    sets = build_pronoun_sets(CHAPTERS, lexicon)
    paths = write_pronoun_sets(sets, str(tmp_path / "sets"))
    assert [os.path.basename(path) for path in paths] == ["pronoun_gender_verse.json", "pronoun_gender_context.json"]
    for path, key in zip(paths, ("verse", "context")):
        read = read_contrastive_set(path)
        assert read.format == "voita" and read.examples == sets.examples[key]
        assert read_contrastive(path) == sets.examples[key]
        assert phenomenon_name(path) in ("pronoun_gender_verse", "pronoun_gender_context")
    sets.examples["verse"] = []
    assert [os.path.basename(path) for path in write_pronoun_sets(sets, str(tmp_path / "some"))] == [
        "pronoun_gender_context.json"]  # a phenomenon without examples is no file (the reader refuses empty sets)


def test_other_language_pairs_and_corpora_without_test_get_no_set_and_say_why():
    assert "en -> es only" in bible_pronouns.skip_reason("en", "de", {"test": [1]})
    assert "en -> es only" in bible_pronouns.skip_reason("es", "en", {"test": [1]})
    assert "no test split" in bible_pronouns.skip_reason("en", "es", {"train": [1]})
    assert bible_pronouns.skip_reason("en", "es", {"test": [1]}) is None
    assert bible_pronouns.report_lines({"skipped": "why"}) == ["note: no contrastive pronoun set (consistency/): why"]


def test_a_bible_corpus_may_be_replaced_with_its_own_consistency_folder(tmp_path):
    out = tmp_path / "corpus"
    (out / "consistency").mkdir(parents=True)
    prep = {"corpus": "bible", "source_lang": "en", "target_lang": "es", "tokenizers": {}}
    (out / "prep.json").write_text(json.dumps(prep))
    check_replaceable(str(out), "prep.json")
    (out / "prep.json").write_text(json.dumps(dict(prep, corpus="text")))
    with pytest.raises(DataError, match="consistency/"):
        check_replaceable(str(out), "prep.json")


# ---------------------------------------------------------------------------------------
# End to end on the installed modules (Debian's sword-text-web and sword-text-sparv)

needs_fairseq = pytest.mark.skipif(not (shutil.which("fairseq-preprocess") or os.path.isfile(
    os.path.join(os.path.dirname(sys.executable), "fairseq-preprocess"))), reason="fairseq-preprocess not installed")
# Mark and Luke: 40 kept chapters, one of them in test (the split rule's 31st), with examples of both phenomena
BOOKS = "Mark,Luke"


@pytest.fixture(scope="module")
def installed():
    pytest.importorskip("pysword", reason="pysword not installed (pip install pysword)")
    from rfa_doc_mt.data import bible

    library = bible.SwordLibrary()
    missing = [name for name in ("engWEB2015eb", "spaRV1909eb") if name not in library.confs]
    if missing:
        pytest.skip(f"SWORD modules {', '.join(missing)} not installed (apt-get install sword-text-web "
                    f"sword-text-sparv)")
    return library


@pytest.mark.slow
@needs_fairseq
def test_prepare_bible_writes_the_pronoun_sets_where_the_evaluation_reads_them(installed, tmp_path, capsys,
                                                                             monkeypatch):
    out = tmp_path / "bible"
    argv = ["bible", "--out", str(out), "--books", BOOKS, "--bpe-size", "500", "--workers", "1"]

    def fail(*args, **kwargs):
        raise DataError("injected failure while writing the sets")

    with monkeypatch.context() as patched:  # a failure at the last step leaves nothing behind
        patched.setattr(prepare, "write_consistency_sets", fail)
        assert prepare.main(argv) == 1
        assert "injected failure" in capsys.readouterr().err
        assert not out.exists() and not [entry for entry in os.listdir(tmp_path) if entry.startswith(".bible.")]

    assert prepare.main(argv) == 0, capsys.readouterr().err
    record = json.loads((out / "prep.json").read_text())["bible"]["pronoun_sets"]
    assert "skipped" not in record and record["verses"] > 20
    assert sum(record["refused"].values()) + sum(record["examples"].values()) == record["verses"]
    manifest = json.loads((out / "consistency" / "consistency.json").read_text())
    assert (manifest["source_lang"], manifest["target_lang"], manifest["processed"]) == ("en", "es", True)
    for name, count in record["examples"].items():
        assert count > 0, f"{name}: no example in {BOOKS}'s test chapter: choose other books for this test"
        examples = read_contrastive(str(out / "consistency" / f"{name}.json"))
        assert len(examples) == count == manifest["sets"][f"{name}.json"]["examples"]
        for example in examples:
            reference, variant = (split_sentences(candidate, "dst") for candidate in example["dst"])
            assert reference[:-1] == variant[:-1] and reference[-1] != variant[-1]  # only the verse differs
            assert 2 <= len(reference) <= 4 and len(split_sentences(example["src"], "src")) == len(reference)
            assert "▁" in example["src"]  # processed like the corpus: BPE pieces
        raw = json.loads((out / "raw" / "consistency" / f"{name}.json").read_text())
        assert [example["verse"] for example in raw] == [example["verse"] for example in examples]
    # the corpus itself is what it would be without the sets
    assert (out / "test.en-es.es.bin").is_file() and (out / "test.ref.es").is_file()
    # prepared again into the same folder: the sets are its own output, replaced without --force
    assert prepare.main(argv) == 0, capsys.readouterr().err
