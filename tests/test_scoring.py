import json

import pytest
import sacrebleu

from rfa_doc_mt.data.io import DataError, Document
from rfa_doc_mt.data.voita import read_contrastive
from rfa_doc_mt.scoring import bleu
from rfa_doc_mt.scoring.consistency import (
    accuracy_report,
    phenomenon_name,
    pooled_report,
)

HYPOTHESES = ["the cat sat on the mat", "a dog barked", "it was loud", "birds sing in the morning", "we listened"]
REFERENCES = ["the cat sat on a mat", "the dog barked", "it was very loud", "birds sing every morning", "we listened"]
DOCUMENTS = [Document("one", 3), Document("two", 2)]


def test_sentence_bleu_is_sacrebleu_corpus_bleu():
    scores = bleu.sentence_and_document_bleu(HYPOTHESES, REFERENCES, DOCUMENTS)
    expected = sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES])
    assert scores["s_bleu"].score == pytest.approx(expected.score)
    assert "nrefs:1" in scores["s_bleu"].signature and "tok:13a" in scores["s_bleu"].signature


def test_document_bleu_joins_each_documents_sentences():
    scores = bleu.sentence_and_document_bleu(HYPOTHESES, REFERENCES, DOCUMENTS)
    joined_hyp = [" ".join(HYPOTHESES[:3]), " ".join(HYPOTHESES[3:])]
    joined_ref = [" ".join(REFERENCES[:3]), " ".join(REFERENCES[3:])]
    assert scores["d_bleu"].score == pytest.approx(sacrebleu.corpus_bleu(joined_hyp, [joined_ref]).score)
    # n-grams across sentence boundaries make d-BLEU differ from s-BLEU here
    assert scores["d_bleu"].score != pytest.approx(scores["s_bleu"].score)


def test_bleu_reports_the_translations_length_against_the_references():
    # the first hypothesis runs on: 6 + 6 more words, against 6, 3, 4, 4 and 2 reference words
    longer = [HYPOTHESES[0] + " and then the cat sat again"] + HYPOTHESES[1:]
    scores = bleu.sentence_and_document_bleu(longer, REFERENCES, DOCUMENTS)
    assert scores["s_bleu"].length_ratio == pytest.approx((12 + 3 + 3 + 5 + 2) / (6 + 3 + 4 + 4 + 2))
    assert scores["d_bleu"].length_ratio == pytest.approx(scores["s_bleu"].length_ratio)
    assert str(scores["s_bleu"]).endswith("), length ratio 1.316")


def test_bleu_cli_checks_line_counts(tmp_path, capsys):
    (tmp_path / "h").write_text("\n".join(HYPOTHESES) + "\n")
    (tmp_path / "r").write_text("\n".join(REFERENCES[:4]) + "\n")
    (tmp_path / "d").write_text("3\tone\n2\ttwo\n")
    with pytest.raises(DataError, match="has 5 lines but .* has 4"):
        bleu.main(["--hyp", str(tmp_path / "h"), "--ref", str(tmp_path / "r"), "--docs", str(tmp_path / "d")])
    (tmp_path / "r").write_text("\n".join(REFERENCES) + "\n")
    bleu.main(["--hyp", str(tmp_path / "h"), "--ref", str(tmp_path / "r"), "--docs", str(tmp_path / "d"),
               "--json", str(tmp_path / "s.json")])
    printed = capsys.readouterr().out
    assert "s-BLEU = " in printed and "d-BLEU = " in printed and "(nrefs:1|case:mixed|eff:no|tok:13a" in printed
    assert set(json.loads((tmp_path / "s.json").read_text())) == {"s_bleu", "d_bleu"}


def contrastive_example(true_ind, ctx_dist, candidates=2):
    context = "a b _eos c d _eos e f _eos "
    return {"src": context + "g h", "dst": [context + f"x{k}" for k in range(candidates)],
            "true_ind": true_ind, "ctx_dist": ctx_dist}


def test_consistency_accuracy_on_a_hand_made_file(tmp_path):
    examples = [contrastive_example(0, 1), contrastive_example(1, 1), contrastive_example(1, 2),
                contrastive_example(2, 3, candidates=3)]
    path = tmp_path / "deixis_dev.json"
    path.write_text(json.dumps(examples))
    loaded = read_contrastive(str(path))
    losses = [[0.5, 0.9],        # right (true 0 lowest)
              [0.5, 0.9],        # wrong (true 1)
              [0.7, 0.7],        # a tie counts as wrong
              [2.0, 3.0, 1.0]]   # right
    report = accuracy_report(loaded, losses)
    assert report["examples"] == 4
    assert report["accuracy"] == pytest.approx(50.0)
    assert report["random"] == pytest.approx(100 * (0.5 + 0.5 + 0.5 + 1 / 3) / 4)
    assert report["by_ctx_dist"] == {"1": {"examples": 2, "accuracy": 50.0},
                                     "2": {"examples": 1, "accuracy": 0.0},
                                     "3": {"examples": 1, "accuracy": 100.0}}
    assert phenomenon_name(str(path)) == "deixis"
    pooled = pooled_report({"a": report, "b": {"examples": 12, "accuracy": 100.0, "random": 50.0}})
    assert pooled["accuracy"] == pytest.approx((50 * 4 + 100 * 12) / 16)


def test_consistency_needs_one_loss_per_candidate():
    with pytest.raises(ValueError):
        accuracy_report([contrastive_example(0, 1)], [[0.1, 0.2, 0.3]])


def test_document_files_are_scored_by_their_own_boundaries(tmp_path):
    """Translations written by translate.sh (<d> lines) against references with empty lines
    between documents: the same scores as one sentence a line with a .docs file; sides whose
    documents disagree are refused."""
    hyp = tmp_path / "hyp.txt"
    hyp.write_text("<d>\n" + "\n".join(HYPOTHESES[:3]) + "\n<d>\n" + "\n".join(HYPOTHESES[3:]) + "\n")
    ref = tmp_path / "ref.txt"
    ref.write_text("\n".join(REFERENCES[:3]) + "\n\n" + "\n".join(REFERENCES[3:]) + "\n")
    scores = bleu.main(["--hyp", str(hyp), "--ref", str(ref)])
    expected = bleu.sentence_and_document_bleu(HYPOTHESES, REFERENCES, DOCUMENTS)
    assert scores["s_bleu"].score == pytest.approx(expected["s_bleu"].score)
    assert scores["d_bleu"].score == pytest.approx(expected["d_bleu"].score)
    assert expected["d_bleu"].score != pytest.approx(expected["s_bleu"].score)
    ref.write_text("\n".join(REFERENCES[:2]) + "\n\n" + "\n".join(REFERENCES[2:]) + "\n")
    with pytest.raises(DataError, match="disagree on where a document starts"):
        bleu.main(["--hyp", str(hyp), "--ref", str(ref)])
