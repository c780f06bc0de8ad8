"""The convergence budget (rfa_doc_mt.reproduce.convergence): its fairseq-train arguments, what a
row reports of a run's validation curve, other stopping rules replayed on recorded curves, the
rows and seeds it trains, and fairseq-train's early-stopping counter across a resume. No
training: logs and run directories are written by the tests."""

import os
from types import SimpleNamespace

import pytest
from test_search import FakeContext, fake_run

from rfa_doc_mt.reproduce import EMBEDDED, EXPERIMENTS
from rfa_doc_mt.reproduce.convergence import (
    capped_runs_note,
    convergence_summary,
    convergence_train_args,
    replay,
    replayable_rules,
    run_convergence,
    stopping_rules,
    stopping_rules_note,
    validation_bleu_curve,
)
from rfa_doc_mt.reproduce.papers import (
    CONTEXT_LENGTH_CONVERGENCE,
    MEMORY_FINETUNE_SHARE,
    TABLE1_CONVERGENCE,
    Convergence,
    System,
    row_seed,
)
from rfa_doc_mt.reproduce.search import CHOSEN_PLAN, CHOSEN_SETTINGS, Table1Search
from rfa_doc_mt.reproduce.tables import table_rfa_table1
from rfa_doc_mt.tasks.doc_translation import DocTranslationTask
from rfa_doc_mt.training_state import EARLY_STOP

# a curve that rises, peaks at 600 (91.0), and then moves within 0.3 of its peak
CURVE = [(100, 10.0), (200, 60.0), (300, 85.0), (400, 89.0), (500, 90.5), (600, 91.0), (700, 90.8),
         (800, 90.9), (900, 90.7), (1000, 91.0), (1100, 90.6), (1200, 90.8)]


def write_log(run_dir, curve, early=False, repeat_from=None, nll=None):
    """A train.log with fairseq's validation lines (and a resumed run's repeated ones); ``nll``:
    each validation's nll_loss (else 0.5)."""
    os.makedirs(run_dir, exist_ok=True)
    lines = []
    for index, (updates, bleu) in enumerate(curve):
        lines.append(f"2026-01-01 00:00:00 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 1.5 | "
                     f"nll_loss {nll[index] if nll else 0.5} | ppl 1.4 | bleu {bleu} | wps 100 | wpb 900 | bsz 90 | "
                     f"num_updates {updates} | "
                     f"best_bleu {bleu}")
        if repeat_from is not None and updates == repeat_from:  # killed after this validation, resumed from it
            lines.append(lines[-1])
    if early:
        lines.append(f"2026-01-01 00:00:00 | INFO | fairseq_cli.train | {EARLY_STOP} for last 5 runs")
    with open(os.path.join(run_dir, "train.log"), "w") as handle:
        handle.write("\n".join(lines) + "\n")


def test_train_arguments_validate_on_bleu_stop_on_patience_and_share_the_cap():
    convergence = Convergence(interval=100, patience=5, cap=2000)
    args = convergence_train_args(System("x", "configs/demo/transformer_L4.sh"), convergence)
    value = {name: args[args.index(name) + 1] for name in ("--max-update", "--validate-interval-updates",
                                                           "--save-interval-updates", "--patience",
                                                           "--best-checkpoint-metric", "--eval-bleu-args")}
    assert value == {"--max-update": "2000", "--validate-interval-updates": "100", "--save-interval-updates": "100",
                     "--patience": "5", "--best-checkpoint-metric": "bleu",
                     "--eval-bleu-args": '{"beam":4,"max_len_a":1.2,"max_len_b":10}'}
    assert "--eval-bleu" in args and "--maximize-best-checkpoint-metric" in args
    fine_tuned = System("m", "configs/demo/memory_L1.sh", "stage1", MEMORY_FINETUNE_SHARE)
    capped = convergence_train_args(fine_tuned, convergence)
    assert capped[capped.index("--max-update") + 1] == str(round(2000 * MEMORY_FINETUNE_SHARE))
    tiny = convergence_train_args(fine_tuned, Convergence(interval=2, patience=1, cap=4))
    assert tiny[tiny.index("--validate-interval-updates") + 1] == "1"  # a cap of 1 update validates at 1
    assert "--patience-min-gain" not in args
    gained = convergence_train_args(System("x", "configs/demo/transformer_L4.sh"), Convergence(200, 3, 4000, 0.2))
    assert gained[gained.index("--patience-min-gain") + 1] == "0.2"


