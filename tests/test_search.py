"""Table 1's search and seeds (rfa_doc_mt.reproduce.search) and its table, on faked run
directories: no training."""

import argparse
import json
import os

import pytest
from test_reproduce import config_words, option

from rfa_doc_mt.reproduce import EMBEDDED, EXPERIMENTS
from rfa_doc_mt.reproduce.search import (
    DEMO_GATE_BIAS,
    DEMO_LEARNING_RATE,
    DEMO_PROJECTIONS,
    FULL_PLAN,
    FULL_SPACE,
    ROW_SEARCHES,
    SMOKE_PLAN,
    SMOKE_SEEDED_ROWS,
    Setting,
    Table1Search,
    candidates,
    config_setting,
    reachable,
    runs_per_row,
    select,
    variant,
)
from rfa_doc_mt.reproduce.tables import spread, table_rfa_table1

ROWS = EXPERIMENTS["rfa_table1"].corpora[EMBEDDED]
BASE = dict(ROWS)


def test_the_demo_settings_are_the_configs_own():
    """A setting equal to a config's own is that config's run: the constants must be the configs'."""
    from rfa_doc_mt.models.rfa_transformer import rfa_doc_transformer_tiny

    for row, system in ROWS:
        words = config_words(system.config)
        assert option(words, "--lr") == DEMO_LEARNING_RATE, row
        family = ROW_SEARCHES[row].family
        if family in DEMO_GATE_BIAS:
            assert float(option(words, "--rfa-gate-bias-init")) == DEMO_GATE_BIAS[family], row
        if family != "transformer":
            assert "--rfa-cross-proj-dim" not in words  # the architecture's default, below
    args = argparse.Namespace()
    rfa_doc_transformer_tiny(args)
    assert (args.rfa_cross_proj_dim, args.rfa_causal_proj_dim) == DEMO_PROJECTIONS
    # the scaled counterparts of the paper's 256+32 and 128+64: per head dimension (32 against 64)
    assert args.decoder_embed_dim // args.decoder_attention_heads == 32
    assert FULL_SPACE.projections == ((256 // 2, 32 // 2), (128 // 2, 64 // 2))


def test_each_row_tries_its_settings_and_the_others_wait_for_rfa():
    assert [s.lr for s in candidates("transformer_L1", FULL_PLAN, {})] == ["1e-3", "2e-3"]
    assert all(s.projections is None and s.gate_bias is None for s in candidates("transformer_L4", FULL_PLAN, {}))
    # RFA L=4: the projections at the configs' learning rate first, then the learning rate
    assert candidates("rfa_L4", FULL_PLAN, {}) == [Setting("2e-3", (128, 16)), Setting("2e-3", (64, 32))]
    assert runs_per_row("rfa_L4", FULL_PLAN) == 3 and len(reachable("rfa_L4", FULL_PLAN, {})) == 4
    for row in ("rfa_L1", "rfa_sgate_L4", "rfa_sgate_avg_L4", "rfa_token_L4", "rfa_feature_L4", "rfa_cross_local_L4"):
        assert candidates(row, FULL_PLAN, {}) is None, row  # RFA L=4 has not chosen
    chosen = Setting("1e-3", (64, 32))
    assert candidates("rfa_sgate_avg_L4", FULL_PLAN, {"rfa_L4": chosen}) == [Setting("1e-3", (64, 32), 1),
                                                                              Setting("1e-3", (64, 32), 2)]
    # RFA L=1: its own learning rate, RFA L=4's projections
    rfa_l1 = candidates("rfa_L1", FULL_PLAN, {"rfa_L4": chosen})
    assert rfa_l1 == [Setting("1e-3", (64, 32)), Setting("2e-3", (64, 32))]
    # the gates at every token and the local cross heads: RFA L=4's learning rate and projections, as
    # RFA-sgate's, no search
    for row in ("rfa_token_L4", "rfa_feature_L4", "rfa_cross_local_L4"):
        assert candidates(row, FULL_PLAN, {"rfa_L4": chosen}) == [Setting("1e-3", (64, 32))], row
        assert runs_per_row(row, FULL_PLAN) == 1, row
    assert sum(runs_per_row(row, FULL_PLAN) for row in BASE) == 13 + 3


def test_a_setting_becomes_fairseq_arguments_after_the_configs():
    base = BASE["rfa_sgate_avg_L4"]
    own = variant(base, "rfa_sgate_avg", config_setting("rfa_sgate_avg"), 1)
    assert own is base  # the config's own setting and seed: its run, shared with the other tables
    other = variant(base, "rfa_sgate_avg", Setting("1e-3", (128, 16), 2), 3)
    assert other.key == "demo-rfa_sgate_avg_L4-lr1e-3-p128x16-bf2-seed3" and other.config == base.config
    assert other.overrides == ("--lr", "1e-3", "--rfa-cross-proj-dim", "128", "--rfa-causal-proj-dim", "16",
                               "--rfa-gate-bias-init", "2", "--seed", "3")
    # appended after the config's words, each option's last value is the setting's
    words = config_words(base.config) + list(other.overrides)
    assert option(words, "--lr") == "1e-3" and option(words, "--seed") == "3"
    assert option(words, "--rfa-gate-bias-init") == "2"


def test_the_highest_validation_bleu_wins_and_a_tie_goes_to_the_first():
    a, b, c = Setting("1e-3"), Setting("2e-3"), Setting("3e-3")
    assert select([(a, 90.0), (b, 91.5), (c, 91.0)]) == b
    assert select([(a, 91.5), (b, 91.5)]) == a
    with pytest.raises(ValueError):
        select([])


def score(run_dir, s_bleu, split="valid"):
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, f"{split}.bleu.json"), "w") as handle:
        json.dump({"s_bleu": {"score": s_bleu, "signature": "sig"}, "d_bleu": {"score": s_bleu - 1,
                                                                                 "signature": "sig"}}, handle)


