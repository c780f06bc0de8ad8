"""The Bible experiment's search (rfa_doc_mt.reproduce.bible_search) on faked runs: which BPE size
and setting it chooses from validation s-BLEU, and what it refuses. No training."""

import json
import os
import shlex
import subprocess

import pytest

from rfa_doc_mt.data.io import DataError
from rfa_doc_mt.reproduce import bible_search


def fake_log(run_dir, curve):
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "train.log"), "w", encoding="utf-8") as handle:
        for updates, bleu in curve:
            handle.write(f"2026-01-01 00:00:00 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 5.0 "
                         f"| bleu {bleu} | wps 500 | num_updates {updates}\n")


@pytest.fixture
def corpora(tmp_path):
    for setting in bible_search.stage1():
        folder = tmp_path / "corpora" / f"en-es-{setting.bpe}"
        folder.mkdir(parents=True)
        (folder / "prep.json").write_text("{}")
    return str(tmp_path / "corpora")


def faked_training(curves, trained):
    def train(settings, corpora, out, jobs):
        for setting in settings:
            trained.append(setting.name)
            fake_log(os.path.join(out, setting.name), curves[setting.name])
            open(os.path.join(out, setting.name, "train.done"), "w").close()
    return train


def test_the_search_takes_the_best_bpe_size_then_its_best_setting(corpora, tmp_path, monkeypatch, capsys):
    curves = {"bpe4k": [(500, 2.0), (1000, 9.0)], "bpe8k": [(500, 2.5), (1000, 11.0)],
              "bpe16k": [(500, 2.4), (1000, 12.5), (1500, 10.0)], "bpe27k": [(500, 1.0), (1000, 7.0)],
              "bpe8k-lr3e-3": [(500, 3.0), (1000, 10.4)], "bpe8k-2+2": [(500, 3.0), (1000, 11.5)]}
    trained = []
    monkeypatch.setattr(bible_search, "train", faked_training(curves, trained))
    out = tmp_path / "out"
    assert bible_search.main(["--corpora", corpora, "--out", str(out), "--jobs", "1"]) == 0
    # stage 2 runs at the BPE size of the best validation among those the budget affords (16k's, the
    # best, is not), whatever their last point; the dearer sizes train after it, for the record
    assert trained == ["bpe4k", "bpe8k", "bpe8k-lr3e-3", "bpe8k-2+2", "bpe16k", "bpe27k"]
    result = json.loads((out / "search.json").read_text())
    chosen = [entry["setting"] for entry in result["settings"] if entry["chosen"]]
    assert chosen == ["bpe8k-2+2"]
    best = {entry["setting"]: (entry["best_valid_s_bleu"], entry["at"]) for entry in result["settings"]}
    assert best["bpe16k"] == (12.5, 1000) and best["bpe8k"] == (11.0, 1000)
    table = (out / "search.md").read_text()
    assert "| bpe8k-2+2 |" in table and "**chosen**" in table and table in capsys.readouterr().out
    assert "--encoder-layers 2 --decoder-layers 2" in table


def test_a_setting_that_does_not_fit_the_budget_is_never_chosen(tmp_path):
    fake_log(tmp_path / "big", [(500, 30.0)])
    fake_log(tmp_path / "small", [(500, 20.0)])
    big = bible_search.Setting("big", "bpe8k", fits_budget=False)
    small = bible_search.Setting("small", "bpe8k")
    assert bible_search.chosen(str(tmp_path), [big, small]) == small
    assert bible_search.chosen(str(tmp_path), [bible_search.Setting("big", "bpe8k"), small]).name == "big"


def test_a_run_without_a_validation_is_an_error_not_a_loser(tmp_path):
    fake_log(tmp_path / "scored", [(500, 3.0)])
    with pytest.raises(DataError, match="no validation score for unscored"):
        bible_search.chosen(str(tmp_path), [bible_search.Setting("scored", "bpe8k"),
                                            bible_search.Setting("unscored", "bpe8k")])


def test_missing_corpora_are_named_before_anything_trains(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bible_search, "train", lambda *args: pytest.fail("trained without corpora"))
    (tmp_path / "en-es-bpe8k").mkdir()
    (tmp_path / "en-es-bpe8k" / "prep.json").write_text("{}")
    with pytest.raises(SystemExit):
        bible_search.main(["--corpora", str(tmp_path), "--out", str(tmp_path / "out")])
    error = capsys.readouterr().err
    assert "en-es-bpe4k" in error and "en-es-bpe16k" in error and "en-es-bpe8k" not in error
    assert not (tmp_path / "out").exists()