def test_a_row_reports_its_selected_update_and_the_updates_to_95_and_99_percent():
    summary = convergence_summary(CURVE, cap=2000, early=True)
    # of the two validations at 91.0, fairseq keeps the later one as checkpoint_best.pt
    assert summary["best_update"] == 1000 and summary["best_valid_bleu"] == 91.0
    assert summary["updates_to_95"] == 400  # 89.0 >= 86.45 (95% of 91), 85.0 is not
    assert summary["updates_to_99"] == 500  # 90.5 >= 90.09, 89.0 is not
    assert summary["last_update"] == 1200 and not summary["reached_cap"] and summary["stopped_early"]
    capped = convergence_summary(CURVE, cap=1200, early=False)
    assert capped["reached_cap"]
    assert not convergence_summary(CURVE, cap=1300, early=False)["reached_cap"]  # stopped otherwise (killed)
    assert convergence_summary([], cap=1200, early=False) is None


def test_a_run_is_read_from_its_log_once_per_validation(tmp_path):
    write_log(tmp_path / "run", CURVE, early=True, repeat_from=500)
    assert validation_bleu_curve(str(tmp_path / "run")) == CURVE
    read = run_convergence(str(tmp_path / "run"), System("x", "configs/demo/transformer_L4.sh"), TABLE1_CONVERGENCE)
    assert read["stopped_early"] and read["curve"] == CURVE and read["best_update"] == 1000
    write_log(tmp_path / "capped", CURVE[:8])
    stage = System("m", "configs/demo/memory_L1.sh", share=0.4)  # its cap: 0.4 x 2000 = 800 updates
    assert run_convergence(str(tmp_path / "capped"), stage, Convergence(100, 5, 2000))["reached_cap"]
    assert run_convergence(str(tmp_path / "none"), stage, TABLE1_CONVERGENCE) is None


def test_replayed_rules_stop_where_their_patience_runs_out():
    # every point, patience 3: no gain at 700, 800, 900 after the peak at 600
    assert replay(CURVE, 1, 3) == (900, 600, 91.0)
    # patience 1 stops at the first point without a gain
    assert replay(CURVE, 1, 1) == (700, 600, 91.0)
    # every 2nd point (200, 400, ..., 1200), patience 2: after 600 (91.0), 800 (90.9) and 1000 (91.0) are
    # no gain; 1000 ties the best, so its checkpoint is the one kept (fairseq's >= for checkpoint_best)
    assert replay(CURVE, 2, 2) == (1000, 1000, 91.0)
    # every 4th point (400, 800, 1200): the peak at 600 is never validated
    assert replay(CURVE, 4, 1) == (1200, 800, 90.9)
    # a rule that outlasts the curve stops at its end
    assert replay(CURVE, 1, 20)[0] == 1200


# validation s-BLEU every 200 updates of the two LSH runs at L = 15 of the context-length experiment
# (docs/reproduction.md), both trained to the cap of 4000 under patience 3 without a minimum gain
LSH_L15 = [[(200 * (i + 1), s) for i, s in enumerate(curve)] for curve in (
    [1.44, 22.47, 86.02, 92.69, 95.16, 96.14, 95.67, 96.3, 96.5, 96.65, 96.82, 97.14, 97.67, 97.93, 97.94, 97.38,
     97.68, 98.26, 98.31, 97.75],
    [1.26, 43.18, 87.4, 92.29, 95.27, 95.12, 96.02, 96.86, 96.35, 97.36, 97.17, 97.69, 97.86, 98.38, 98.7, 98.7,
     98.32, 98.83, 98.9, 98.91])]


