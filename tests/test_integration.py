"""End to end: prepare a tiny corpus, fairseq-train --user-dir, fairseq-generate, collect, score."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from rfa_doc_mt.data.io import read_docs, read_lines

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
USER_DIR = os.path.join(ROOT, "rfa_doc_mt")

pytestmark = pytest.mark.skipif(not shutil.which("fairseq-train", path=BIN + os.pathsep + os.environ.get("PATH", "")),
                                reason="fairseq is not installed")


def run(*command, cwd=None):
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    assert result.returncode == 0, f"{command[0]} failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def tool(name):
    return shutil.which(name, path=BIN) or name


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("corpus") / "data"
    run(sys.executable, "-m", "rfa_doc_mt.data.prepare", "synthetic", "--out", str(out),
        "--train-documents", "40", "--valid-documents", "4", "--test-documents", "6",
        "--contrastive-pairs", "10", "--workers", "1")
    return str(out)


def train(corpus, save_dir, context_size):
    run(tool("fairseq-train"), corpus, "--user-dir", USER_DIR, "--task", "doc_translation",
        "--context-size", str(context_size), "--arch", "doc_transformer_tiny", "--share-all-embeddings",
        "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "2000", "--max-update", "6",
        "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
        "--save-dir", save_dir, "--no-epoch-checkpoints", "--num-workers", "0", "--seed", "3")
    return os.path.join(save_dir, "checkpoint_best.pt")


@pytest.fixture(scope="module")
def models(corpus, tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    return {L: train(corpus, str(runs / f"L{L}"), L - 1) for L in (1, 2)}


@pytest.mark.parametrize("decode_mode", ["free", "forced-prefix"])
def test_generate_collect_and_score(corpus, models, tmp_path, decode_mode):
    log = tmp_path / "generate.log"
    log.write_text(run(tool("fairseq-generate"), corpus, "--user-dir", USER_DIR, "--task", "doc_translation",
                       "--context-size", "1", "--decode-mode", decode_mode, "--path", models[2],
                       "--gen-subset", "test", "--beam", "2", "--batch-size", "16", "--max-len-b", "40"))
    prefix = str(tmp_path / "test")
    run(sys.executable, "-m", "rfa_doc_mt.generation.collect", str(log), "--data", corpus, "--split", "test",
        "--target-lang", "tgt", "--out", prefix)
    references = read_lines(os.path.join(corpus, "test.ref.tgt"))
    translations = read_lines(prefix + ".hyp")
    assert len(translations) == len(references)
    assert read_docs(prefix + ".docs") == read_docs(os.path.join(corpus, "test.docs"))
    assert all("<sep>" not in line for line in translations), "a window's context leaked into the output"
    printed = run(sys.executable, "-m", "rfa_doc_mt.scoring.bleu", "--hyp", prefix + ".hyp", "--ref", prefix + ".ref",
                  "--docs", prefix + ".docs", "--json", prefix + ".bleu.json")
    assert "s-BLEU = " in printed and "d-BLEU = " in printed
    scores = json.loads(open(prefix + ".bleu.json").read())
    assert 0.0 <= scores["s_bleu"]["score"] <= 100.0


def test_sentence_level_model_scores_exactly_chance_on_mirrored_sets(corpus, models, tmp_path):
    """The contrastive sets come in mirrored pairs, so an L=1 model gets exactly one of each pair."""
    report_path = tmp_path / "consistency.json"
    printed = run(sys.executable, "-m", "rfa_doc_mt.scoring.consistency", "--path", models[1], "--data", corpus,
                  "--sets", os.path.join(corpus, "consistency"), "--json", str(report_path))
    report = json.loads(report_path.read_text())
    assert set(report) == {"anaphora", "deixis", "ellipsis_vp", "lex_cohesion", "pooled"}
    for phenomenon, result in report.items():
        assert result["accuracy"] == pytest.approx(50.0), phenomenon
        assert result["random"] == pytest.approx(50.0)
    assert "| pooled |" in printed


def test_generate_names_a_window_over_the_position_limit(corpus, models):
    result = subprocess.run(
        [tool("fairseq-generate"), corpus, "--user-dir", USER_DIR, "--task", "doc_translation",
         "--context-size", "3", "--max-source-positions", "12", "--path", models[2], "--gen-subset", "test"],
        capture_output=True, text=True)
    assert result.returncode != 0
    assert "test.docs: the source window of document" in result.stderr
