"""Paired significance tests of two systems (rfa_doc_mt.scoring.compare) on hand-checkable cases."""

import json
import math

import numpy as np
import pytest
from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest

from rfa_doc_mt.data.io import DataError, Document
from rfa_doc_mt.scoring import compare
from rfa_doc_mt.scoring.consistency import accuracy_report

# 100 references of 6 words, each different (n-grams do not repeat across sentences)
REFERENCES = [f"w{i} a{i} b{i} c{i} d{i} e{i}" for i in range(100)]
DOCUMENTS = [Document(f"d{k}", 10) for k in range(10)]


def corrupt(sentences, which):
    """The sentences with words 2-6 of those in ``which`` replaced (only the first word kept)."""
    return [s.split()[0] + " x y z u v" if i in which else s for i, s in enumerate(sentences)]


def test_identical_outputs_differ_by_nothing_and_nothing_is_significant():
    hypotheses = corrupt(REFERENCES, set(range(0, 100, 3)))
    for test in ("bs", "ar"):
        result = compare.bleu_comparison(hypotheses, list(hypotheses), REFERENCES, "s-BLEU", test=test)
        assert result.difference == 0.0 and result.interval == (0.0, 0.0)
        assert result.p_value == 1.0
        assert result.baseline == result.system == pytest.approx(BLEU().corpus_score(hypotheses, [REFERENCES]).score)
    # different outputs that no resample tells apart: no 2-gram of either is in a reference, BLEU 0 throughout
    nothing = compare.bleu_comparison(["x y z u"] * 100, ["p q r s"] * 100, REFERENCES, "s-BLEU")
    assert (nothing.baseline, nothing.system, nothing.interval, nothing.p_value) == (0.0, 0.0, (0.0, 0.0), 1.0)
    outcomes = [1, 0, 1, 1, 0] * 20
    result = compare.consistency_comparison(outcomes, list(outcomes))
    assert (result.difference, result.interval, result.p_value) == (0.0, (0.0, 0.0), 1.0)


def test_the_reference_itself_beats_a_corrupted_output():
    corrupted = corrupt(REFERENCES, set(range(0, 100, 2)))  # half the sentences keep one word of six
    result = compare.bleu_comparison(corrupted, REFERENCES, REFERENCES, "s-BLEU")
    assert result.system == pytest.approx(100.0)
    assert result.difference > 0 and 0 < result.interval[0] <= result.difference <= result.interval[1]
    # no resample of 100 sentences in which the reference is not ahead: the smallest p sacrebleu gives
    assert result.p_value == pytest.approx(1 / 1001) and result.p_value < 0.05
    assert "bs:1000" in result.signature and "seed:12345" in result.signature
    swapped = compare.bleu_comparison(REFERENCES, corrupted, REFERENCES, "s-BLEU")
    assert swapped.difference == pytest.approx(-result.difference)
    assert swapped.interval == pytest.approx((-result.interval[1], -result.interval[0]))
    assert swapped.p_value == result.p_value


def test_equally_good_outputs_are_not_significantly_different():
    """Each output spoils a different tenth of the sentences in the same way: equal BLEU, a
    difference of 0 where the outputs differ in a fifth of the sentences."""
    first, second = corrupt(REFERENCES, set(range(0, 10))), corrupt(REFERENCES, set(range(50, 60)))
    for test in ("bs", "ar"):
        result = compare.bleu_comparison(first, second, REFERENCES, "s-BLEU", test=test)
        assert result.difference == pytest.approx(0.0, abs=1e-9)
        assert result.interval[0] < 0 < result.interval[1]
        assert result.p_value > 0.05


def test_the_interval_comes_from_the_resamples_sacrebleu_draws():
    """Our resampled scores of the system are sacrebleu's: its own mean and interval of them."""
    baseline, system = corrupt(REFERENCES, set(range(0, 100, 4))), corrupt(REFERENCES, set(range(0, 100, 5)))
    with compare.sacrebleu_seed(7):
        _, results = PairedTest([("b", baseline), ("s", system)], {"BLEU": BLEU()}, [REFERENCES], test_type="bs",
                                n_samples=200)()
    indices = compare.bootstrap_indices(len(REFERENCES), 200, 7)
    ours = compare.resampled_bleu(BLEU(), system, REFERENCES, indices)
    low, high = compare.interval_bounds(ours)
    assert ours.mean() == pytest.approx(results["BLEU"][1].mean, rel=1e-12)
    assert (high - low) / 2 == pytest.approx(results["BLEU"][1].ci, rel=1e-12)
    result = compare.bleu_comparison(baseline, system, REFERENCES, "s-BLEU", samples=200, seed=7)
    assert result.p_value == results["BLEU"][1].p_value