def test_a_minimum_gain_stops_a_creeping_curve_and_keeps_its_best_so_far():
    """What papers.CONTEXT_LENGTH_CONVERGENCE's comment and docs/reproduction.md say of the LSH
    curves: any gain resets the patience (they run to the cap); a gain of more than 0.2 stops them
    at 3400 and 3600, keeping the best so far; more than 0.5 at 1800 and 2200."""
    first, second = LSH_L15
    assert replay(first, 1, 3) == (4000, 3800, 98.31) and replay(second, 1, 3) == (4000, 4000, 98.91)
    assert replay(first, 1, 3, 0.2) == (3400, 3000, 97.94) and replay(second, 1, 3, 0.2) == (3600, 3600, 98.83)
    assert replay(first, 1, 3, 0.5) == (1800, 1800, 96.5) and replay(second, 1, 3, 0.5) == (2200, 2000, 97.36)
    # the gain is counted from the last score that reset the patience (1.0, then 1.4), not from the
    # highest so far: from 1.2, 1.4 would gain 0.2 only, and the rule would stop at 3
    assert replay([(1, 1.0), (2, 1.2), (3, 1.4), (4, 1.45), (5, 1.5)], 1, 2, 0.3) == (5, 5, 1.5)


# validation s-BLEU every 200 updates of the transformer at L = 15 (second seed): it stopped at
# 1800 under patience 3 with a minimum gain of 0.2, and went on resumed under patience 5
# (papers.CONTEXT_LENGTH_CONVERGENCE's comment)
TRANSFORMER_L15_SEED2 = [(200 * (i + 1), s) for i, s in enumerate(
    [1.23, 58.28, 84.62, 91.08, 90.43, 97.5, 95.66, 97.66, 97.48, 97.44, 98.2, 99.2])]


def test_the_context_length_budget_outwaits_a_noisy_validation():
    """Patience 3 stops the transformer's curve at 1800 keeping 97.66; the experiment's patience
    of 5 trains on through 2400, where it reached 99.20 (a rule that does not stop within a curve
    stops at its end)."""
    budget = CONTEXT_LENGTH_CONVERGENCE
    assert (budget.interval, budget.patience, budget.min_gain, budget.cap) == (200, 5, 0.2, 8000)
    assert replay(TRANSFORMER_L15_SEED2, 1, 3, 0.2) == (1800, 1600, 97.66)
    assert replay(TRANSFORMER_L15_SEED2, 1, budget.patience, budget.min_gain) == (2400, 2400, 99.2)


def test_a_run_the_cap_stopped_is_named_with_where_the_budgets_rule_stops_it():
    """The LSH curves ran to the cap without a minimum gain: the note replays a budget's rule
    (here patience 3, more than 0.2, cap 4000: the rule they were measured for) on them; a curve
    still rising at the cap is said to be; a run stopped on its patience is not named."""
    rule = Convergence(interval=200, patience=3, cap=4000, min_gain=0.2)
    summaries = {f"lsh seed {k + 1}": {**convergence_summary(curve, 4000, False), "curve": curve}
                 for k, curve in enumerate(LSH_L15)}
    rising = [(200 * (i + 1), 10.0 * i) for i in range(20)]
    summaries["rising"] = {**convergence_summary(rising, 4000, False), "curve": rising}
    summaries["stopped"] = {**convergence_summary(rising[:5], 4000, True), "curve": rising[:5]}
    note = capped_runs_note(summaries, rule)
    first, second, still = note.split("\n")[-3:]
    assert first.startswith("* lsh seed 1:") and "stops it at 3400, keeping 97.94 (at 3000), 0.37 below" in first
    assert "3800: 98.31, 4000: 97.75" in first and "stops it at 3600, keeping 98.83 (at 3600), 0.08 below" in second
    assert still.startswith("* rising:") and "does not stop it: still improving at the cap" in still
    assert "* stopped:" not in note
    assert capped_runs_note({"stopped": summaries["stopped"]}, rule) is None


