"""The context-length experiment's figures: accuracy per distance bucket with its interval, which
phenomena count as learned, and the costs read from a run's files."""

import json

import pytest

from rfa_doc_mt.reproduce.context_length import (
    BUCKETS,
    bucket_accuracy,
    decoding_speed,
    learned_phenomena,
    peak_training_mb,
    seconds_per_update,
    wilson,
)


def consistency(per_distance):
    """A consistency.json entry per phenomenon from {phenomenon: {distance: (correct, examples)}}."""
    return {name: {"by_ctx_dist": {str(d): {"examples": n, "accuracy": 100 * c / n} for d, (c, n) in counts.items()}}
            for name, counts in per_distance.items()}


def test_wilson_interval_matches_its_formula_at_known_points():
    low, high = wilson(50, 100)
    assert low == pytest.approx(40.38, abs=0.01) and high == pytest.approx(59.62, abs=0.01)
    low, high = wilson(200, 400)  # the long-range corpus's bucket: within +-5 points at chance
    assert high - 50 < 5 and 50 - low < 5
    low, high = wilson(0, 10)
    assert low == pytest.approx(0, abs=1e-9) and 0 < high < 35


def test_bucket_accuracy_pools_the_distances_of_a_bucket_and_the_phenomena_asked():
    scores = consistency({"deixis": {1: (9, 10), 2: (6, 10), 3: (4, 10), 9: (5, 10)},
                          "anaphora": {1: (5, 10), 12: (10, 10)}})
    assert BUCKETS == [(1, 1), (2, 3), (4, 7), (8, 14)]
    assert bucket_accuracy(scores, ["deixis"], (2, 3))["accuracy"] == 50.0
    both = bucket_accuracy(scores, ["deixis", "anaphora"], (8, 14))
    assert both["examples"] == 20 and both["accuracy"] == 75.0
    assert both["interval"][0] < 75 < both["interval"][1]
    assert bucket_accuracy(scores, ["anaphora"], (4, 7)) is None


def test_a_phenomenon_is_learned_when_a_system_beats_chance_at_distance_one():
    results = {"a": {"consistency": consistency({"deixis": {1: (90, 100)}, "anaphora": {1: (55, 100)}})},
               "b": {"consistency": consistency({"deixis": {1: (50, 100)}, "anaphora": {1: (58, 100)}})}}
    assert learned_phenomena(results, ["a", "b"], ["deixis", "anaphora"]) == ["deixis"]  # 58/100 reaches 48.2


def test_costs_are_read_from_the_runs_files(tmp_path):
    (tmp_path / "train.log").write_text(
        "2026 | INFO | train_inner | epoch 001:    100 / 500 loss=5.1, ups=2, wpb=900, num_updates=100\n"
        "2026 | INFO | train_inner | epoch 001:    200 / 500 loss=4.1, ups=0.5, wpb=900, num_updates=200\n")
    assert seconds_per_update(str(tmp_path)) == pytest.approx(1 / 1.25)
    (tmp_path / "train.resources.json").write_text(json.dumps({"peak_resident_mb": 612.5}))
    assert peak_training_mb(str(tmp_path)) == 612.5
    (tmp_path / "test.generate.err").write_text(
        "2026 | INFO | fairseq_cli.generate | Translated 466 sentences (52,472 tokens) in 91.2s (5.11 sentences/s, "
        "575.52 tokens/s)\n")
    (tmp_path / "test.hyp").write_text("a\n" * 456)
    speed = decoding_speed(str(tmp_path))
    assert speed["tokens_per_second"] == pytest.approx(52472 / 91.2)
    assert speed["sentences_per_second"] == pytest.approx(456 / 91.2)
    assert decoding_speed(str(tmp_path / "none")) is None and seconds_per_update(str(tmp_path / "none")) is None
