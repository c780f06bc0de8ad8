"""ContraPro (Müller et al. 2018) and Bawden et al. 2018's contrastive sets, in the formats their
repositories publish (ZurichNLP/ContraPro: contrapro.json and the documents of its
setup_opensubs.sh; rbawden/discourse-mt-test-sets: anaphora.json, lexical-choice.json), read into
the project's one contrastive format, prepared and reported per category. The fixtures are small
files written here in those formats."""

import json
import os

import pytest

from rfa_doc_mt.data import prepare
from rfa_doc_mt.data.contrastive_formats import DocumentReader, read_contrastive_set
from rfa_doc_mt.data.io import DataError
from rfa_doc_mt.data.voita import read_contrastive, split_sentences
from rfa_doc_mt.scoring.consistency import accuracy_report, format_table


def write(path, content):
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(content if isinstance(content, str) else json.dumps(content, ensure_ascii=False, indent=2))
    return str(path)


# ---- ContraPro -----------------------------------------------------------------------------------

DOCUMENT = "1921_12806_3712161"
ENGLISH = ["Where is the story?", "I told you a story.", "It was long.", "You liked the song.",
           "Say, if you get near a song, play it.", "What about the book?"]
GERMAN = ["Wo ist die Geschichte?", "Ich habe dir eine Geschichte erzählt.", "Sie war lang.",
          "Dir gefiel das Lied.", "Wenn Ihnen ein Song über den Weg läuft, spielen Sie ihn einfach.",
          "Was ist mit dem Buch?"]


def contrapro_entry(segment, distance, pronoun="ihn", reference=None, contrastive=("es", "sie"), **changes):
    """An entry of contrapro.json (the fields of ZurichNLP/ContraPro's release; segment ids from 1)."""
    reference = reference or GERMAN[segment - 1]
    entry = {"ante distance": distance, "corpus": "opensubs1921-ende", "document id": DOCUMENT + ".de",
             "errors": [{"contrastive": reference.replace(f" {pronoun} ", f" {other} "), "replacement": other,
                         "type": "pronominal coreference"} for other in contrastive],
             "intrasegmental": distance == 0, "ref pronoun": pronoun.capitalize(), "ref segment": reference,
             "segment id": segment, "src pronoun": "it", "src segment": ENGLISH[segment - 1]}
    entry.update(changes)
    return entry


def contrapro_fixture(directory, entries=None, name="contrapro.json", languages=("en", "de")):
    """(contrapro.json, documents folder): one document in setup_opensubs.sh's layout."""
    documents = directory / "documents"
    write(documents / "1921" / f"{DOCUMENT}.{languages[0]}", "".join(line + "\n" for line in ENGLISH))
    write(documents / "1921" / f"{DOCUMENT}.{languages[1]}", "".join(line + "\n" for line in GERMAN))
    if entries is None:
        entries = [contrapro_entry(5, 1),
                   contrapro_entry(3, 2, pronoun="sie", contrastive=("er", "es"), reference="Damals war sie lang ."),
                   contrapro_entry(6, 5, pronoun="es", reference="Was ist es mit dem Buch ?", contrastive=("er",))]
    return write(directory / name, entries), str(documents)


def test_contrapro_entries_take_their_context_from_the_documents(tmp_path):
    path, documents = contrapro_fixture(tmp_path)
    converted = read_contrastive_set(path, documents=documents)
    assert converted.format == "contrapro" and converted.languages == ("en", "de")
    first, second, third = converted.examples
    # three sentences before segment 5 (lines 2-4), on both sides, then the sentence itself
    assert split_sentences(first["src"], "src") == ENGLISH[1:5]
    assert [split_sentences(c, "dst")[:3] for c in first["dst"]] == [GERMAN[1:4]] * 3
    assert [split_sentences(c, "dst")[3] for c in first["dst"]] == [
        GERMAN[4], GERMAN[4].replace(" ihn ", " es "), GERMAN[4].replace(" ihn ", " sie ")]
    assert first["true_ind"] == 0 and first["ctx_dist"] == 1
    assert first["categories"] == {"pronoun": "ihn", "ante distance": "1", "intrasegmental": "false"}
    # near the start of the document: the two sentences there are
    assert split_sentences(second["src"], "src") == ENGLISH[:3]
    assert split_sentences(second["dst"][1], "dst") == GERMAN[:2] + ["Damals war er lang ."]
    # an antecedent further back than the context carried keeps its distance; the paper's bucket
    assert third["ctx_dist"] == 5 and third["categories"]["ante distance"] == ">3"
    assert len(third["dst"]) == 2
    one = read_contrastive_set(path, documents=documents, context_sentences=1).examples[0]
    assert split_sentences(one["src"], "src") == ENGLISH[3:5]


