"""End to end: prepare a tiny corpus, fairseq-train --user-dir, fairseq-generate, collect, score;
and the same through scripts/train.sh, decode.sh and score.sh on a second run."""

import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest

from rfa_doc_mt.data import prepare
from rfa_doc_mt.data.io import DataError, read_docs, read_lines
from rfa_doc_mt.generation import collect
from rfa_doc_mt.scoring import bleu, consistency

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
USER_DIR = os.path.join(ROOT, "rfa_doc_mt")

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not shutil.which("fairseq-train", path=BIN + os.pathsep + os.environ.get("PATH", "")),
                                 reason="fairseq is not installed")]

TRAIN_ARGS = ["--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "2000", "--max-update", "6",
              "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
              "--no-epoch-checkpoints", "--num-workers", "0", "--seed", "3"]
MODEL_ARGS = ["--arch", "doc_transformer_tiny", "--share-all-embeddings"]


def run(*command, cwd=None):
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    assert result.returncode == 0, f"{command[0]} failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def script(name, *arguments):
    return subprocess.run([os.path.join(ROOT, "scripts", name), *map(str, arguments)], capture_output=True, text=True)


def tool(name):
    return shutil.which(name, path=BIN) or name


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("corpus") / "data"
    assert prepare.main(["synthetic", "--out", str(out), "--train-documents", "40", "--valid-documents", "4",
                         "--test-documents", "6", "--contrastive-pairs", "10", "--workers", "1"]) == 0
    return str(out)


@pytest.fixture(scope="module")
def l2_config(tmp_path_factory):
    """The L=2 system as a config file for the scripts."""
    path = tmp_path_factory.mktemp("configs") / "tiny_L2.sh"
    path.write_text(f'TASK_ARGS="--context-size 1"\nMODEL_ARGS="{" ".join(MODEL_ARGS)}"\n'
                    f'TRAIN_ARGS="{" ".join(TRAIN_ARGS)}"\n')
    return str(path)


@pytest.fixture(scope="module")
def models(corpus, l2_config, tmp_path_factory):
    """L=1 trained by fairseq-train itself, L=2 by scripts/train.sh."""
    runs = tmp_path_factory.mktemp("runs")
    run(tool("fairseq-train"), corpus, "--user-dir", USER_DIR, "--task", "doc_translation", "--context-size", "0",
        *MODEL_ARGS, *TRAIN_ARGS, "--save-dir", str(runs / "L1"))
    trained = script("train.sh", l2_config, corpus, runs / "L2")
    assert trained.returncode == 0, trained.stderr[-3000:]
    return {1: str(runs / "L1" / "checkpoint_best.pt"), 2: str(runs / "L2" / "checkpoint_best.pt")}


@pytest.mark.parametrize("decode_mode", ["free", "forced-prefix"])
def test_generate_collect_and_score(corpus, models, tmp_path, decode_mode, capsys):
    log = tmp_path / "generate.log"
    log.write_text(run(tool("fairseq-generate"), corpus, "--user-dir", USER_DIR, "--task", "doc_translation",
                       "--context-size", "1", "--decode-mode", decode_mode, "--path", models[2],
                       "--gen-subset", "test", "--beam", "2", "--batch-size", "16",
                       "--max-len-a", "1.2", "--max-len-b", "10"))
    prefix = str(tmp_path / "test")
    collect.main([str(log), "--data", corpus, "--split", "test", "--target-lang", "tgt", "--out", prefix])
    references = read_lines(os.path.join(corpus, "test.ref.tgt"))
    translations = read_lines(prefix + ".hyp")
    assert len(translations) == len(references)
    assert read_docs(prefix + ".docs") == read_docs(os.path.join(corpus, "test.docs"))
    assert all("<sep>" not in line for line in translations), "a window's context leaked into the output"
    capsys.readouterr()
    bleu.main(["--hyp", prefix + ".hyp", "--ref", prefix + ".ref", "--docs", prefix + ".docs", "--json",
               prefix + ".bleu.json"])
    printed = capsys.readouterr().out
    assert "s-BLEU = " in printed and "d-BLEU = " in printed
    scores = json.loads(open(prefix + ".bleu.json").read())
    assert 0.0 <= scores["s_bleu"]["score"] <= 100.0