def test_the_step_timing_prices_each_model_once_against_the_configs_own(corpora, tmp_path, monkeypatch):
    for bpe, words in (("bpe4k", 40), ("bpe8k", 80), ("bpe16k", 160), ("bpe27k", 270)):
        with open(os.path.join(corpora, f"en-es-{bpe}", "dict.en.txt"), "w") as handle:
            handle.writelines(f"w{index} 1\n" for index in range(words))
    built = []

    def training_step(config, root, options, extra):
        built.append((options.vocabulary, extra))
        return (lambda: None), {}

    # each model's step "takes" its vocabulary in milliseconds, the 2+2 model half of that
    costs = {(bpe, ()): words / 1000 for bpe, words in (("bpe4k", 45), ("bpe8k", 85), ("bpe16k", 165),
                                                          ("bpe27k", 275))}
    costs[("bpe8k", bible_search.SMALL)] = 0.0425
    monkeypatch.setattr("rfa_doc_mt.reproduce.cost.training_step", training_step)
    monkeypatch.setattr("rfa_doc_mt.reproduce.cost.steps_in_turns",
                        lambda steps, rounds: {model: [costs[model]] * rounds for model in steps})
    settings = bible_search.stage1() + bible_search.stage2("bpe8k")
    assert bible_search.time_steps(corpora, str(tmp_path), settings, rounds=2) == 0
    # the learning rate's setting shares the 3+3 model: six settings, five models
    assert sorted(built) == sorted([(45, ()), (85, ()), (165, ()), (275, ()), (85, bible_search.SMALL)])
    rows = {line.split("|")[1].strip(): [cell.strip() for cell in line.split("|")[2:-1]]
            for line in (tmp_path / "steps.md").read_text().splitlines()[2:] if line.startswith("| ")}
    assert rows["bpe8k"][3] == "1.00" and rows["bpe8k-lr3e-3"][3] == "1.00" and rows["bpe8k-2+2"][3] == "0.50"
    assert rows["bpe27k"][1:4] == ["270", "0.275", "3.24"] and rows["bpe27k"][4] == "no"


def test_the_table_of_a_search_under_way_marks_what_still_trains(corpora, tmp_path, capsys):
    out = tmp_path / "out"
    assert bible_search.main(["--corpora", corpora, "--out", str(out), "--table"]) == 2
    assert "no run" in capsys.readouterr().err and not (out / "search.md").exists()
    for name, curve, done in (("bpe4k", [(500, 2.0), (1000, 9.0)], True), ("bpe8k", [(500, 2.5), (1000, 11.0)], True),
                              ("bpe8k-lr3e-3", [(500, 3.0), (1000, 12.0)], False), ("bpe16k", [(500, 1.0)], False)):
        fake_log(out / name, curve)
        if done:
            (out / name / "train.done").touch()
    assert bible_search.main(["--corpora", corpora, "--out", str(out), "--table"]) == 0
    rows = {line.split("|")[1].strip(): [cell.strip() for cell in line.split("|")[2:-1]]
            for line in (out / "search.md").read_text().splitlines() if line.startswith("| bpe")}
    # the higher score still training is not chosen: the finished one is, and the table says it may change
    assert rows["bpe8k"][-1] == "**chosen**" and rows["bpe8k-lr3e-3"][-1] == ""
    assert rows["bpe8k-lr3e-3"][1] == "to 1000" and rows["bpe8k-2+2"][1] == "no" and rows["bpe4k"][1] == "yes"
    assert "the choice may still change" in (out / "search.md").read_text()


def test_every_setting_trains_at_the_learning_rate_it_was_searched_at():
    """The configs took stage 2's winning rate after the search: each setting's run must still train
    at its own rate (the configs' TRAIN_ARGS, then the setting's overrides; fairseq takes the last
    --lr), so that the search reruns as it ran."""
    script = f'source {shlex.quote(os.path.join(bible_search.ROOT, bible_search.CONFIG))}; echo "$TRAIN_ARGS"'
    configs = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout.split()

    def learning_rate(setting):
        words = configs + bible_search.train_args(setting)
        return [words[i + 1] for i, word in enumerate(words) if word == "--lr"][-1]

    rates = {setting.name: learning_rate(setting) for setting in bible_search.stage1() + bible_search.stage2("bpe8k")}
    assert rates == {"bpe4k": "2e-3", "bpe8k": "2e-3", "bpe16k": "2e-3", "bpe27k": "2e-3",
                     "bpe8k-lr3e-3": "3e-3", "bpe8k-2+2": "2e-3"}