def test_contrapro_documents_in_one_folder_and_other_languages(tmp_path):
    """setup_opensubs.sh sorts documents into year folders; a flat folder is read too, and
    --source-lang/--target-lang name the files' suffixes."""
    documents = tmp_path / "flat"
    write(documents / f"{DOCUMENT}.src", "".join(line + "\n" for line in ENGLISH))
    write(documents / f"{DOCUMENT}.tgt", "".join(line + "\n" for line in GERMAN))
    path = write(tmp_path / "contrapro.json", [contrapro_entry(5, 1, **{"document id": DOCUMENT + ".tgt"})])
    converted = read_contrastive_set(path, documents=str(documents), languages=("src", "tgt"))
    assert split_sentences(converted.examples[0]["src"], "src") == ENGLISH[1:5]


def test_documents_read_again_once_out_of_the_kept_ones(tmp_path):
    """The reader keeps the last documents read (the whole corpus would not fit): one read again
    after others gives its own lines."""
    _, documents = contrapro_fixture(tmp_path)
    write(tmp_path / "documents" / "1999" / "1999_1_2.en", "One.\nTwo.\n")
    write(tmp_path / "documents" / "1999" / "1999_1_2.de", "Eins.\nZwei.\n")
    read = DocumentReader(documents, ("en", "de"), keep=1)
    for document, first in ((DOCUMENT, GERMAN[0]), ("1999_1_2", "Eins."), (DOCUMENT, GERMAN[0]),
                            (DOCUMENT + ".de", GERMAN[0]), ("1999_1_2.de", "Eins.")):
        assert read(document, "test")[2][0] == first
    assert len(read.read) == 1 and len(read.seen) == 4


@pytest.mark.parametrize("entry, message", [
    (contrapro_entry(5, 1, **{"document id": "1921_1_2.de"}),
     r"document id 1921_1_2\.de, segment id 5: no document files for document id "
     r"'1921_1_2\.de' \(looked for .*1921/1921_1_2\.en \+ .*1921/1921_1_2\.de"),
    (contrapro_entry(5, 1, **{"segment id": 7}), r"segment id 7: no such line in .*\.en \(6 lines; segment ids "
                                                   r"count from 1\)"),
    # 0-based ids (or another document) put another sentence there
    (contrapro_entry(5, 1, **{"segment id": 4}),
     r"segment id 4: .*1921_12806_3712161\.en:4 is 'You liked the song\.', not the entry's 'src segment'"),
    (contrapro_entry(5, 1, errors=[]), r"segment id 5: 'errors' lists no contrastive variant"),
    (contrapro_entry(5, 1, errors=[{"replacement": "es"}]), r"'errors'\[0\] has no 'contrastive' translation"),
    (contrapro_entry(5, 1, **{"ante distance": "1"}), r"'ante distance' must be a whole number, got '1'"),
    ({k: v for k, v in contrapro_entry(5, 1).items() if k != "ref segment"}, r"missing 'ref segment'"),
])
def test_contrapro_bad_entries_are_refused_naming_the_file_and_entry(tmp_path, capsys, entry, message):
    path, documents = contrapro_fixture(tmp_path, [contrapro_entry(5, 1), entry])
    with pytest.raises(DataError, match=r"contrapro\.json: entry 1 \(0-based\).*" + message):
        read_contrastive_set(path, documents=documents)


def test_contrapro_needs_its_documents_and_parallel_files(tmp_path):
    path, documents = contrapro_fixture(tmp_path)
    with pytest.raises(DataError, match=r"contrapro\.json: a ContraPro set.*pass --documents DIR"):
        read_contrastive_set(path)
    write(os.path.join(documents, "1921", f"{DOCUMENT}.de"), "".join(line + "\n" for line in GERMAN[:5]))
    with pytest.raises(DataError, match=r"entry 0 \(0-based\).*\.en has 6 lines but .*\.de has 5"):
        read_contrastive_set(path, documents=documents)
    write(os.path.join(documents, "1921", f"{DOCUMENT}.de"), "\n".join(GERMAN[:3] + ["", *GERMAN[4:]]) + "\n")
    with pytest.raises(DataError, match=r"entry 0 .*segment id 5: context sentence .*\.de:4: empty sentence"):
        read_contrastive_set(path, documents=documents)


# ---- Bawden et al. 2018 --------------------------------------------------------------------------

