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
    training_minutes,
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
    assert seconds_per_update(str(tmp_path)) == pytest.approx(1 / 1.25)  # no train_wall: fairseq's ups
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


def interval_line(updates, ups, train_wall):
    return (f"2026 | INFO | train_inner | epoch 001:  {updates} / 900 loss=4.1, ups={ups}, wpb=900, "
            f"num_updates={updates}, lr=0.001, gnorm=0.3, train_wall={train_wall}, wall=0\n")


def test_seconds_per_update_is_the_median_interval_of_training_steps(tmp_path):
    """A validation or a pause in one interval moves the mean of fairseq's ups, not the median of
    its train_wall; a resumed run logs the interval it had reached once more."""
    lines = [interval_line(100, 0.11, 874), interval_line(200, 1.1, 90), interval_line(300, 0.5, 92),
             interval_line(400, 1.2, 80), interval_line(400, 1.2, 84), interval_line(500, 1.0, 95)]
    (tmp_path / "train.log").write_text("".join(lines))
    assert seconds_per_update(str(tmp_path)) == pytest.approx(0.91)  # (90 + 92) / 2 / 100: the median
    (tmp_path / "train.log").write_text(interval_line(1, 4.0, 0) + interval_line(2, 2.0, 0))
    assert seconds_per_update(str(tmp_path)) == pytest.approx(1 / 3.0)  # sub-second intervals: from ups


def test_training_minutes_are_updates_times_each_stages_rate(tmp_path):
    stage1, stage2 = tmp_path / "stage1", tmp_path / "stage2"
    stage1.mkdir()
    stage2.mkdir()
    (stage1 / "train.log").write_text(interval_line(100, 1.0, 60) + interval_line(200, 1.0, 60))
    (stage2 / "train.log").write_text(interval_line(100, 1.0, 180))
    assert training_minutes({"updates": 200}, str(stage1)) == pytest.approx(2.0)
    assert training_minutes({"updates": 100, "stage1_updates": 200}, str(stage2), str(stage1)) == pytest.approx(5.0)
    assert training_minutes({"updates": None}, str(stage1)) is None
    assert training_minutes({"updates": 100}, str(tmp_path / "none")) is None