def test_the_task_stops_early_on_a_minimum_gain_in_either_direction(monkeypatch):
    """The task's should_stop_early (in fairseq-train's place): with --patience-min-gain 1, gains of
    0.5 and 0.4 count as none, and patience 2 runs out; without it (0, or a task without the
    option), every gain resets the patience, as fairseq's own rule does."""
    import fairseq_cli.train as train

    from rfa_doc_mt.tasks.doc_translation import install_early_stopping_check, should_stop_early

    def stops(values, min_gain, maximize=True, task=True):
        checkpoint = SimpleNamespace(patience=2, maximize_best_checkpoint_metric=maximize)
        cfg = SimpleNamespace(checkpoint=checkpoint, **({"task": SimpleNamespace(patience_min_gain=min_gain)}
                                                        if task else {}))
        for name in ("best", "num_runs"):
            monkeypatch.delattr(should_stop_early, name, raising=False)
        return [should_stop_early(cfg, value) for value in values]

    assert stops([50.0, 50.5, 50.9], 1.0) == [False, False, True]
    assert stops([50.0, 50.5, 50.9], 0.0) == [False, False, False]
    assert stops([50.0, 50.5, 50.9], 1.0, task=False) == [False, False, False]
    assert stops([5.0, 4.5, 4.1], 1.0, maximize=False) == [False, False, True]
    assert stops([5.0, 3.5, 3.0, 1.9], 1.0, maximize=False) == [False, False, False, False]  # 1.5, then 1.6
    # installed in fairseq-train's place, with the state fairseq's function had
    def original(cfg, valid_loss):
        return False

    original.best, original.num_runs = 7.0, 1
    monkeypatch.setattr(train, "should_stop_early", original)
    install_early_stopping_check()
    assert train.should_stop_early is should_stop_early
    assert (should_stop_early.best, should_stop_early.num_runs) == (7.0, 1)


def test_the_rules_table_counts_lost_bleu_and_premature_stops():
    early = [(100, 50.0), (200, 49.0), (300, 80.0), (400, 79.0), (500, 79.5)]  # a dip before its best
    table = stopping_rules({"a": CURVE, "b": early}, interval=100, rules=[(1, 1), (1, 3)])
    impatient, patient = table
    assert impatient["runs"] == 2 and impatient["stopped_before_best"] == 1  # b stops at 200, before 300
    assert impatient["largest_bleu_lost"] == pytest.approx(30.0)  # b keeps 50.0 of 80.0
    assert patient["stopped_before_best"] == 0 and patient["mean_bleu_lost"] == 0.0
    assert patient["mean_past_selected"] == pytest.approx((300 + 200) / 2)  # a: 900 - 600, b: 500 - 300
    assert impatient["stopped_before_end"] == 2 and patient["stopped_before_end"] == 1  # b's ends at 500
    # only rules whose window without a gain fits in the recorded one can be replayed
    assert all(every * patience <= 5 for every, patience in replayable_rules(Convergence(100, 5, 2000)))
    assert (1, 5) in replayable_rules(Convergence(100, 5, 2000)) and (2, 3) not in replayable_rules(
        Convergence(100, 5, 2000))


def test_the_rules_note_leaves_out_the_patiences_past_the_first_that_stops_no_run():
    """With a patience far beyond the curves (a run trained to its cap), each interval's rows end at
    the first patience that stops no run; a shorter one that stops a run is kept."""
    rising = [(100 * i, float(i)) for i in range(1, 11)]  # a gain at every point
    dip = [(100, 5.0), (200, 4.0), (300, 4.5), (400, 6.0), (500, 7.0)]  # two points without a gain
    text, table = stopping_rules_note({"a": rising, "b": dip}, Convergence(100, 20, 1000))
    assert len(table) == 20 + 10 + 5  # the JSON keeps every rule
    lines = [line for line in text.splitlines() if line.startswith("| 100 |")]
    # patience 1 and 2 stop b, 3 stops neither: the last row of that interval
    assert [line.split(" | ")[1] for line in lines] == ["1", "2", "3"]
    assert "left out" in text