def test_sentence_level_model_scores_exactly_chance_on_mirrored_sets(corpus, models, tmp_path, capsys):
    """The contrastive sets come in mirrored pairs, so an L=1 model gets exactly one of each pair."""
    report_path = tmp_path / "consistency.json"
    consistency.main(["--path", models[1], "--data", corpus, "--sets", os.path.join(corpus, "consistency"),
                      "--json", str(report_path)])
    printed = capsys.readouterr().out
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
    # the message says the limit came from the command line, not from the model
    assert "over the limit of 12 source positions set by --max-source-positions 12" in result.stderr


# ----------------------------------------------------------------------------------------
# Second runs and stale results through the scripts


def files_state(directory):
    """{name: (size, mtime, SHA-256)} of the files of a run directory."""
    state = {}
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        with open(path, "rb") as handle:
            state[name] = (os.path.getsize(path), os.stat(path).st_mtime_ns, hashlib.sha256(handle.read()).hexdigest())
    return state


def test_train_leaves_a_finished_run_untouched(corpus, models, l2_config):
    """Item 2: fairseq-train restarted on a run at --max-update trains one more update and
    rewrites checkpoint_best.pt; train.sh must leave the run as it is and say so."""
    save_dir = os.path.dirname(models[2])
    before = files_state(save_dir)
    again = script("train.sh", l2_config, corpus, save_dir)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"train: {save_dir} holds a finished run: it finished with these settings" in again.stderr
    assert files_state(save_dir) == before
    # a run finished before train.done existed is told by checkpoint_last.pt's updates
    os.unlink(os.path.join(save_dir, "train.done"))
    del before["train.done"]
    again = script("train.sh", l2_config, corpus, save_dir)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "checkpoint_last.pt has 6 updates, --max-update is 6; left untouched" in again.stderr
    assert files_state(save_dir) == before


@pytest.fixture(scope="module")
def decoded(corpus, models, l2_config, tmp_path_factory):
    """decode.sh with the under-trained L=2 model, small batches: (prefix, its stderr)."""
    prefix = str(tmp_path_factory.mktemp("decoded") / "test")
    result = script("decode.sh", l2_config, corpus, models[2], prefix, "--batch-size", "4")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == f"wrote {len(read_lines(prefix + '.hyp'))} translations to {prefix}.hyp"
    return prefix, result.stderr


def test_decode_bounds_the_target_length_and_shows_progress(corpus, decoded):
    """Item 7: with fairseq's default limit (200 tokens after any source) a model 6 updates old
    writes every window to that limit; decode.sh allows 1.2 x the window's source tokens + 10."""
    prefix, stderr = decoded
    sentences = [line.split() for line in read_lines(os.path.join(corpus, "raw", "test.src"))]
    windows, start = [], 0
    for document in read_docs(os.path.join(corpus, "test.docs")):
        for k in range(start, start + document.num_sentences):
            previous = len(sentences[k - 1]) + 1 if k > start else 0  # + <sep>
            windows.append(previous + len(sentences[k]) + 1)          # + </s>
        start += document.num_sentences
    # fairseq: max_len = int(a x the longest source of the batch + b), EOS included
    limit = int(1.2 * max(windows) + 10)
    hypotheses = [line.split("\t")[2].split() for line in read_lines(prefix + ".generate.log") if line.startswith("H-")]
    assert len(hypotheses) == len(windows) and max(len(h) for h in hypotheses) < limit < 200
    # whether this model ends its windows early or not, the limit fairseq-generate ran with
    assert "'max_len_a': 1.2, 'max_len_b': 10," in open(prefix + ".generate.err", encoding="utf-8").read()
    assert "decode: batch 11 of " in stderr and "decode: Translated" in stderr