def test_the_search_chooses_on_faked_validation_scores_and_then_asks_for_the_seeds(tmp_path):
    search = Table1Search(ROWS, FULL_PLAN, 3, str(tmp_path))
    first = search.requests()
    assert all(evaluate == ("valid",) for _, evaluate in first)
    # the transformers' 2 + 2 settings and RFA L=4's two projections; RFA L=1 and the gated rows wait
    assert [system.key for system, _ in first if "rfa" in system.key] == ["demo-rfa_L4-p128x16", "demo-rfa_L4-p64x32"]
    assert len(first) == 6
    assert all(search.unlocks(system) for system, _ in first if "rfa" in system.key)
    assert not search.unlocks(BASE["transformer_L1"])
    # the projections: 64+32 scores best on validation (the test split's scores are never read)
    score(tmp_path / "demo-rfa_L4-p128x16", 96.0)
    score(tmp_path / "demo-rfa_L4-p64x32", 96.5)
    score(tmp_path / "demo-rfa_L4-p128x16", 99.9, split="test")
    second = [system.key for system, evaluate in search.requests() if "rfa" in system.key]
    assert second == ["demo-rfa_L4-lr1e-3-p64x32", "demo-rfa_L4-p64x32"]  # then the learning rate, at 64+32
    assert "rfa_L4" not in search.chosen()
    score(tmp_path / "demo-rfa_L4-lr1e-3-p64x32", 97.0)
    third = search.requests()
    assert search.chosen()["rfa_L4"] == Setting("1e-3", (64, 32))
    opened = [system.key for system, evaluate in third if evaluate == ("valid",) and "rfa" in system.key]
    assert opened == ["demo-rfa_L1-lr1e-3-p64x32", "demo-rfa_L1-p64x32",
                      "demo-rfa_sgate_avg_L4-lr1e-3-p64x32-bf1", "demo-rfa_sgate_avg_L4-lr1e-3-p64x32-bf2",
                      "demo-rfa_sgate_L4-lr1e-3-p64x32-bf1", "demo-rfa_sgate_L4-lr1e-3-p64x32"]
    seeds = [system.key for system, evaluate in third if evaluate == ("test", "consistency")]
    # RFA L=4's seeds, and the gates at every token, which have nothing to choose, at its setting
    assert seeds == [f"demo-{row}-lr1e-3-p64x32{seed}"
                     for row in ("rfa_L4", "rfa_token_L4", "rfa_feature_L4", "rfa_cross_local_L4")
                     for seed in ("", "-seed2", "-seed3")]
    assert not search.done()
    for system, evaluate in search.requests():
        if evaluate == ("valid",):
            score(tmp_path / system.key, 90.0 + len(system.key) % 7)
    final = search.requests()
    assert search.done() and all(evaluate == ("test", "consistency") for _, evaluate in final)
    assert len(final) == 9 * 3
    rows = {r["run"]: r for r in search.search_rows()}
    assert rows["demo-rfa_L4-lr1e-3-p64x32"]["chosen"] and rows["demo-rfa_L4-lr1e-3-p64x32"]["stage"] == 2
    assert not rows["demo-rfa_L4-p128x16"]["chosen"] and rows["demo-rfa_L4-p128x16"]["valid_s_bleu"] == 96.0
    assert len(rows) == 13 + 3 and sum(r["chosen"] for r in rows.values()) == 9