def test_table1_at_convergence_trains_the_chosen_settings_with_every_seed(tmp_path):
    rows = EXPERIMENTS["rfa_table1"].rows(EMBEDDED, converged=True)
    search = Table1Search(rows, CHOSEN_PLAN, 3, str(tmp_path))
    requests = search.requests()
    assert search.done() and not search.searches
    assert len(requests) == 3 * len(CHOSEN_SETTINGS) and all(evaluate == ("test", "consistency")
                                                            for _, evaluate in requests)
    assert {row: plan.chosen for row, plan in search.plans.items()} == CHOSEN_SETTINGS
    rfa = dict(search.plans["rfa_L4"].seeds)
    assert rfa[3].overrides[-2:] == ("--seed", "3") and "--rfa-causal-proj-dim" in rfa[1].overrides
    assert "No search" in search.note()


def test_table1_reports_convergence_per_row_over_seeds(tmp_path):
    rows = EXPERIMENTS["rfa_table1"].rows(EMBEDDED, converged=True)
    search = Table1Search(rows, CHOSEN_PLAN, 2, str(tmp_path))
    search.requests()
    seeds = {row: plan.seeds for row, plan in search.plans.items()}
    references = [f"w{i} a{i} b{i}" for i in range(10)]
    results = {}
    for row, seeded in seeds.items():
        for seed, system in seeded:
            results[system.key] = fake_run(tmp_path / system.key, references, references, 90.0, [1] * 10)
            curve = CURVE if seed == 1 else CURVE[:6]  # seed 2 stopped by a cap of 600
            results[system.key]["convergence"] = convergence_summary(curve, cap=600 if seed == 2 else 2000,
                                                                     early=seed == 1)
    context = FakeContext([(row, seeded[0][1]) for row, seeded in seeds.items()], results, seeds, search,
                          str(tmp_path))
    context.converged = True
    table, json_rows = table_rfa_table1(context)
    first = json_rows[0]["convergence"]
    assert first["best_update"] == {"mean": 800.0, "std": pytest.approx(282.84, abs=0.01), "n": 2}
    assert first["reached_cap"] == 1 and first["per_seed"][1]["reached_cap"]
    assert "| selected at | stopped at | to 95% | to 99% | cap |" in table and "| 1/2 |" in table
    assert "Search (seed 1" not in table


def test_context_length_at_convergence_trains_every_l_the_memory_and_a_second_seed_at_15():
    rows = EXPERIMENTS["context_length"].rows(EMBEDDED, converged=True)
    ids = [row_id for row_id, _ in rows]
    for family in ("transformer", "rfa_sgate", "lsh", "long_short"):
        for window in (1, 4, 8, 15):
            assert f"{family}_L{window}" in ids
        assert f"{family}_L15_seed2" in ids and f"{family}_L4_seed2" not in ids and f"{family}_L8_seed2" not in ids
    # the gates at every token and RFA-sgate with local cross heads: L = 15 only, two seeds
    for family in ("rfa_token", "rfa_feature", "rfa_sgate_cross_local"):
        assert f"{family}_L15" in ids and f"{family}_L15_seed2" in ids and f"{family}_L4" not in ids
    assert "memory" in ids and len(ids) == 4 * 4 + 4 + 3 * 2 + 1
    systems = dict(rows)
    second = systems["rfa_sgate_L15_seed2"]
    assert second.config == systems["rfa_sgate_L15"].config and second.overrides == ("--seed", "2")
    assert second.key == systems["rfa_sgate_L15"].key + "-seed2"
    assert row_seed("rfa_sgate_L15_seed2") == ("rfa_sgate_L15", 2) and row_seed("memory") == ("memory", 1)
    assert EXPERIMENTS["context_length"].convergence == CONTEXT_LENGTH_CONVERGENCE