def test_score_refuses_hypotheses_older_than_their_log_or_from_another_checkpoint(decoded, models, tmp_path):
    """Item 10: score.sh scores only the finished result of a decode, from the checkpoint as it is."""
    source, _ = decoded
    prefix = str(tmp_path / "test")
    for suffix in ("hyp", "docs", "ref", "generate.log", "decode.json"):
        shutil.copy2(f"{source}.{suffix}", f"{prefix}.{suffix}")  # the record names the log relative to it
    scores = bleu.main(["--decoded", prefix, "--checkpoint", models[2]])
    assert 0 <= scores["s_bleu"].score <= 100
    with pytest.raises(DataError, match="was decoded with .*L2/checkpoint_best.pt, not with .*L1/checkpoint_best.pt"):
        bleu.main(["--decoded", prefix, "--checkpoint", models[1]])
    hyp_time = os.stat(prefix + ".hyp").st_mtime_ns
    os.utime(prefix + ".generate.log", ns=(hyp_time + 10**9, hyp_time + 10**9))
    with pytest.raises(DataError, match=r"test\.hyp is older than .*test\.generate\.log"):
        bleu.main(["--decoded", prefix])
    os.utime(prefix + ".generate.log", ns=(hyp_time - 10**9, hyp_time - 10**9))
    checkpoint_times = os.stat(models[2])
    try:
        os.utime(models[2], ns=(checkpoint_times.st_atime_ns, checkpoint_times.st_mtime_ns + 10**9))
        with pytest.raises(DataError, match="has been written again since .* was decoded with it"):
            bleu.main(["--decoded", prefix])
    finally:
        os.utime(models[2], ns=(checkpoint_times.st_atime_ns, checkpoint_times.st_mtime_ns))
    with open(prefix + ".hyp", "a", encoding="utf-8") as handle:
        handle.write("one more line\n")
    with pytest.raises(DataError, match="was changed after decoding"):
        bleu.main(["--decoded", prefix])


def test_failed_decode_leaves_nothing_that_passes_for_its_result(corpus, models, l2_config, decoded):
    """Items 5 and 10: a decode that fails into a prefix holding an earlier run's results leaves
    neither an empty .generate.log.tmp nor the earlier .hyp/.generate.log, and score.sh refuses."""
    prefix, _ = decoded
    failed = script("decode.sh", l2_config, corpus, models[2], prefix, "--gen-subset", "nosuch")
    assert failed.returncode != 0 and "fairseq-generate failed" in failed.stderr
    assert "removing the earlier results this decode replaces" in failed.stderr
    left = sorted(name for name in os.listdir(os.path.dirname(prefix)))
    assert left == ["test.generate.err"], left
    scored = script("score.sh", prefix)
    assert scored.returncode != 0 and "test.decode.json: not found" in scored.stderr
    assert "Traceback" not in scored.stderr