def test_the_smoke_plan_decodes_validation_only_where_there_is_a_choice(tmp_path):
    """A smoke run: the transformer L=1 chooses between two learning rates; every other row has
    one setting, chosen without a validation decode; the second seed for the L=1 rows."""
    search = Table1Search(ROWS, SMOKE_PLAN, 2, str(tmp_path), seeded_rows=SMOKE_SEEDED_ROWS)
    first = search.requests()
    validated = [system.key for system, evaluate in first if evaluate == ("valid",)]
    assert validated == ["demo-transformer_L1", "demo-transformer_L1-lr1e-3"]
    assert set(search.chosen()) == set(BASE) - {"transformer_L1"}
    # the configs' own runs (shared with the other tables), and RFA-sgate-avg at b_f 2
    tested = {system.key for system, evaluate in first if evaluate == ("test", "consistency")}
    assert tested == {"demo-rfa_L1", "demo-rfa_L1-seed2", "demo-transformer_L4", "demo-rfa_L4",
                      "demo-rfa_sgate_avg_L4-bf2", "demo-rfa_sgate_L4", "demo-rfa_token_L4", "demo-rfa_feature_L4",
                      "demo-rfa_cross_local_L4"}
    score(tmp_path / "demo-transformer_L1", 10.0)
    score(tmp_path / "demo-transformer_L1-lr1e-3", 10.0)  # a tie: the first, the config's own
    assert {system.key for system, _ in search.requests()} >= {"demo-transformer_L1", "demo-transformer_L1-seed2"}
    assert search.done() and search.chosen()["transformer_L1"] == Setting(DEMO_LEARNING_RATE)


def test_seeded_rows_limit_the_extra_seeds(tmp_path):
    search = Table1Search(ROWS, FULL_PLAN, 2, str(tmp_path), seeded_rows=["transformer_L1"])
    while not search.done():
        for system, _ in search.requests():
            score(tmp_path / system.key, 50.0)
    assert [len(plan.seeds) for plan in search.plans.values()] == [2, 1, 1, 1, 1, 1, 1, 1, 1]


def test_spread_is_the_mean_and_sample_deviation():
    assert spread([90.0, 92.0, 94.0]) == {"mean": 92.0, "std": 2.0, "n": 3}
    assert spread([90.0]) == {"mean": 90.0, "std": None, "n": 1}
    assert spread([90.0, None]) is None


class FakeContext:
    def __init__(self, systems, results, seeds, search, runs):
        self.systems, self.results, self.seeds, self.search, self.runs = systems, results, seeds, search, runs
        self.notes, self.extra, self.bench = [], {}, None
        self.converged = False