def test_row_seeds_add_a_third_seed_to_the_rows_named_and_rows_train_part(capsys):
    """--row-seeds: a third seed where two disagree, for the row and the transformer it is compared
    with; refused without --converge, for a row the experiment lacks and for Table 1 (its search's).
    --rows: only the rows named, with their seeds."""
    from rfa_doc_mt.reproduce.cli import main

    experiment = EXPERIMENTS["context_length"]
    rows = dict(experiment.rows(EMBEDDED, converged=True, row_seeds={"transformer_L15": 3, "lsh_L4": 2}))
    assert rows["transformer_L15_seed3"].overrides == ("--seed", "3") and "transformer_L15_seed2" in rows
    assert rows["lsh_L4_seed2"].key == "context-lsh_L4-seed2" and "long_short_L15_seed3" not in rows
    assert "transformer_L15_seed2" not in dict(experiment.rows(EMBEDDED, converged=True,
                                                               row_seeds={"transformer_L15": 1}))
    for argv, message in ((["--row-seeds", "transformer_L15=3"], "goes with --converge"),
                          (["--converge", "--row-seeds", "transformer_L16=3"], "no row transformer_L16"),
                          (["--converge", "--row-seeds", "transformer_L15=0"], "is not ROW=N")):
        with pytest.raises(SystemExit):
            main(["context_length", "--out", "/nonexistent", *argv])
        assert message in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["rfa_table1", "--converge", "--row-seeds", "transformer_L4=2", "--out", "/nonexistent"])
    assert "search's" in capsys.readouterr().err
    # --rows: part of an experiment, the rows' seeds with them
    part = experiment.rows(EMBEDDED, converged=True, only=["rfa_sgate_L15", "memory"])
    assert [row for row, _ in part] == ["rfa_sgate_L15", "rfa_sgate_L15_seed2", "memory"]
    # ROW_seedN: that seed alone (seed 1 is the row's own id)
    for only, expected in ((["rfa_sgate_L15_seed2", "memory"], ["rfa_sgate_L15_seed2", "memory"]),
                           (["rfa_sgate_L15_seed1"], ["rfa_sgate_L15"])):
        assert [row for row, _ in experiment.rows(EMBEDDED, converged=True, only=only)] == expected
    for argv, message in ((["context_length", "--rows", "rfa_sgate_L16"], "no row rfa_sgate_L16"),
                          (["all", "--rows", "memory"], "goes with one experiment"),
                          (["rfa_table1", "--rows", "rfa_L4"], "only with --converge"),
                          (["context_length", "--rows", "rfa_sgate_L15_seed2"], "one seed of a row goes with"),
                          (["context_length", "--converge", "--rows", "rfa_sgate_L15_seed3"], "trains fewer seeds"),
                          (["rfa_table1", "--converge", "--rows", "rfa_L4_seed2"], "seeds are its search's"),
                          (["context_length", "--curves"], "--curves goes with --status")):
        with pytest.raises(SystemExit):
            main([*argv, "--out", "/nonexistent"])
        assert message in capsys.readouterr().err
    # Table 1 at convergence: the rows named, each its chosen setting with its seeds, nothing else
    assert main(["rfa_table1", "--converge", "--rows", "transformer_L4,rfa_cross_local_L4", "--status",
                 "--out", "/nonexistent"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]]
    assert listed == ["demo-transformer_L4", "demo-transformer_L4-seed2", "demo-transformer_L4-seed3",
                      "demo-rfa_cross_local_L4-p64x32", "demo-rfa_cross_local_L4-p64x32-seed2",
                      "demo-rfa_cross_local_L4-p64x32-seed3"]