def test_consistency_scores_repeated_candidates_once(corpus, models, tmp_path, capsys):
    """Item 1: Voita et al.'s released ellipsis sets repeat a candidate in some examples (in some
    the true one): the set is accepted, copies are scored once and get one loss, an example with
    a single distinct candidate is skipped."""
    examples = json.loads(open(os.path.join(corpus, "consistency", "ellipsis_vp.json"), encoding="utf-8").read())
    true0, wrong0 = examples[0]["dst"][examples[0]["true_ind"]], examples[0]["dst"][1 - examples[0]["true_ind"]]
    examples[0] = dict(examples[0], dst=[true0, wrong0, true0], true_ind=2)     # the true text twice
    examples[1] = dict(examples[1], dst=examples[1]["dst"] + [examples[1]["dst"][0]])  # a copy
    examples[2] = dict(examples[2], dst=[examples[2]["dst"][0]] * 2, true_ind=1)  # one distinct candidate
    sets = tmp_path / "sets" / "ellipsis_vp_test.json"
    sets.parent.mkdir()
    sets.write_text(json.dumps(examples), encoding="utf-8")
    out = tmp_path / "prepared"
    assert prepare.main(["consistency", "--json", str(sets), "--prep", corpus, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"ellipsis_vp_test.json: 3 of {len(examples)} examples repeat a candidate" in printed
    assert "ellipsis_vp_test.json: 1 examples have a single distinct candidate; the scorer skips them" in printed

    report = consistency.main(["--path", models[2], "--data", corpus, "--sets", str(out), "--cpu"])
    assert report["ellipsis_vp"]["examples"] == len(examples) - 1
    assert report["ellipsis_vp"]["skipped"] == 1 and report["ellipsis_vp"]["repeated_candidates"] == 3
    # random baseline over distinct candidates: 1/2 for each scored example
    assert report["ellipsis_vp"]["random"] == pytest.approx(50.0)
    assert "1 examples skipped (a single distinct candidate)" in capsys.readouterr().out

    from fairseq import checkpoint_utils
    loaded, _, task = checkpoint_utils.load_model_ensemble_and_task([models[2]], arg_overrides={"data": corpus})
    scorer = consistency.CandidateScorer(loaded[0], task)
    scored = []
    losses_of = scorer.losses
    scorer.losses = lambda pairs: scored.extend(pairs) or losses_of(pairs)
    losses = scorer.score_examples(examples[:3])
    assert len(scored) == 2 + 2 + 1  # distinct texts only
    assert losses[0][0] == losses[0][2] and losses[1][0] == losses[1][2] and losses[2][0] == losses[2][1]
    # the true text wins by its lowest loss, whichever copy true_ind names
    expected = int(losses[0][0] < losses[0][1])
    only_first = consistency.accuracy_report(examples[:1], losses[:1])
    assert only_first["accuracy"] == 100.0 * expected


def test_contrapro_and_bawden_sets_prepared_and_scored_end_to_end(corpus, models, tmp_path, capsys):
    """ContraPro's and Bawden et al.'s sets, in their published formats (small files), through
    scripts/prepare_consistency.sh and the scorer with the L=2 model: one report per set, per
    antecedent distance in Müller et al.'s buckets and per category. The corpus is the synthetic
    src-tgt one: --source-lang/--target-lang say so (and name ContraPro's document files); the
    sets' words are unknown to the model (<unk>)."""
    from test_contrastive_formats import anaphora_block, cohesion_block, contrapro_entry, contrapro_fixture, write

    entries = [contrapro_entry(5, 1), contrapro_entry(6, 5, pronoun="es", reference="Was ist es mit dem Buch ?",
                                                         contrastive=("er",)),
               contrapro_entry(2, 0, pronoun="eine", reference="Ich habe dir eine Geschichte erzählt .")]
    for entry in entries:
        entry["document id"] = entry["document id"].replace(".de", ".tgt")
    contrapro, documents = contrapro_fixture(tmp_path / "ContraPro", entries, languages=("src", "tgt"))
    anaphora = write(tmp_path / "discourse" / "anaphora.json", {"1": anaphora_block(), "2": anaphora_block()})
    lexical = write(tmp_path / "discourse" / "lexical-choice.json", {"1": cohesion_block("repet")})
    out = tmp_path / "prepared"
    prepared = script("prepare_consistency.sh", "--prep", corpus, "--out", out, "--source-lang", "src",
                      "--target-lang", "tgt", "--documents", documents, "--context-sentences", "2",
                      contrapro, anaphora, lexical)
    assert prepared.returncode == 0, prepared.stderr[-3000:]
    assert "contrapro.json: 3 ContraPro entries with up to 2 context sentences from 1 documents" in prepared.stdout

    report = consistency.main(["--path", models[2], "--data", corpus, "--sets", str(out), "--cpu",
                               "--json", str(tmp_path / "consistency.json")])
    printed = capsys.readouterr().out
    assert set(report) == {"contrapro", "anaphora", "lexical-choice", "pooled"}
    assert (report["contrapro"]["examples"], report["anaphora"]["examples"], report["lexical-choice"]["examples"]) \
        == (3, 4, 2)
    assert sorted(report["contrapro"]["by_category"]["ante distance"]) == ["0", "1", ">3"]
    assert sorted(report["contrapro"]["by_ctx_dist"]) == ["0", "1", "5"]
    assert report["anaphora"]["groups"] == ["1", "1", "2", "2"]
    assert sorted(report["anaphora"]["by_category"]["type"]) == ["f.pl", "m.pl"]
    # the random baseline: 1 / 3 candidates (the reference and two variants), 1 / 2 for the second entry
    assert report["contrapro"]["random"] == pytest.approx(100 * (1 / 3 + 1 / 2 + 1 / 3) / 3)
    assert "contrapro by ante distance: 0 " in printed and "anaphora by variant: correct " in printed


def test_consistency_scorer_names_a_missing_checkpoint(corpus, tmp_path):
    """Item 3: fairseq ended in a traceback (OSError) for a checkpoint that does not exist."""
    missing = str(tmp_path / "missing.pt")
    with pytest.raises(DataError, match=f"{missing}: checkpoint not found"):
        consistency.main(["--path", missing, "--data", corpus, "--sets", os.path.join(corpus, "consistency")])