def test_consistency_bootstrap_on_examples():
    """The baseline is right on 50 of 100 examples, the system on the same 50 and 30 more: +30
    points. A resample's difference is 100 x the share of those 30 in it: binomial(100, 0.3),
    standard deviation sqrt(100 x 0.3 x 0.7) = 4.58 points; it reaches 0 or 60 (as far from +30
    as +30 from 0) with probability below 1e-14, so no resample of 1000 does."""
    baseline = [1] * 50 + [0] * 50
    system = [1] * 80 + [0] * 20
    result = compare.consistency_comparison(baseline, system)
    assert (result.baseline, result.system, result.difference) == (50.0, 80.0, pytest.approx(30.0))
    spread = math.sqrt(100 * 0.3 * 0.7)
    low, high = result.interval
    assert 30 - 4 * spread <= low < 30 < high <= 30 + 4 * spread
    assert result.p_value == pytest.approx(1 / 1001)
    # the same count right on different examples: no difference, p = 1
    other = [0] * 50 + [1] * 50
    even = compare.consistency_comparison(baseline, other)
    assert even.difference == 0.0 and even.p_value == 1.0 and even.interval[0] < 0 < even.interval[1]
    # seeded: the same figures again
    assert compare.consistency_comparison(baseline, system) == result
    with pytest.raises(DataError, match="same contrastive examples"):
        compare.consistency_comparison(baseline, system[:-1])