def anaphora_block(types=True):
    """A block of anaphora.json (rbawden/discourse-mt-test-sets): one source, four pairs."""
    previous = {"bâtiments": "Les bâtiments seront terminés.", "maisons": "Les maisons seront terminées."}
    pairs = []
    for right, noun, gender in (("correct", "bâtiments", "m.pl"), ("semi-correct", "maisons", "f.pl")):
        masculine, feminine = "Ils seront bientôt pleins.", "Elles seront bientôt pleines."
        good, bad = (masculine, feminine) if gender == "m.pl" else (feminine, masculine)
        pair = {right: [previous[noun], good], "incorrect": [previous[noun], bad]}
        if types:
            pair["type"] = gender
        pairs.append(pair)
    return {"inspired by": ["The area covers 12 acres.", "It will become..."],
            "src": ["The buildings will be finished next week.", "Soon they will be full of new residents."],
            "trg": pairs}


def cohesion_block(kind):
    """A block of lexical-choice.json: two examples whose contexts flip the right translation."""
    examples = []
    for context, right, wrong in (("C'est grave, Docteur ?", "enlever ce grain de beauté", "chasser cette taupe"),
                                  ("Les ministres le savent.", "chasser cette taupe", "enlever ce grain de beauté")):
        examples.append({"src": ["Could it be serious?", "We'll have to get rid of that mole."],
                         "trg": {"correct": [context, f"Il va falloir {right}."],
                                 "incorrect": [context, f"Il va falloir {wrong}."]}})
    return {"inspired by": ["You've got a mole."], "type": kind, "examples": examples}


def test_bawden_pairs_become_examples_with_their_previous_sentence(tmp_path):
    # blocks as the authors number them; their evaluate.py reads them in numeric order
    anaphora = read_contrastive_set(write(tmp_path / "anaphora.json", {"10": anaphora_block(),
                                                                       "2": anaphora_block(types=False)}))
    assert anaphora.format == "bawden" and anaphora.languages == ("en", "fr")
    assert [e["group"] for e in anaphora.examples] == ["2", "2", "10", "10"]
    first = anaphora.examples[2]
    assert first["src"] == "The buildings will be finished next week. _eos Soon they will be full of new residents."
    assert first["dst"] == ["Les bâtiments seront terminés. _eos Ils seront bientôt pleins.",
                            "Les bâtiments seront terminés. _eos Elles seront bientôt pleines."]
    assert (first["true_ind"], first["ctx_dist"]) == (0, 1)
    assert first["categories"] == {"variant": "correct", "type": "m.pl"}
    assert anaphora.examples[3]["categories"] == {"variant": "semi-correct", "type": "f.pl"}
    assert anaphora.examples[0]["categories"] == {"variant": "correct"}  # the release without "type"
    cohesion = read_contrastive_set(write(tmp_path / "lexical-choice.json",
                                          {"1": cohesion_block("disambig"), "2": cohesion_block("repet, disambig")}))
    assert [e["categories"]["type"] for e in cohesion.examples] == ["disambig"] * 2 + ["repet, disambig"] * 2
    assert cohesion.examples[1]["dst"][0] == "Les ministres le savent. _eos Il va falloir chasser cette taupe."


@pytest.mark.parametrize("change, message", [
    (lambda block: block["trg"][1]["incorrect"].append("Encore une phrase."),
     r"block '1': 'trg'\[1\]: 'incorrect': expected \[previous sentence, current sentence\]"),
    (lambda block: block["trg"][0].pop("incorrect"),
     r"block '1': 'trg'\[0\]: expected 'correct' or 'semi-correct' \(one of them\) and 'incorrect'"),
    (lambda block: block["trg"][0].update({"semi-correct": block["trg"][0]["correct"]}),
     r"block '1': 'trg'\[0\]: expected 'correct' or 'semi-correct' \(one of them\)"),
    (lambda block: block["src"].__setitem__(1, " "), r"block '1': 'src'\[1\]: empty sentence"),
    (lambda block: block.pop("trg"), r"block '1': neither 'trg' \(a coreference block\) nor 'examples'"),
])
def test_bawden_bad_blocks_are_refused_naming_the_file_and_block(tmp_path, change, message):
    block = anaphora_block()
    change(block)
    path = write(tmp_path / "anaphora.json", {"0": anaphora_block(), "1": block})
    with pytest.raises(DataError, match=r"anaphora\.json: " + message):
        read_contrastive_set(path)
    mixed = write(tmp_path / "mixed.json", {"1": anaphora_block(), "2": cohesion_block("repet")})
    with pytest.raises(DataError, match=r"mixed\.json: block '2': a coherence/cohesion block in a file of coreference"):
        read_contrastive_set(mixed)


# ---- prepared and scored -------------------------------------------------------------------------