def test_each_row_is_compared_with_the_transformer_of_its_l_and_seed(tmp_path):
    """s-BLEU and accuracy 8-14 sentences back against the transformer of the same L and seed (the
    memory model: the transformer at L = 15), through the compare command's path."""
    from types import SimpleNamespace

    from rfa_doc_mt.reproduce.context_length import against_short_window, against_transformer
    from rfa_doc_mt.reproduce.papers import System

    references = [f"w{i} a{i} b{i} c{i}" for i in range(20)]

    def run(name, wrong, correct_far):
        """A run whose hypotheses miss ``wrong`` sentences and which gets ``correct_far`` of the 8
        examples 12 sentences back right (the 4 examples 1 back: always right)."""
        system = System(name, f"configs/context/{name}.sh")
        directory = tmp_path / system.key
        directory.mkdir()
        (directory / "test.ref").write_text("\n".join(references) + "\n")
        (directory / "test.hyp").write_text("\n".join("x y z u" if i < wrong else r for i, r in enumerate(references))
                                            + "\n")
        (directory / "test.docs").write_text("10\td0\n10\td1\n")
        correct = [1] * 4 + [1] * correct_far + [0] * (8 - correct_far)
        (directory / "consistency.json").write_text(json.dumps(
            {"deixis": {"correct": correct, "distances": [1] * 4 + [12] * 8, "groups": [k // 2 for k in range(12)]},
             "pooled": {}}))
        return system

    systems = [("transformer_L15", run("t15", 0, 6)), ("transformer_L15_seed2", run("t15s2", 0, 8)),
               ("transformer_L4", run("t4", 0, 4)), ("rfa_sgate_L15", run("r15", 10, 2)),
               ("rfa_sgate_L15_seed2", run("r15s2", 0, 8)), ("lsh_L8", run("lsh8", 0, 4)), ("memory", run("m", 0, 4))]
    context = SimpleNamespace(systems=systems, runs=str(tmp_path))
    compared = against_transformer(context, ["deixis"])
    assert sorted(compared) == ["memory", "rfa_sgate_L15", "rfa_sgate_L15_seed2"]  # lsh_L8: no transformer L = 8
    first, second = compared["rfa_sgate_L15"], compared["rfa_sgate_L15_seed2"]
    assert first["baseline_row"] == "transformer_L15" and second["baseline_row"] == "transformer_L15_seed2"
    assert first["far"]["difference"] == pytest.approx(100 * (2 - 6) / 8) and first["far"]["units"] == 4
    assert first["s_bleu"]["difference"] < 0 and second["s_bleu"]["difference"] == 0.0
    assert second["far"]["difference"] == 0.0 and second["far"]["p_value"] == 1.0
    assert compared["memory"]["baseline_row"] == "transformer_L15" and compared["memory"]["L"] == "document"
    assert against_transformer(context, []) == {}

    # each longer window against its family's L = 4 (the first seed): lsh_L8 has no lsh_L4
    context.systems.append(("rfa_sgate_L4", run("r4", 5, 0)))
    longer = against_short_window(context, ["deixis"])
    assert sorted(longer) == ["rfa_sgate_L15", "rfa_sgate_L15_seed2", "transformer_L15", "transformer_L15_seed2"]
    assert {row["baseline_row"] for name, row in longer.items() if name.startswith("rfa")} == {"rfa_sgate_L4"}
    assert longer["rfa_sgate_L15"]["s_bleu"]["difference"] < 0 < longer["rfa_sgate_L15_seed2"]["s_bleu"]["difference"]
    assert longer["rfa_sgate_L15_seed2"]["far"]["difference"] == pytest.approx(100 * (8 - 0) / 8)


def test_a_rows_seeds_give_one_verdict_or_ask_for_another_seed():
    from rfa_doc_mt.reproduce.context_length import direction, verdict

    assert [direction({"interval": interval}) for interval in ([0.1, 0.5], [-0.5, -0.1], [-0.1, 0.1], [0.0, 0.4])] \
        == ["above", "below", "level", "level"]
    assert verdict(["below", "below"]) == {"verdict": "below", "seeds": ["below", "below"]}
    assert verdict(["above", "level"]) == {"verdict": "disagree", "seeds": ["above", "level"], "seeds_to_decide": 3}
    assert verdict(["above", "level", "above"])["verdict"] == "above"  # two of three
    assert verdict(["above", "level", "below"])["verdict"] == "disagree"  # no majority of three
    assert verdict(["level"])["verdict"] == "level" and verdict([])["verdict"] == "none"


def test_verdicts_leave_out_the_seeds_the_cap_stopped():
    from types import SimpleNamespace

    from rfa_doc_mt.reproduce.context_length import verdicts, verdicts_note
    from rfa_doc_mt.reproduce.papers import System, row_seed

    def compared(baseline, s_bleu, far=None):
        entry = {"baseline_row": baseline, "L": "15", "s_bleu": {"interval": s_bleu}}
        return entry if far is None else {**entry, "far": {"interval": far}}

    rows = ["transformer_L15", "transformer_L15_seed2", "lsh_L15", "lsh_L15_seed2", "rfa_sgate_L15",
            "rfa_sgate_L15_seed2", "rfa_sgate_L4", "transformer_L4"]
    systems = [(row, System(row, f"configs/context/{row}.sh", name=row)) for row in rows]
    capped = {"lsh_L15_seed2"}
    results = {row: {"convergence": {"reached_cap": row in capped}} for row in rows}
    context = SimpleNamespace(systems=systems, results=results)
    against = {"lsh_L15": compared("transformer_L15", [-2, -1], [-12, -8]),
               "lsh_L15_seed2": compared("transformer_L15_seed2", [1, 2], [8, 12]),
               "rfa_sgate_L15": compared("transformer_L15", [-2, -1], [-1, 1]),
               "rfa_sgate_L15_seed2": compared("transformer_L15_seed2", [-2, -1], [-10, -8])}
    longer = {"rfa_sgate_L15": compared("rfa_sgate_L4", [1, 2]),
              "rfa_sgate_L15_seed2": compared("rfa_sgate_L4", [1, 3])}
    found = verdicts(context, against, longer)
    lsh = found["lsh_L15"]["against_transformer"]
    assert lsh["seeds"] == [1] and lsh["capped"] == [2]
    assert lsh["far"] == {"verdict": "below", "seeds": ["below"]}
    sgate = found["rfa_sgate_L15"]
    assert sgate["against_transformer"]["seeds"] == [1, 2] and sgate["against_transformer"]["s_bleu"]["verdict"] == \
        "below"
    assert sgate["against_transformer"]["far"]["verdict"] == "disagree"
    assert sgate["against_L4"]["s_bleu"]["verdict"] == "above"
    # a transformer stopped by the cap leaves out the seeds compared with it, there only
    results["transformer_L15"]["convergence"]["reached_cap"] = True
    found = verdicts(context, against, longer)
    sgate = found["rfa_sgate_L15"]
    assert sgate["against_transformer"]["seeds"] == [2] and sgate["against_transformer"]["capped"] == [1]
    assert sgate["against_L4"]["seeds"] == [1, 2]
    assert found["lsh_L15"]["against_transformer"]["s_bleu"]["verdict"] == "none"
    # two seeds left that disagree, beside a capped one: the fourth seed decides, not a third
    results["transformer_L15"]["convergence"]["reached_cap"] = False
    for row, capped_run in (("rfa_sgate_L15_seed3", True), ("transformer_L15_seed3", False)):
        results[row] = {"convergence": {"reached_cap": capped_run}}
        context.systems.append((row, System(row, f"configs/context/{row_seed(row)[0]}.sh", name=row)))
    third = {**against, "rfa_sgate_L15_seed3": compared("transformer_L15_seed3", [-1, 1], [1, 2])}
    capped_third = verdicts(context, third, longer)["rfa_sgate_L15"]["against_transformer"]
    assert capped_third["capped"] == [3] and capped_third["far"]["seeds_to_decide"] == 4
    context.systems = context.systems[:-2]
    results["transformer_L15"]["convergence"]["reached_cap"] = True
    note = verdicts_note(context, found)
    assert "none (seed 1, 2 capped)" in note and "below (1 of 1; seed 1 capped)" in note
    assert "out of the window's reach" not in note
    # a window of 8 sees 7 back: its level accuracy 8-14 back is chance on both sides, not a verdict
    context.systems.append(("lsh_L8", System("lsh_L8", "configs/context/lsh_L8.sh", name="lsh_L8")))
    results["lsh_L8"] = {"convergence": {"reached_cap": False}}
    found = verdicts(context, {**against, "lsh_L8": {**compared("transformer_L4", [-2, -1], [0, 0]), "L": "8"}}, longer)
    assert "far" not in found["lsh_L8"]["against_transformer"]
    assert found["lsh_L8"]["against_transformer"]["s_bleu"]["verdict"] == "below"
    note = verdicts_note(context, found)
    assert "| lsh_L8 | 8 | below (1 of 1) | — (both at chance: out of the window's reach) |" in note


def test_a_speed_not_timed_alone_is_marked():
    from rfa_doc_mt.reproduce.context_length import OWN_MARK, own_mark

    assert own_mark({"alone": False}) == OWN_MARK and OWN_MARK.strip()
    assert own_mark({"alone": True}) == "" and own_mark(None) == ""