def test_status_tells_each_run_not_started_training_or_trained(tmp_path, capsys):
    from rfa_doc_mt.reproduce.running import print_status

    runs = tmp_path / "runs"
    write_log(str(runs / "a"), CURVE[:5])  # interrupted at 500
    write_log(str(runs / "b"), CURVE, early=True)
    (runs / "b" / "train.done").write_text("")
    (runs / "b" / "test.bleu.json").write_text("{}")
    write_log(str(runs / "search-setting"), CURVE[:2])  # a run no system names: listed too
    write_log(str(runs / "stage1"), CURVE, early=True)
    (runs / "stage1" / "train.done").write_text("")
    systems = [System("A", "configs/a.sh", name=name) for name in ("a", "b", "c", "stage1")]
    states = print_status(str(runs), systems + [System("M", "configs/m.sh", starts_from="stage1", name="m")])
    assert list(states) == ["a", "b", "c", "stage1", "m", "search-setting"]
    assert states["stage1"].endswith("; a first stage, not scored")
    assert states["a"] == "training: 500 updates; validation s-BLEU 90.50 at 500, best 90.50 at 500"
    assert states["b"].startswith("trained: stopped on its patience, 1200 updates; validation s-BLEU 90.80 at "
                                  "1200, best 91.00 at 1000") and states["b"].endswith("; scored")
    assert states["c"] == states["m"] == "not started"
    assert "6 runs: 2 trained, 2 training or interrupted, 2 not started" in capsys.readouterr().out
    # kept elsewhere (--keep), not here yet: trained, and restored by the next run
    states = print_status(str(runs), systems, kept=["c", "a", "elsewhere"])
    assert states["c"] == states["a"] == "trained, kept (--keep): the next run of this command restores it"
    assert "elsewhere" not in states and states["b"].startswith("trained: stopped on its patience")
    assert "5 runs: 4 trained, 1 training or interrupted, 0 not started" in capsys.readouterr().out


def test_status_gives_a_training_runs_pace_since_its_last_start(tmp_path):
    """A run in training: when it last logged, its seconds an update between the progress lines of
    its last start only (the hours it was stopped are not counted) and the hours to its last update."""
    import datetime

    from rfa_doc_mt.reproduce.running import run_status, training_pace

    def stamp(minutes):
        return (datetime.datetime(2026, 1, 1) + datetime.timedelta(minutes=minutes)).strftime("%Y-%m-%d %H:%M:%S")

    def progress(minutes, updates):
        return f"{stamp(minutes)} | INFO | train_inner | epoch 001:  10 / 400 loss=5.2, num_updates={updates}, lr=1\n"

    run = tmp_path / "run"
    run.mkdir()
    lines = [f"{stamp(0)} | INFO | fairseq_cli.train | {{'common': {{}}, 'optimization': {{'max_update': 1000}}}}\n",
             progress(1, 100), progress(2, 200),  # 60 s an update in the first start
             f"{stamp(600)} | INFO | fairseq_cli.train | {{'optimization': {{'max_update': 1000}}}}\n",
             progress(601, 250), progress(611, 400)]  # then 4 s an update, 600 updates left
    (run / "train.log").write_text("".join(lines))
    now = datetime.datetime.strptime(stamp(614), "%Y-%m-%d %H:%M:%S").timestamp()
    assert training_pace(str(run), now=now) == (
        "last logged 10:11 (3 min ago); 4.00 s an update since its last start: about 0.7 hours to update 1000")
    assert run_status(str(run)).startswith("training: 400 updates; no validation yet; last logged 10:11")
    with open(run / "train.log", "a") as handle:  # a new start: one progress line is no pace yet
        handle.write(lines[3] + progress(700, 450))
    assert training_pace(str(run)) is None and run_status(str(run)) == "training: 450 updates; no validation yet"


def test_status_curves_give_every_validation_with_its_epochs(tmp_path, capsys):
    from rfa_doc_mt.reproduce.running import print_status, run_curve

    write_log(str(tmp_path / "a"), CURVE[:3], nll=[4.25, 3.5, 3.125])
    assert run_curve(str(tmp_path / "a")) == (
        "validation s-BLEU / NLL at update: 100 10.00 / 4.250, 200 60.00 / 3.500, 300 85.00 / 3.125")
    with open(tmp_path / "a" / "train.log", "a") as handle:  # fairseq's progress line: an epoch is 400 updates
        handle.write("2026-01-01 00:00:00 | INFO | train_inner | epoch 002:    50 / 400 loss=5.2, num_updates=450\n")
    assert run_curve(str(tmp_path / "a")) == (
        "validation s-BLEU / NLL at update (epochs: 400 updates each): 100 (0.2) 10.00 / 4.250, "
        "200 (0.5) 60.00 / 3.500, 300 (0.8) 85.00 / 3.125")
    assert run_curve(str(tmp_path / "none")) is None
    print_status(str(tmp_path), [System("A", "configs/a.sh", name=name) for name in ("a", "b")], curves=True)
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split()[0] == "a" and lines[2].strip() == run_curve(str(tmp_path / "a"))
    assert lines[3].split() == ["b", "not", "started"] and len(lines) == 4