def corpus(directory, source_lang, target_lang):
    """A corpus whose text was given tokenized: its prep.json is all `prepare consistency` reads."""
    write(directory / "prep.json", {"source_lang": source_lang, "target_lang": target_lang,
                                    "tokenizers": {source_lang: "given", target_lang: "given"}})
    return str(directory)


def test_prepare_converts_contrapro_and_bawden_and_scores_per_category(tmp_path, capsys):
    contrapro, documents = contrapro_fixture(tmp_path / "ContraPro")
    en_de = corpus(tmp_path / "en-de", "en", "de")
    out = tmp_path / "en-de" / "consistency"
    assert prepare.main(["consistency", "--json", contrapro, "--prep", en_de, "--out", str(out),
                         "--documents", documents, "--context-sentences", "2"]) == 0
    manifest = json.loads((out / "consistency.json").read_text())
    assert manifest["sets"]["contrapro.json"]["format"] == "contrapro"
    assert manifest["sets"]["contrapro.json"]["context_sentences"] == 2
    examples = read_contrastive(str(out / "contrapro.json"))
    assert [len(split_sentences(e["src"], "src")) for e in examples] == [3, 3, 3]
    # one loss per candidate: right, wrong (a contrastive variant lower), right
    report = accuracy_report(examples, [[0.1, 0.5, 0.7], [0.4, 0.3, 0.9], [0.2, 0.6]])
    assert report["accuracy"] == pytest.approx(200 / 3)
    assert report["by_ctx_dist"] == {"1": {"examples": 1, "accuracy": 100.0}, "2": {"examples": 1, "accuracy": 0.0},
                                     "5": {"examples": 1, "accuracy": 100.0}}
    assert report["by_category"]["ante distance"] == {"1": {"examples": 1, "accuracy": 100.0},
                                                      "2": {"examples": 1, "accuracy": 0.0},
                                                      ">3": {"examples": 1, "accuracy": 100.0}}
    assert report["by_category"]["pronoun"]["sie"] == {"examples": 1, "accuracy": 0.0}
    assert "contrapro by ante distance: 1 100.0 (1), 2 0.0 (1), >3 100.0 (1)" in format_table({"contrapro": report})

    # Bawden et al.'s sets are en-fr: refused against the en-de corpus, nothing written
    anaphora = write(tmp_path / "discourse" / "anaphora.json", {"1": anaphora_block()})
    lexical = write(tmp_path / "discourse" / "lexical-choice.json", {"1": cohesion_block("repet")})
    refused = tmp_path / "en-de" / "bawden"
    assert prepare.main(["consistency", "--json", anaphora, "--prep", en_de, "--out", str(refused)]) == 1
    assert ("the sets are en -> fr (Bawden et al. 2018's languages; --source-lang/--target-lang to say otherwise), "
            "but the corpus") in capsys.readouterr().err
    assert not refused.exists()
    en_fr = corpus(tmp_path / "en-fr", "en", "fr")
    out = tmp_path / "en-fr" / "consistency"
    assert prepare.main(["consistency", "--json", anaphora, lexical, "--prep", en_fr, "--out", str(out)]) == 0
    report = accuracy_report(read_contrastive(str(out / "anaphora.json")), [[0.1, 0.2], [0.3, 0.2]])
    assert report["groups"] == ["1", "1"]
    assert report["by_category"] == {"variant": {"correct": {"examples": 1, "accuracy": 100.0},
                                                 "semi-correct": {"examples": 1, "accuracy": 0.0}},
                                     "type": {"f.pl": {"examples": 1, "accuracy": 0.0},
                                              "m.pl": {"examples": 1, "accuracy": 100.0}}}
    assert read_contrastive(str(out / "lexical-choice.json"))[0]["categories"] == {"type": "repet"}


def test_a_bad_set_among_good_ones_leaves_nothing_written(tmp_path, capsys):
    contrapro, documents = contrapro_fixture(tmp_path / "ContraPro")
    bad, _ = contrapro_fixture(tmp_path / "bad", [contrapro_entry(5, 1, **{"segment id": 9})], "shifted.json")
    en_de = corpus(tmp_path / "en-de", "en", "de")
    out = tmp_path / "en-de" / "consistency"
    assert prepare.main(["consistency", "--json", contrapro, bad, "--prep", en_de, "--out", str(out),
                         "--documents", documents]) == 1
    assert f"{bad}: entry 0 (0-based), document id {DOCUMENT}.de, segment id 9: no such line" in capsys.readouterr().err
    assert not out.exists() and not [name for name in os.listdir(out.parent) if name.startswith(".consistency")]