def test_consistency_bootstrap_resamples_mirrored_pairs_together():
    """Two sentence-level models on 100 mirrored pairs: each gets exactly one example of every pair
    right, the baseline the first, the other the second. Pair by pair they do not differ, so no
    resample of pairs can show a difference; resampling the examples one by one would."""
    baseline = [1, 0] * 100
    system = [0, 1] * 100
    pairs = [k // 2 for k in range(200)]
    by_pair = compare.consistency_comparison(baseline, system, groups=pairs)
    assert by_pair.difference == 0.0 and by_pair.interval == (0.0, 0.0) and by_pair.p_value == 1.0
    assert by_pair.units == 100 and "pairs" in by_pair.unit_name
    by_example = compare.consistency_comparison(baseline, system)
    assert by_example.units == 200 and by_example.interval[0] < 0 < by_example.interval[1]
    # a real difference survives: the system also gets both examples of the first 30 pairs right
    better = [1] * 60 + system[60:]
    result = compare.consistency_comparison(baseline, better, groups=pairs)
    assert result.difference == pytest.approx(15.0) and result.interval[0] > 0
    with pytest.raises(DataError, match="group labels"):
        compare.consistency_comparison(baseline, system, groups=pairs[:-1])
    with pytest.raises(DataError, match="seed 0"):
        compare.consistency_comparison(baseline, system, seed=0)


def test_synthetic_pairs_are_grouped_from_the_sets_to_the_comparison():
    from rfa_doc_mt.data.synthetic import generate_contrastive_sets

    sets = generate_contrastive_sets(seed=1, num_pairs=6)
    for examples in sets.values():
        assert [e["group"] for e in examples] == [k // 2 for k in range(12)]
        for first, second in zip(examples[::2], examples[1::2]):  # the same current candidates, the other true
            current = [[candidate.split(" _eos ")[-1] for candidate in e["dst"]] for e in (first, second)]
            assert current[0] == current[1] and first["true_ind"] != second["true_ind"]
    examples = sets["deixis"]
    report = accuracy_report(examples, [[0.1, 0.9]] * len(examples))  # always the first: one of each pair
    assert report["groups"] == [k // 2 for k in range(12)] and report["accuracy"] == 50.0
    other = {"deixis": report, "pooled": {}}
    assert compare.consistency_groups(other) == {"deixis": report["groups"]}
    assert compare.pooled_groups({"b": [0, 0], "a": [0]}) == ["a:0", "b:0", "b:0"]
    ungrouped = accuracy_report([{k: v for k, v in e.items() if k != "group"} for e in examples],
                                [[0.1, 0.9]] * len(examples))
    assert "groups" not in ungrouped and compare.consistency_groups({"deixis": ungrouped}) is None


def test_consistency_reports_carry_their_outcomes_and_are_paired_by_phenomenon():
    examples = [{"src": "a", "dst": ["x", "y"], "true_ind": k % 2, "ctx_dist": 1} for k in range(4)]
    report = accuracy_report(examples, [[0.1, 0.9]] * 4)  # always picks the first: right on even k
    assert report["correct"] == [1, 0, 1, 0] and report["accuracy"] == 50.0
    baseline = {"deixis": {"correct": [1, 0, 1, 0]}, "anaphora": {"correct": [0, 0]}, "pooled": {}}
    system = {"anaphora": {"correct": [1, 1]}, "deixis": {"correct": [1, 1, 1, 0]}, "pooled": {}}
    base, other = compare.pooled_outcomes(compare.consistency_outcomes(baseline), compare.consistency_outcomes(system))
    assert base == [0, 0, 1, 0, 1, 0] and other == [1, 1, 1, 1, 1, 0]
    with pytest.raises(DataError, match="score it again"):
        compare.consistency_outcomes({"deixis": {"accuracy": 50.0}})
    with pytest.raises(DataError, match="different contrastive sets"):
        compare.pooled_outcomes({"deixis": [1]}, {"anaphora": [1]})


def test_compare_command_prints_and_writes_every_figure(tmp_path, capsys):
    hypotheses = corrupt(REFERENCES, set(range(0, 100, 2)))
    (tmp_path / "ref").write_text("\n".join(REFERENCES) + "\n")
    (tmp_path / "a").write_text("\n".join(hypotheses) + "\n")
    (tmp_path / "b").write_text("\n".join(REFERENCES) + "\n")
    (tmp_path / "docs").write_text("".join(f"10\td{k}\n" for k in range(10)))
    for name, correct in (("ca.json", [0, 1] * 50), ("cb.json", [1, 1] * 50)):
        (tmp_path / name).write_text(json.dumps({"deixis": {"accuracy": 0, "correct": correct}, "pooled": {}}))
    arguments = ["--ref", str(tmp_path / "ref"), "--docs", str(tmp_path / "docs"), "--baseline", str(tmp_path / "a"),
                 "--system", str(tmp_path / "b"), "--baseline-consistency", str(tmp_path / "ca.json"),
                 "--system-consistency", str(tmp_path / "cb.json"), "--json", str(tmp_path / "out.json")]
    comparisons = compare.main(arguments)
    printed = capsys.readouterr().out
    assert [c.metric for c in comparisons] == ["s-BLEU", "d-BLEU", "consistency"]
    for comparison in comparisons:
        assert str(comparison) in printed
    assert comparisons[1].units == 10 and comparisons[1].unit_name == "documents"
    assert comparisons[2].difference == pytest.approx(50.0)
    written = json.loads((tmp_path / "out.json").read_text())["comparisons"]
    assert [w["p_value"] for w in written] == [c.p_value for c in comparisons]
    # the same command again prints the same figures (seeded resampling)
    compare.main(arguments)
    assert capsys.readouterr().out == printed
    (tmp_path / "b").write_text("\n".join(REFERENCES[:-1]) + "\n")
    with pytest.raises(DataError, match="has 99 lines"):
        compare.main(arguments)


def test_interval_bounds_use_sacrebleus_order_statistics():
    values = np.arange(1000, dtype=float)[::-1]
    assert compare.interval_bounds(values) == (25.0, 974.0)


def write_inputs(tmp_path, reports):
    """References, two identical outputs, document boundaries and two consistency reports."""
    (tmp_path / "ref").write_text("\n".join(REFERENCES) + "\n")
    (tmp_path / "hyp").write_text("\n".join(REFERENCES) + "\n")
    (tmp_path / "docs").write_text("".join(f"10\td{k}\n" for k in range(10)))
    for name, report in reports.items():
        (tmp_path / name).write_text(json.dumps(report))
    return ["--ref", str(tmp_path / "ref"), "--docs", str(tmp_path / "docs"), "--baseline", str(tmp_path / "hyp"),
            "--system", str(tmp_path / "hyp"), "--baseline-consistency", str(tmp_path / "a.json"),
            "--system-consistency", str(tmp_path / "b.json")]


def test_the_command_resamples_the_mirrored_pairs_its_reports_name(tmp_path):
    """Through compare's command (what Table 1 and the context-length experiment run): reports whose
    sets name their mirrored pairs (``groups``) are compared pair by pair. Two sentence-level
    models, each right on one example of every pair, do not differ in any resample of pairs; a
    bootstrap over single examples would find an interval around zero."""
    groups = [k // 2 for k in range(100)]
    reports = {"a.json": {"deixis": {"correct": [1, 0] * 50, "groups": groups}, "pooled": {}},
               "b.json": {"deixis": {"correct": [0, 1] * 50, "groups": groups}, "pooled": {}}}
    consistency = compare.main(write_inputs(tmp_path, reports))[-1]
    assert consistency.units == 50 and "pairs" in consistency.unit_name
    assert consistency.interval == (0.0, 0.0) and consistency.p_value == 1.0
    ungrouped = compare.consistency_comparison([1, 0] * 50, [0, 1] * 50)
    assert ungrouped.interval[0] < 0 < ungrouped.interval[1]  # what a lost hand-off would print


def test_consistency_compares_the_chosen_phenomena_and_distances_only(tmp_path):
    """--phenomena and --distances compare a part of the contrastive examples (accuracy 8-14
    sentences back, say), by the reports' per-example distances, their pairs kept together."""
    distances = [1, 1, 9, 9, 12, 12, 3, 3]
    groups = [0, 0, 1, 1, 2, 2, 3, 3]
    reports = {"a.json": {"deixis": {"correct": [1, 0, 1, 0, 1, 0, 1, 0], "distances": distances, "groups": groups},
                          "anaphora": {"correct": [1, 1], "distances": [9, 9], "groups": [0, 0]}, "pooled": {}},
               "b.json": {"deixis": {"correct": [1, 1, 1, 1, 1, 1, 0, 0], "distances": distances, "groups": groups},
                          "anaphora": {"correct": [1, 0], "distances": [9, 9], "groups": [0, 0]}, "pooled": {}}}
    arguments = write_inputs(tmp_path, reports)
    far = compare.main(arguments + ["--distances", "8-14", "--phenomena", "deixis"])[-1]
    assert far.metric == "consistency 8-14 back" and far.units == 2  # the pairs at 9 and 12
    assert (far.baseline, far.system, far.difference) == (50.0, 100.0, 50.0)
    both = compare.main(arguments + ["--distances", "8-14"])[-1]  # anaphora's pair at 9 too: 4 of 6 and 5 of 6
    assert both.units == 3 and both.difference == pytest.approx(100 * (5 / 6 - 4 / 6))
    assert compare.main(arguments + ["--distances", "1"])[-1].difference == 50.0  # the pair at 1 only
    with pytest.raises(DataError, match="no example whose antecedent lies 5-7"):
        compare.main(arguments + ["--distances", "5-7"])
    with pytest.raises(DataError, match="no contrastive set ellipsis"):
        compare.main(arguments + ["--phenomena", "ellipsis"])
    with pytest.raises(DataError, match="LOW-HIGH"):
        compare.main(arguments + ["--distances", "far"])
    del reports["a.json"]["deixis"]["distances"]
    with pytest.raises(DataError, match="score it again"):
        compare.main(write_inputs(tmp_path, reports) + ["--distances", "8-14"])


def test_consistency_reports_record_each_examples_distance():
    examples = [{"src": "a", "dst": ["x", "y"], "true_ind": 0, "ctx_dist": d} for d in (3, 1, 8)]
    examples.append({"src": "b", "dst": ["x", "x"], "true_ind": 0, "ctx_dist": 5})  # one distinct text: skipped
    report = accuracy_report(examples, [[0.1, 0.9]] * 4)
    assert report["distances"] == [3, 1, 8] and len(report["correct"]) == 3


def test_by_position_groups_each_sentence_by_the_context_its_window_holds(tmp_path, capsys):
    documents = [Document("a", 5), Document("b", 1), Document("c", 3)]
    assert compare.position_groups(documents, 4) == {"first": [0, 5, 6], "2-3": [1, 2, 7, 8], "4 on": [3, 4]}
    assert compare.position_groups(documents, 3) == {"first": [0, 5, 6], "2": [1, 7], "3 on": [2, 3, 4, 8]}
    assert compare.position_groups(documents, 2) == {"first": [0, 5, 6], "2 on": [1, 2, 3, 4, 7, 8]}
    with pytest.raises(ValueError, match="holds no context"):
        compare.position_groups(documents, 1)
    # a system that is better only where the window is full of context: level on the first sentences
    full = [i for k in range(10) for i in range(10 * k + 3, 10 * k + 10)]
    baseline = corrupt(REFERENCES, set(range(100)))
    system = corrupt(REFERENCES, set(range(100)) - set(full))
    found = {c.metric: c for c in compare.by_position(baseline, system, REFERENCES, DOCUMENTS, 4, samples=200)}
    assert list(found) == ["s-BLEU, sentence first", "s-BLEU, sentence 2-3", "s-BLEU, sentence 4 on"]
    assert [found[name].units for name in found] == [10, 20, 70]
    assert found["s-BLEU, sentence first"].difference == 0 and found["s-BLEU, sentence 2-3"].difference == 0
    assert found["s-BLEU, sentence 4 on"].interval[0] > 0
    (tmp_path / "ref").write_text("\n".join(REFERENCES) + "\n")
    (tmp_path / "a").write_text("\n".join(baseline) + "\n")
    (tmp_path / "b").write_text("\n".join(system) + "\n")
    (tmp_path / "docs").write_text("".join(f"10\td{k}\n" for k in range(10)))
    arguments = ["--ref", str(tmp_path / "ref"), "--docs", str(tmp_path / "docs"), "--baseline", str(tmp_path / "a"),
                 "--system", str(tmp_path / "b"), "--samples", "200"]
    printed = [c.metric for c in compare.main(arguments + ["--by-position", "4"])]
    assert printed == ["s-BLEU", "d-BLEU", *found]
    assert "s-BLEU, sentence 4 on" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        compare.main(arguments + ["--by-position", "1"])