def test_the_early_stopping_counter_survives_a_resume(monkeypatch):
    """fairseq-train keeps its patience count on its should_stop_early function; the task saves it
    in the checkpoint and puts it back on resume, so that a resumed run stops where an
    uninterrupted one does."""
    import fairseq_cli.train as train

    cfg = SimpleNamespace(checkpoint=SimpleNamespace(patience=3, maximize_best_checkpoint_metric=True))
    scores = [50.0, 60.0, 59.0, 58.0, 61.0, 60.0, 60.5, 57.0]

    def run(values):
        for index, value in enumerate(values):
            if train.should_stop_early(cfg, value):
                return index
        return None

    for name in ("best", "num_runs"):
        monkeypatch.delattr(train.should_stop_early, name, raising=False)
    uninterrupted = run(scores)
    assert uninterrupted == 7  # 61.0 at index 4, then three validations without a gain
    task = object.__new__(DocTranslationTask)
    for cut in range(1, len(scores)):
        for name in ("best", "num_runs"):
            monkeypatch.delattr(train.should_stop_early, name, raising=False)
        assert run(scores[:cut]) is None
        saved = task.get_checkpoint_dict()[type(task).__name__]  # fairseq: extra_state["DocTranslationTask"]
        for name in ("best", "num_runs"):
            monkeypatch.delattr(train.should_stop_early, name)  # a new process
        task.set_checkpoint_dict(saved)
        assert cut + run(scores[cut:]) == uninterrupted, cut
    # without the saved counter, a resumed run counts from its first validation and trains on
    for name in ("best", "num_runs"):
        monkeypatch.delattr(train.should_stop_early, name, raising=False)
    run(scores[:5])
    for name in ("best", "num_runs"):
        monkeypatch.delattr(train.should_stop_early, name)
    assert run(scores[5:]) is None


def test_curves_of_a_crowded_plot_stay_distinct():
    """A learning-curve plot with more rows than matplotlib's ten colours (the diagnosis draws 12)
    gives each row its own colour and line style."""
    from rfa_doc_mt.reproduce.tables import line_style

    styles = [tuple(sorted(line_style(index).items())) for index in range(40)]
    assert len(set(styles)) == 40
    assert line_style(0)["color"] == line_style(10)["color"] and line_style(0) != line_style(10)


def test_the_context_length_curves_are_drawn_one_panel_a_window(tmp_path):
    """Each window size gets a panel of its own, the memory model beside the longest windows, the
    seeds of a row in its row's panel; the panels come in the order of their first row."""
    from rfa_doc_mt.reproduce.experiments import EXPERIMENTS
    from rfa_doc_mt.reproduce.papers import EMBEDDED
    from rfa_doc_mt.reproduce.tables import bleu_curves_plot, curve_panels, seed_groups

    experiment = EXPERIMENTS["context_length"]
    rows = experiment.rows(EMBEDDED, converged=True)
    panels = curve_panels(seed_groups(rows), experiment.curve_panel)
    assert [title.split(" ")[2] for title in panels] == ["1", "4", "8", "15"]
    longest = {row for row, _ in panels["L = 15 and the memory model (whole document)"]}
    assert {"memory", "transformer_L15", "rfa_token_L15"} <= longest and "transformer_L8" not in longest
    assert [len(members) for row, members in panels["L = 15 and the memory model (whole document)"]
            if row == "transformer_L15"] == [2]
    assert list(curve_panels(seed_groups(rows), None)) == [""]
    # drawn: a run's curve in each panel (the others have none yet)
    results = {system.key: {} for _, system in rows}
    results[rows[0][1].key] = {"convergence": {"curve": [(200, 50.0), (400, 80.0)]}}
    path = bleu_curves_plot(rows, None, results, str(tmp_path / "curves.png"), "t", experiment.curve_panel)
    assert (tmp_path / "curves.png").stat().st_size > 0 and path == str(tmp_path / "curves.png")