def fake_run(run_dir, hypotheses, references, s_bleu, correct):
    os.makedirs(run_dir, exist_ok=True)
    for name, lines in (("test.hyp", hypotheses), ("test.ref", references)):
        with open(os.path.join(run_dir, name), "w") as handle:
            handle.write("\n".join(lines) + "\n")
    with open(os.path.join(run_dir, "test.docs"), "w") as handle:
        handle.write("".join(f"5\td{k}\n" for k in range(len(references) // 5)))
    with open(os.path.join(run_dir, "consistency.json"), "w") as handle:
        json.dump({"deixis": {"accuracy": 100.0 * sum(correct) / len(correct), "random": 50.0,
                              "examples": len(correct), "correct": correct},
                   "pooled": {"accuracy": 100.0 * sum(correct) / len(correct), "random": 50.0,
                              "examples": len(correct)}}, handle)
    return {"s_bleu": s_bleu, "d_bleu": s_bleu - 1, "bleu_signature": "sig", "updates": 1000, "curve": [],
            "consistency": {"pooled": {"accuracy": 100.0 * sum(correct) / len(correct), "random": 50.0}}}


def test_table1_gives_mean_and_spread_over_seeds_and_compares_each_seed(tmp_path):
    """Three seeds per row on faked outputs: the transformers translate every sentence right,
    the others spoil 0, 1 and 2 of 20 sentences (seeds 1-3)."""
    references = [f"w{i} a{i} b{i} c{i}" for i in range(20)]
    search = Table1Search(ROWS, FULL_PLAN, 3, str(tmp_path))
    while not search.done():
        for system, _ in search.requests():
            score(tmp_path / system.key, 80.0 + len(system.key) % 5)
    seeds = {row: plan.seeds for row, plan in search.plans.items()}
    results = {}
    s_bleu = {}
    for row, seeded in seeds.items():
        for seed, system in seeded:
            spoilt = 0 if row.startswith("transformer") else seed - 1
            hypotheses = ["x y z u" if i < spoilt else r for i, r in enumerate(references)]
            baseline = row.startswith("transformer")
            s_bleu[(row, seed)] = 100.0 if baseline else 100.0 - 2.0 * seed
            correct = [1] * 10 if baseline else [1] * (10 - seed) + [0] * seed
            results[system.key] = fake_run(tmp_path / system.key, hypotheses, references, s_bleu[(row, seed)], correct)
    rows = [(row, seeded[0][1]) for row, seeded in seeds.items()]
    context = FakeContext(rows, results, seeds, search, str(tmp_path))
    table, json_rows = table_rfa_table1(context)
    by_row = {r["row"]: r for r in json_rows}
    rfa = by_row["rfa_L4"]
    assert [f["seed"] for f in rfa["seeds"]] == [1, 2, 3]
    assert [f["s_bleu"] for f in rfa["seeds"]] == [98.0, 96.0, 94.0]
    assert rfa["s_bleu"] == {"mean": 96.0, "std": 2.0, "n": 3}
    assert rfa["pooled_consistency"]["mean"] == pytest.approx(80.0)  # 90, 80, 70
    assert rfa["pooled_consistency"]["std"] == pytest.approx(10.0)
    assert "96.00 ± 2.00" in table and "80.0 ± 10.0" in table
    assert rfa["setting"] == search.chosen()["rfa_L4"].as_dict() and rfa["setting"]["label"] in table
    against = rfa["against"]
    assert against["baseline_row"] == "transformer_L4" and [c["seed"] for c in against["per_seed"]] == [1, 2, 3]
    seed1, seed3 = against["per_seed"][0], against["per_seed"][2]
    # seed 1 translates as the transformer does: no difference, p = 1; seed 3 spoils 2 of 20 sentences
    assert seed1["s_bleu"]["difference"] == 0.0 and seed1["s_bleu"]["p_value"] == 1.0
    assert seed3["s_bleu"]["difference"] < 0 and seed3["s_bleu"]["interval"][1] <= 0
    assert seed3["pooled_consistency"]["difference"] == pytest.approx(-30.0)
    assert not any("against" in by_row[row] for row in ("transformer_L1", "transformer_L4"))
    assert "Against the transformer of the same L and seed" in table and "Search (seed 1" in table
    assert len(context.extra["search"]) == 13 + 3 and context.extra["seeds"] == 3
    # the gates at every token against RFA-sgate too, seed by seed; the paper's rows not
    for row in ("rfa_token_L4", "rfa_feature_L4"):
        against_sgate = by_row[row]["against_sgate"]
        assert against_sgate["baseline_row"] == "rfa_sgate_L4"
        # both spoil seed - 1 sentences (the same ones): seed by seed, no difference at all
        assert [c["s_bleu"]["difference"] for c in against_sgate["per_seed"]] == [0.0, 0.0, 0.0]
        assert by_row[row]["against"]["baseline_row"] == "transformer_L4"
    assert not any("against_sgate" in by_row[row] for row in by_row if row not in ("rfa_token_L4", "rfa_feature_L4"))
    assert "The gates at every token against RFA-sgate of the same L and seed" in table
    # the local cross heads against RFA, and nothing else against RFA
    against_rfa = by_row["rfa_cross_local_L4"]["against_rfa"]
    assert against_rfa["baseline_row"] == "rfa_L4" and [c["run"] for c in against_rfa["per_seed"]] == \
        [system.key for _, system in seeds["rfa_cross_local_L4"]]
    assert [c["baseline_run"] for c in against_rfa["per_seed"]] == [system.key for _, system in seeds["rfa_L4"]]
    assert not any("against_rfa" in by_row[row] for row in by_row if row != "rfa_cross_local_L4")
    assert "The local cross heads against RFA of the same L and seed" in table


def test_the_cost_estimate_counts_each_row_at_its_dearest_setting():
    from rfa_doc_mt.reproduce.cost import table1_estimate, table1_settings

    settings = table1_settings()
    # RFA L=4 may train each of its 4 settings; the gated rows 2 b_f under each of those 4 choices
    assert len(settings["rfa_L4"]) == 4 and len(settings["rfa_sgate_L4"]) == 8 and len(settings["rfa_L1"]) == 4
    for row in ("rfa_token_L4", "rfa_feature_L4", "rfa_cross_local_L4"):
        assert len(settings[row]) == 4, row  # RFA L=4's 4 choices
    seconds = {system.key: 1.0 for systems in settings.values() for system in systems}
    assert table1_estimate(seconds, 3, 100)["core_seconds"] == (16 + 9 * 2) * 100
    seconds["demo-rfa_L4-lr1e-3-p64x32"] = 2.0  # the dearest setting of RFA L=4 costs its 3 runs and 2 seeds
    estimate = table1_estimate(seconds, 3, 100)
    assert estimate["rows"]["rfa_L4"]["search_core_seconds"] == 3 * 200 and estimate["runs"] == 34
    assert estimate["core_seconds"] == (16 + 9 * 2) * 100 + 5 * 100


FAKE_RUN_SYSTEM = """#!/usr/bin/env bash
# scripts/run_system.sh CONFIG DATA OUT [args]: records the call, "trains" and "evaluates" at once
out=$3; mkdir -p "$out"; echo "$(basename "$out") [$EVALUATE] ${MEMORY_PRETRAINED:+from $MEMORY_PRETRAINED}" >> "$CALLS"
touch "$out/train.done"
for step in $EVALUATE; do
  case $step in valid) echo '{"s_bleu": {"score": 1}}' > "$out/valid.bleu.json" ;;
    test) echo '{}' > "$out/test.bleu.json" ;; consistency) echo '{}' > "$out/consistency.json" ;; esac
done
"""


def test_run_systems_trains_each_system_once_for_all_its_requests(tmp_path, monkeypatch):
    """The scheduler on a fake run_system.sh: requests of one system before it starts are one
    run; a system requested with nothing to evaluate (a stage 1) still trains, before what
    starts from it; what ``more()`` asks for runs when asked; a finished request is skipped."""
    from rfa_doc_mt.reproduce import running
    from rfa_doc_mt.reproduce.papers import System

    (tmp_path / "scripts").mkdir()
    script = tmp_path / "scripts" / "run_system.sh"
    script.write_text(FAKE_RUN_SYSTEM)
    script.chmod(0o755)
    calls = tmp_path / "calls"
    monkeypatch.setattr(running, "ROOT", str(tmp_path))
    monkeypatch.setenv("CALLS", str(calls))
    data, runs = tmp_path / "data", tmp_path / "runs"
    (data / "consistency").mkdir(parents=True)
    stage1, base = System("stage 1", "c.sh", name="stage1"), System("base", "c.sh", name="base")
    tuned = System("fine-tuned", "f.sh", starts_from="stage1", name="tuned")
    later = [System("seed 2", "c.sh", name="base-seed2")]

    def more():
        done = (runs / "base" / "valid.bleu.json").exists()
        return [(base, ("valid",))] + ([(base, ("test", "consistency")), (later[0], ("test",))] if done else [])

    running.run_systems([(tuned, ("test",)), (stage1, ()), (base, ("consistency",))], str(data), str(runs), 1,
                        lambda system: [], more=more, priority=lambda system: 2 if system.starts_from else 1)
    lines = [line.strip() for line in calls.read_text().splitlines()]
    assert lines[:4] == ["stage1 []", "base [valid consistency]", "base [test]", "base-seed2 [test]"]
    assert lines[4].startswith("tuned [test] from ") and lines[4].endswith("runs/stage1/checkpoint_best.pt")
    assert len(lines) == 5
    calls.unlink()
    running.run_systems([(stage1, ()), (base, ("valid", "test", "consistency"))], str(data), str(runs), 2,
                        lambda system: [])
    assert not calls.exists()  # everything was finished


GPU_RUN_SYSTEM = """#!/usr/bin/env bash
# records which GPU each run saw and how many runs held a GPU at once, then "trains" for a moment
out=$3; mkdir -p "$out" "$LOCKS"; touch "$LOCKS/$CUDA_VISIBLE_DEVICES.$(basename "$out")"
echo "$(basename "$out") gpu=$CUDA_VISIBLE_DEVICES held=$(ls "$LOCKS" | wc -l)" >> "$CALLS"
sleep 0.3; rm "$LOCKS/$CUDA_VISIBLE_DEVICES.$(basename "$out")"; touch "$out/train.done"
"""


def test_run_systems_gives_each_run_a_gpu_of_its_own(tmp_path, monkeypatch):
    """With two GPUs and four jobs allowed, at most two runs hold a GPU at once, never the same one."""
    from rfa_doc_mt.reproduce import running
    from rfa_doc_mt.reproduce.papers import System

    (tmp_path / "scripts").mkdir()
    script = tmp_path / "scripts" / "run_system.sh"
    script.write_text(GPU_RUN_SYSTEM)
    script.chmod(0o755)
    calls = tmp_path / "calls"
    monkeypatch.setattr(running, "ROOT", str(tmp_path))
    monkeypatch.setenv("CALLS", str(calls))
    monkeypatch.setenv("LOCKS", str(tmp_path / "locks"))
    systems = [System(f"s{k}", "c.sh", name=f"s{k}") for k in range(5)]
    running.run_systems([(s, ()) for s in systems], str(tmp_path / "data"), str(tmp_path / "runs"), 4,
                        lambda system: [], gpus=2)
    lines = calls.read_text().splitlines()
    assert len(lines) == 5
    assert {line.split()[1] for line in lines} == {"gpu=0", "gpu=1"}
    assert all(int(line.split("held=")[1]) <= 2 for line in lines)
