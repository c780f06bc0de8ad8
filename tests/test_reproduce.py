"""The reproduce scripts end to end in smoke mode: a tiny corpus, 3 updates per system, tiny benchmarks.

``reproduce_all.sh --smoke`` trains every system once; each ``reproduce_<experiment>.sh`` then
runs against the same results directory, resumes (trains nothing) and prints its table.
"""

import json
import os
import subprocess
import sys

import pytest

from rfa_doc_mt.data.io import DataError, read_docs, read_lines
from rfa_doc_mt.reproduce import (
    EMBEDDED,
    EXPERIMENTS,
    FULL_BUDGET,
    System,
    config_problems,
    data_problems,
    embedded_train_args,
    learning_curve,
    prepare_embedded,
    systems_to_train,
)
from rfa_doc_mt.reproduce.papers import CONTEXT_LENGTH_BUDGET, TABLE1_BUDGET
from rfa_doc_mt.reproduce.running import config_architectures

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = ["rfa_table1", "rfa_figure3", "rfa_figure4", "lsh_table2", "memory_table1", "lstm", "context_length"]
DIAGNOSIS = ["rfa_diagnosis", "rfa_diagnosis_long"]  # not part of `all`
REAL_TEXT = ["bible"]  # a real corpus only: not part of `all` either (tests/test_real_text.py)


EMBEDDED_EXPERIMENTS = [experiment for experiment in EXPERIMENTS.values() if EMBEDDED in experiment.corpora]


def reproduce(name, *args):
    return subprocess.run(["bash", os.path.join(ROOT, "scripts", f"reproduce_{name}.sh"), *args],
                          capture_output=True, text=True, timeout=3000)


def rows_of(out, name):
    return json.loads((out / f"{name}.json").read_text())["rows"]


def test_every_script_exists_and_is_executable():
    for name in SCRIPTS + DIAGNOSIS + REAL_TEXT + ["all"]:
        path = os.path.join(ROOT, "scripts", f"reproduce_{name}.sh")
        assert os.access(path, os.X_OK), path
    assert sorted(EXPERIMENTS) == sorted(SCRIPTS + DIAGNOSIS + REAL_TEXT)
    assert sorted(name for name, experiment in EXPERIMENTS.items() if not experiment.in_all) == sorted(
        DIAGNOSIS + REAL_TEXT)
    assert [name for name, experiment in EXPERIMENTS.items() if EMBEDDED not in experiment.corpora] == REAL_TEXT


def started_keys(stderr):
    return [line.split("] started ", 1)[1].split()[0] for line in stderr.splitlines() if "] started " in line]


def test_all_trains_each_system_once_and_writes_every_table(smoke_all):
    out, done = smoke_all
    started = started_keys(done.stderr)
    assert len(started) == len(set(started)), started  # no system trained (or even started) twice
    assert "diagnosis-" not in done.stderr  # `all` trains none of the diagnosis (tests/test_diagnosis.py)
    # every system of the other tables, and Table 1's search and seeds; a smoke run's stage 1 of the
    # memory model is the L=1 transformer's run (the same config and arguments), linked
    table1 = json.loads((out / "rfa_table1.json").read_text())
    expected = {system.key for system in systems_to_train(
        row for experiment in EXPERIMENTS.values() if not experiment.searches and experiment.in_all
        for row in experiment.rows("embedded", smoke=True))}
    expected |= {r["run"] for r in table1["search"]} | {f["run"] for r in table1["rows"] for f in r["seeds"]}
    linked = out / "runs" / "demo-transformer_L1-memory_stage1"
    assert linked.is_symlink() and os.readlink(linked) == "demo-transformer_L1"
    assert set(started) == expected - {linked.name}
    for name in SCRIPTS:
        text = (out / f"{name}.md").read_text()
        corpus = {"rfa_figure4": "speed only", "context_length": "embedded long-range corpus"}
        assert corpus.get(name, "embedded synthetic corpus") in text
        assert "| ---" in text
        data = json.loads((out / f"{name}.json").read_text())
        assert data["experiment"] == name and data["rows"] and data["machine"]["cpu_count"] >= 1
        table = "\n".join(line for line in text.splitlines() if line.startswith("|"))
        assert table and table in "\n".join(line for line in done.stdout.splitlines() if line.startswith("|"))
        if name != "rfa_figure4":  # every trained row says how many updates its model had, and has a curve
            assert "| updates |" in text and "Smoke run: 3 updates per system" in text
            assert (out / f"{name}_curves.png").stat().st_size > 0
            assert all(len(curve) >= 1 for curve in data["curves"].values())
            assert all(row.get("updates") == 3 for row in data["rows"] if "updates" in row)


def test_decode_speed_measures_a_batch_curve(smoke_all, tmp_path):
    """``--batch-sizes`` measures every model at each batch size of one L; plot draws the curve."""
    out, _ = smoke_all
    path = tmp_path / "curve.json"
    command = [sys.executable, "-m", "rfa_doc_mt.bench.decode_speed", "run", "--data", str(out / "data"),
               "--out", str(path), "--window-sizes", "1", "--batch-sizes", "1,2", "--batches", "1",
               "--threads", "1"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(path.read_text())["summary"]
    assert [(s["window_size"], s["batch_size"]) for s in summary] == [(1, 1), (1, 2)]
    for s in summary:
        assert set(s["tokens_per_second"]) == {"transformer", "rfa", "ceiling"}
        assert 0 < s["rfa_share_of_ceiling"] and 0 <= s["reorder_share"]["transformer"] < 1
    plot = subprocess.run([sys.executable, "-m", "rfa_doc_mt.bench.decode_speed", "plot", str(path), "--out",
                           str(tmp_path / "curve.png")], capture_output=True, text=True, cwd=ROOT)
    assert plot.returncode == 0, plot.stderr[-3000:]
    assert (tmp_path / "curve.png").stat().st_size > 0
    bad = subprocess.run(command[:-6] + ["--batch-sizes", "0"], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode != 0 and "at least one window" in bad.stderr


def test_decode_memory_probes_both_models(smoke_all, tmp_path):
    """One probe per model within a generous budget: measured peaks and speeds, and the ratio."""
    out, _ = smoke_all
    path = tmp_path / "memory.json"
    command = [sys.executable, "-m", "rfa_doc_mt.bench.decode_memory", "run", "--data", str(out / "data"),
               "--out", str(path), "--window-size", "1", "--start", "2", "--probes", "1", "--budget-mb", "100000"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(path.read_text())
    assert [(p["model"], p["batch_size"]) for p in result["probes"]] == [("transformer", 2), ("rfa", 2)]
    assert all(p["peak_mb"] >= 0 and p["tokens_per_second"] > 0 for p in result["probes"])
    assert result["summary"]["rfa"]["largest_batch_within_budget"] == 2
    assert result["summary"]["rfa_over_transformer"]["batch"] == 1.0


def test_rfa_tables(smoke_all):
    out, _ = smoke_all
    table1 = rows_of(out, "rfa_table1")
    assert [r["row"] for r in table1] == ["transformer_L1", "rfa_L1", "transformer_L4", "rfa_L4",
                                          "rfa_sgate_avg_L4", "rfa_sgate_L4", "rfa_token_L4", "rfa_feature_L4",
                                          "rfa_cross_local_L4"]
    # a smoke run: the second seed for the L=1 rows only
    assert [[f["seed"] for f in r["seeds"]] for r in table1] == [[1, 2], [1, 2], [1], [1], [1], [1], [1], [1], [1]]
    search = json.loads((out / "rfa_table1.json").read_text())["search"]
    chosen = {r["row"]: r for r in search if r["chosen"]}
    for row in table1:
        assert all(0 <= f[metric] <= 100 for f in row["seeds"] for metric in ("s_bleu", "d_bleu",
                                                                               "pooled_consistency"))
        assert row["s_bleu"]["mean"] == pytest.approx(sum(f["s_bleu"] for f in row["seeds"]) / len(row["seeds"]))
        assert (row["s_bleu"]["std"] is None) == (len(row["seeds"]) == 1)
        assert row["setting"] == chosen[row["row"]]["setting"] and row["seeds"][0]["run"] == chosen[row["row"]]["run"]
    assert table1[5]["paper_bleu"] == {"iwslt15_zh_en": 31.2, "opensubtitles_en_ru": 33.2}
    # the gates at every token: no paper numbers, and compared with RFA-sgate seed by seed too; the local
    # cross heads with RFA
    for row, base, key in ((table1[6], "rfa_sgate_L4", "against_sgate"), (table1[7], "rfa_sgate_L4", "against_sgate"),
                           (table1[8], "rfa_L4", "against_rfa")):
        assert row["paper_bleu"] == {"iwslt15_zh_en": None, "opensubtitles_en_ru": None}
        assert row[key]["baseline_row"] == base
        assert [c["seed"] for c in row[key]["per_seed"]] == [1]
    assert not any("against_sgate" in row or "against_rfa" in row for row in table1[:6])
    assert "against_sgate" not in table1[8] and "against_rfa" not in table1[6]
    assert table1[4]["setting"]["gate_bias"] == 2 and table1[4]["seeds"][0]["run"].endswith("-bf2")
    # each system against the transformer of its L, seed by seed
    for row in table1:
        if row["row"].startswith("transformer"):
            assert "against" not in row
            continue
        against = row["against"]
        assert against["baseline_row"] == "transformer_L" + row["row"].rsplit("_L", 1)[1]
        assert [c["seed"] for c in against["per_seed"]] == [f["seed"] for f in row["seeds"]]
        for comparison in against["per_seed"]:
            for metric in ("s_bleu", "d_bleu", "pooled_consistency"):
                figures = comparison[metric]
                low, high = figures["interval"]
                assert low <= figures["difference"] <= high and 0 < figures["p_value"] <= 1
    # the smoke search: the transformer L=1 chooses between two learning rates on its decoded validation
    # split; every other row has one setting (the configs' own; RFA-sgate-avg's b_f 2), not decoded there
    assert [r["row"] for r in search] == ["transformer_L1"] + [r["row"] for r in table1]
    assert [r["setting"]["lr"] for r in search[:2]] == ["2e-3", "1e-3"]
    assert all(0 <= r["valid_s_bleu"] <= 100 for r in search[:2]) and sum(r["chosen"] for r in search[:2]) == 1
    assert all(r["valid_s_bleu"] is None and r["chosen"] for r in search[2:])
    text = (out / "rfa_table1.md").read_text()
    assert "Against the transformer of the same L and seed" in text and "Search (seed 1" in text
    assert "The gates at every token against RFA-sgate of the same L and seed" in text
    figure3 = rows_of(out, "rfa_figure3")
    # a smoke run's Figure 3: L = 1 and 4 (L = 2 and 3 differ only in the context size)
    assert [r["row"] for r in figure3] == [f"{f}_L{w}" for f in ("transformer", "rfa") for w in (1, 4)]
    for row in figure3:
        assert set(row["accuracy"]) >= {"pooled", "deixis"}
        assert all(0 <= value <= 100 for value in row["accuracy"].values())
    # mirrored contrastive pairs: a sentence-level model cannot beat chance on any set
    assert all(value == 50.0 for value in figure3[0]["accuracy"].values())
    assert (out / "rfa_figure3.png").stat().st_size > 0
    figure4 = rows_of(out, "rfa_figure4")
    assert [r["L"] for r in figure4] == [1, 2]
    assert all(r["speedup"] > 0 and r["ceiling_speedup"] > 0 for r in figure4)
    assert figure4[0]["paper_speedup_cpu"] == 1.58
    assert (out / "rfa_figure4.png").stat().st_size > 0


def test_lsh_memory_and_lstm_tables(smoke_all):
    out, _ = smoke_all
    lsh = rows_of(out, "lsh_table2")
    trained = [(r["attention"], r["context_size"]) for r in lsh]
    # a smoke run leaves out LSH self-attention alone (it runs in LSH self+cross), trained and measured
    assert trained == [(a, k) for a in ("full", "self-cross") for k in (0, 3)]
    assert all(r["step_memory_mb"] is not None and r["step_memory_mb"] >= 0 for r in lsh)
    assert (out / "lsh_table2_memory.png").stat().st_size > 0
    memory = rows_of(out, "memory_table1")
    assert [r["row"] for r in memory if r["table"] == 1] == ["baseline", "memory"]
    # a smoke run trains the top layer's memory on both sides and on each side alone
    assert [r["row"] for r in memory if r["table"] == 3] == ["both_top", "source_top", "target_top"]
    # the same trained system stands in both tables
    by_row = {(r["table"], r["row"]): r for r in memory}
    assert by_row[(1, "memory")]["s_bleu"] == by_row[(3, "both_top")]["s_bleu"]
    lstm = rows_of(out, "lstm")
    assert [r["row"] for r in lstm] == ["1to1", "3to3", "3to3_lstm"]
    # the 1-to-1 system is the sentence-level transformer of the other tables, trained once
    assert lstm[0]["s_bleu"] == rows_of(out, "lsh_table2")[0]["s_bleu"]


def test_context_length_table(smoke_all):
    """On its own corpus (antecedents up to 14 back): accuracy per distance bucket, per phenomenon,
    and the costs of each system, with the plot."""
    out, _ = smoke_all
    prep = json.loads((out / "data-long-range" / "prep.json").read_text())
    assert prep["max_distance"] == 14 and prep["document_sentences"] == [16, 20]
    rows = rows_of(out, "context_length")
    # a smoke run: RFA-sgate at the longest windows, and the memory model (its own stage 1 on this corpus)
    assert [(r["row"], r["L"]) for r in rows] == [("rfa_sgate_L15", "15"), ("memory", "document")]
    assert [r["run"] for r in rows] == ["context-rfa_sgate_L15", "context-memory"]  # each row names its run
    assert (out / "runs" / "context-transformer_L1-memory_stage1" / "train.done").is_file()
    buckets = ["1", "2-3", "4-7", "8-14"]
    for row in rows:
        assert list(row["accuracy_by_distance"]) == buckets
        for phenomenon, per_bucket in row["accuracy_by_phenomenon"].items():
            assert list(per_bucket) == buckets
            assert all(f["examples"] == 2 and f["interval"][0] <= f["accuracy"] <= f["interval"][1]
                       for f in per_bucket.values()), (phenomenon, per_bucket)
        assert row["seconds_per_update"] > 0 and row["training_minutes"] > 0 and row["peak_training_mb"] > 100
        assert row["decoding"]["tokens_per_second"] > 0 and row["decoding"]["sentences_per_second"] > 0
        assert row["decoding"]["alone"]
    # the speeds: each run's test split decoded once more alone, the same checkpoint, the same translations
    alone = sorted((out / "runs").glob("context-*/decoded-alone/test.hyp"))
    assert [path.parent.parent.name for path in alone] == ["context-memory", "context-rfa_sgate_L15"]
    assert all(path.read_text() == (path.parent.parent / "test.hyp").read_text() for path in alone)
    text = (out / "context_length.md").read_text()
    assert "| acc. 8-14 |" in text and "Per phenomenon" in text and "466 sentences" in text
    assert (out / "context_length.png").stat().st_size > 0


def test_each_script_resumes_and_prints_its_table(smoke_all):
    out, _ = smoke_all
    before = {name: json.loads((out / f"{name}.json").read_text())["rows"] for name in SCRIPTS}
    for pair in (SCRIPTS[i:i + 2] for i in range(0, len(SCRIPTS), 2)):  # two at a time: two cores
        processes = {name: subprocess.Popen(["bash", os.path.join(ROOT, "scripts", f"reproduce_{name}.sh"), "--smoke",
                                             "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                            text=True) for name in pair}
        for name, process in processes.items():
            stdout, stderr = process.communicate(timeout=600)
            assert process.returncode == 0, stderr[-2000:]
            assert "] started " not in stderr  # every system was finished by the run above
            assert "| ---" in stdout
            assert before[name] == json.loads((out / f"{name}.json").read_text())["rows"]


def test_kept_runs_resume_a_reproduction_that_lost_its_folder(smoke_all, tmp_path):
    """--keep: the finished runs kept without their checkpoints, then restored into a fresh
    folder (its corpus generated anew), where nothing trains and the table comes out the same."""
    out, _ = smoke_all
    keep = tmp_path / "keep"
    done = reproduce("context_length", "--smoke", "--out", str(out), "--keep", str(keep))
    assert done.returncode == 0, done.stderr[-2000:]
    # the rows' runs, and the first stage the memory model was fine-tuned from
    assert sorted(path.name for path in keep.iterdir()) == [
        "context-memory.tar.xz", "context-rfa_sgate_L15.tar.xz", "context-transformer_L1-memory_stage1.tar.xz"]
    fresh = tmp_path / "fresh"
    done = reproduce("context_length", "--smoke", "--out", str(fresh), "--keep", str(keep))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "restored from" in done.stderr and "] started " not in done.stderr
    assert rows_of(fresh, "context_length") == rows_of(out, "context_length")
    assert not list((fresh / "runs").rglob("*.pt"))


def test_missing_data_is_reported_before_any_work(tmp_path):
    out = tmp_path / "out"
    done = reproduce("rfa_table1", "--corpus", "iwslt15", "--data", str(tmp_path / "nowhere"), "--out", str(out))
    assert done.returncode != 0
    assert "data directory not found" in done.stderr
    assert not (out / "runs").exists()
    done = reproduce("rfa_table1", "--corpus", "wmt", "--data", str(tmp_path), "--out", str(out))
    assert done.returncode != 0 and "unknown corpus 'wmt'" in done.stderr
    done = reproduce("rfa_table1", "--corpus", "iwslt15", "--out", str(out))
    assert done.returncode != 0 and "needs --data" in done.stderr


def test_data_and_config_checks(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "prep.json").write_text(json.dumps({"source_lang": "zh", "target_lang": "en"}))
    for split in ("train", "valid", "test"):
        for lang in ("zh", "en"):
            (data / f"{split}.zh-en.{lang}.idx").write_text("")
    assert data_problems(str(data), needs_consistency=False) == []
    problems = data_problems(str(data), needs_consistency=True)
    assert len(problems) == 1 and "consistency" in problems[0]
    (data / "consistency").mkdir()
    assert data_problems(str(data), needs_consistency=True) == []
    problems = data_problems(str(data), needs_consistency=True, selects_on_consistency=True)
    assert len(problems) == 1 and "valid_consistency: missing" in problems[0]
    (data / "valid_consistency").mkdir()
    (data / "valid_consistency" / "consistency.json").write_text("{}")
    assert data_problems(str(data), needs_consistency=True, selects_on_consistency=True) == []
    (data / "train.zh-en.en.idx").unlink()
    assert any("train.zh-en.en.idx" in p for p in data_problems(str(data), needs_consistency=False))

    bad_arch = tmp_path / "bad_arch.sh"
    bad_arch.write_text('MODEL_ARGS="--arch no_such_arch"\n')
    no_arch = tmp_path / "no_arch.sh"
    no_arch.write_text('MODEL_ARGS="--share-all-embeddings"\n')
    problems = config_problems([System("a", str(bad_arch)), System("b", str(no_arch)),
                                System("c", "configs/demo/not_there.sh"), System("d", "configs/demo/rfa_L4.sh")])
    assert len(problems) == 3, problems
    assert any(p.startswith(str(bad_arch)) and "unknown architecture 'no_such_arch'" in p for p in problems)
    assert any(p.startswith(str(no_arch)) and "no --arch" in p for p in problems)
    assert any(p.startswith("configs/demo/not_there.sh") and "not found" in p for p in problems)


def test_configs_are_read_without_running_them(tmp_path):
    """The architecture check reads a config and what it sources as text: a config that would
    fail if run (here: exits) is still read, and a shared file beside it is followed."""
    (tmp_path / "common.sh").write_text('case "$X" in a) MODEL_ARGS="--arch doc_transformer" ;;\n'
                                        '  b) MODEL_ARGS="--arch rfa_doc_transformer" ;; esac\n')
    config = tmp_path / "config.sh"
    config.write_text('exit 3\n# --arch commented_out\nsource "$(dirname "${BASH_SOURCE[0]}")/common.sh"\n')
    assert config_architectures(str(config)) == (["doc_transformer", "rfa_doc_transformer"], [])
    memory_config = os.path.join(ROOT, "configs/demo/memory_both_0.sh")  # sources memory_L1.sh, which names it
    assert config_architectures(memory_config)[0] == ["memory_doc_transformer_tiny"]
    (tmp_path / "common.sh").unlink()
    names, problems = config_architectures(str(config))
    assert names == [] and len(problems) == 1 and "does not exist" in problems[0]


def test_smoke_and_full_runs_do_not_share_a_directory(tmp_path):
    (tmp_path / "reproduce.json").write_text(json.dumps({"mode": "smoke"}))
    with pytest.raises(DataError, match="smoke run"):
        prepare_embedded(str(tmp_path), smoke=False)


def test_every_embedded_system_gets_the_same_budget_and_the_memory_stages_share_it():
    for budget in (FULL_BUDGET, 900):
        rows = [row for experiment in EMBEDDED_EXPERIMENTS for row in experiment.systems(EMBEDDED)]
        systems = {system.key: system for system in systems_to_train(rows)}
        totals = set()
        for system in systems.values():
            args = embedded_train_args(system, budget)
            updates = int(args[args.index("--max-update") + 1])
            if system.starts_from:
                parent = systems[system.starts_from]
                updates += parent.updates(budget)
                assert not parent.starts_from
            if not any(s.starts_from == system.key for s in systems.values()):  # a table row
                totals.add(updates)
            # every system validates (and picks checkpoint_best.pt) at the same updates
            value = {option: args[args.index(option) + 1]
                     for option in ("--validate-interval-updates", "--save-interval-updates")}
            assert value["--validate-interval-updates"] == value["--save-interval-updates"]
        assert totals == {budget}


def test_every_run_validates_at_least_once_at_its_experiments_interval():
    """Each experiment validates its runs ``experiment.validations`` times at the same updates; a
    run shorter than the interval (the memory model's fine-tuning, a quarter of the budget) would
    never validate and have no checkpoint_best.pt. The context-length experiment draws no
    learning curves and validates less often than the others."""
    from rfa_doc_mt.reproduce.papers import VALIDATIONS_PER_RUN

    assert EXPERIMENTS["context_length"].validations < VALIDATIONS_PER_RUN
    for experiment in EMBEDDED_EXPERIMENTS:
        for budget in {experiment.budget, FULL_BUDGET, 300}:
            intervals = set()
            for system in systems_to_train(experiment.systems(EMBEDDED)):
                args = embedded_train_args(system, budget, experiment.validations)
                interval = int(args[args.index("--validate-interval-updates") + 1])
                assert interval <= int(args[args.index("--max-update") + 1]), (experiment.name, system.key, budget)
                intervals.add(interval)
            assert len(intervals) <= 1 and (not intervals or intervals == {budget // experiment.validations})


def test_each_system_is_evaluated_for_what_its_tables_show():
    """Figure 3 shows consistency: a system only it shows is not decoded; the memory model's stage 1,
    which no table shows, is trained only; Table 1's systems are left to its search."""
    from rfa_doc_mt.reproduce.cli import static_requests

    plan = [(experiment, experiment.rows(EMBEDDED)) for experiment in EMBEDDED_EXPERIMENTS]
    systems, evaluate = static_requests(plan, searched=True)
    assert evaluate["demo-rfa_L2"] == {"consistency"} and evaluate["demo-transformer_L3"] == {"test", "consistency"}
    assert evaluate["demo-transformer_L1-memory_stage1"] == set()
    assert "demo-rfa_sgate_L4" not in evaluate and "demo-rfa_L4" in evaluate  # RFA L=4: Figure 3 shows it
    assert "demo-rfa_sgate_L4" in static_requests(plan, searched=False)[1]


def test_list_prints_every_system_with_its_config_and_updates():
    done = subprocess.run([sys.executable, "-m", "rfa_doc_mt.reproduce", "--list", "--budget", "800"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any("demo-lsh_L4" in line and "configs/demo/lsh_L4.sh" in line and "800 updates" in line for line in lines)
    assert any("demo-transformer_L1-memory_stage1" in line and "600 updates" in line for line in lines)
    assert any("demo-memory_L1" in line and "200 updates, fine-tuned from demo-transformer_L1-memory_stage1" in line
               for line in lines)
    # Table 1: the search's settings with their runs, and the seeds
    assert any("rfa_L4: projections (cross+causal) {128+16, 64+32}, then learning rate {1e-3, 2e-3} (3 runs)" in line
               for line in lines)
    assert any("demo-rfa_L4-p128x16" in line and "lr 2e-3, 128+16" in line for line in lines)
    assert any("rfa_sgate_L4: b_f {1, 2}, at rfa_L4's chosen learning rate and projections" in line for line in lines)
    assert any("rfa_L1: learning rate {1e-3, 2e-3}, at rfa_L4's chosen projections" in line for line in lines)
    # the gates at every token and the local cross heads: one setting each, RFA-sgate's learning rate and
    # projections (rfa_L4's)
    for row in ("rfa_token_L4", "rfa_feature_L4", "rfa_cross_local_L4"):
        assert any(f"{row}: its config's setting, at rfa_L4's chosen learning rate and projections" in line
                   and "(1 run)" in line for line in lines), row
    assert any("seeds: 3 per row" in line and "34 runs in all" in line for line in lines)  # 16 settings + 9 x 2
    two = subprocess.run([sys.executable, "-m", "rfa_doc_mt.reproduce", "--list", "--seeds", "2"],
                         capture_output=True, text=True, cwd=ROOT).stdout
    assert "seeds: 2 per row" in two and "25 runs in all" in two
    # without --budget: Table 1 alone trains TABLE1_BUDGET updates a run (its 34 runs), the others FULL_BUDGET
    assert f"search: each setting trains {TABLE1_BUDGET} updates" in two and TABLE1_BUDGET != FULL_BUDGET
    assert any("demo-lsh_L4" in line and f"{FULL_BUDGET} updates" in line for line in two.splitlines())
    # the context-length experiment: every method at four window sizes, the memory model from its own stage 1
    for family in ("transformer", "rfa_sgate", "lsh", "long_short"):
        for window in (1, 4, 8, 15):
            assert any(f"context-{family}_L{window} " in line and f"configs/context/{family}_L{window}.sh" in line
                       and f"{CONTEXT_LENGTH_BUDGET} updates" in line for line in two.splitlines()), (family, window)
    assert any("context-memory" in line and "fine-tuned from context-transformer_L1-memory_stage1" in line
               for line in two.splitlines())
    # and RFA's gates at every token at the longest windows, and RFA-sgate with local cross heads
    for family in ("rfa_token", "rfa_feature", "rfa_sgate_cross_local"):
        assert any(f"context-{family}_L15 " in line and f"configs/context/{family}_L15.sh" in line
                   for line in two.splitlines()), family


def test_table1_alone_trains_its_own_budget_and_all_trains_one():
    """Without --budget Table 1 alone trains TABLE1_BUDGET, `all` FULL_BUDGET for every table (its
    runs are shared), the others FULL_BUDGET; a table's note calls a run short against its own."""
    from types import SimpleNamespace

    from rfa_doc_mt.reproduce.cli import full_budget
    from rfa_doc_mt.reproduce.experiments import budget_note

    assert full_budget("rfa_table1") == TABLE1_BUDGET < FULL_BUDGET
    assert full_budget("all") == full_budget("lsh_table2") == full_budget("rfa_figure3") == FULL_BUDGET
    assert full_budget("context_length") == CONTEXT_LENGTH_BUDGET < FULL_BUDGET
    for budget, full in ((TABLE1_BUDGET, TABLE1_BUDGET), (FULL_BUDGET, FULL_BUDGET), (50, TABLE1_BUDGET)):
        note = budget_note(SimpleNamespace(smoke=False, corpus=EMBEDDED, budget=budget, full_budget=full), {})
        assert f"trained {budget} updates" in note
        assert ("A short run" in note) == (budget < full)


def test_learning_curve_reads_the_validation_lines_of_a_log(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text(
        "2026 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 4.754 | nll_loss 4.1 | num_updates 100\n"
        "2026 | INFO | train_inner | epoch 001:  150 / 200 loss=3.1, num_updates=150, lr=1e-3\n"
        "2026 | INFO | valid | epoch 002 | valid on 'valid' subset | loss 2.007 | nll_loss 0.8 | num_updates 200 "
        "| best_loss 2.007\n"
        "2026 | INFO | valid | epoch 002 | valid on 'valid' subset | loss 2.007 | nll_loss 0.8 | num_updates 200\n"
        "2026 | INFO | valid | epoch 002 | valid on 'valid_consistency' subset | loss 1.5 | num_updates 200\n")
    assert learning_curve(str(run)) == [(100, 4.754), (200, 2.007)]



def config_words(config):
    """A config's TASK_ARGS, MODEL_ARGS and TRAIN_ARGS as a list of words (loaded as the scripts load it)."""
    shell = (f'source "{ROOT}/scripts/common.sh"; load_config "{os.path.join(ROOT, config)}"; '
             'echo "$TASK_ARGS $MODEL_ARGS $TRAIN_ARGS"')
    return subprocess.run(["bash", "-c", shell], check=True, capture_output=True, text=True).stdout.split()


def option(words, name):
    return words[len(words) - 1 - words[::-1].index(name) + 1]


def without(words, *names):
    """``words`` without the options ``names`` and their values."""
    kept, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word in names:
            skip = True
        else:
            kept.append(word)
    return kept


def test_embedded_configs_keep_the_papers_settings():
    # Petrick et al. 2022: four hash rounds for LSH in all three attentions, one for self-attention only
    for config, rounds in (("configs/demo/lsh_L4.sh", "4"), ("configs/demo/lsh_self_cross_k0.sh", "4"),
                           ("configs/demo/lsh_self_k0.sh", "1"), ("configs/demo/lsh_self_k3.sh", "1"),
                           ("configs/lsh/self_cross_k3.sh", "4"), ("configs/lsh/self_k3.sh", "1")):
        assert option(config_words(config), "--lsh-rounds") == rounds, config
    # Feng et al. 2022: the embedded memory model optimises over the windows of the paper configs
    paper = option(config_words("configs/memory/both_5.sh"), "--optimization-window")
    for config in ("memory_L1", "memory_both_0", "memory_both_01", "memory_source_1", "memory_target_1"):
        assert option(config_words(f"configs/demo/{config}.sh"), "--optimization-window") == paper, config
    # the context-length configs: the demo's systems, L - 1 context sentences; LSH with L hash classes
    # rounded up to even (Petrick et al. 2022, §5.2), four rounds
    demo = {"transformer": "transformer_L4", "rfa_sgate": "rfa_sgate_L4", "lsh": "lsh_L4", "long_short": "lstm_L4"}
    for family, model in demo.items():
        reference = config_words(f"configs/demo/{model}.sh")
        for window in (1, 4, 8, 15):
            words = config_words(f"configs/context/{family}_L{window}.sh")
            assert option(words, "--context-size") == str(window - 1)
            assert without(words, "--context-size", "--lsh-hash-classes") == \
                without(reference, "--context-size", "--lsh-hash-classes")
            if family == "lsh":
                assert option(words, "--lsh-hash-classes") == str(window + window % 2)
                assert option(words, "--lsh-rounds") == "4"
    # the remedy at L = 15: RFA-sgate's config with 2 local cross heads; at L = 4 (Table 1), RFA's
    for remedy, base in (("configs/context/rfa_sgate_cross_local_L15.sh", "configs/context/rfa_sgate_L15.sh"),
                         ("configs/demo/rfa_cross_local_L4.sh", "configs/demo/rfa_L4.sh")):
        words = config_words(remedy)
        assert option(words, "--rfa-cross-local-heads") == "2", remedy
        assert without(words, "--rfa-cross-local-heads") == config_words(base), remedy


# ----------------------------------------------------------------------------------------
# Every family: translate.sh on the raw test text gives decode.sh's hypotheses (with the smoke
# reproduction's models, so here, in the file that reads them)


FAMILY_RUNS = {"transformer": "transformer_L4", "RFA-sgate": "rfa_sgate_L4", "long-short masking": "lstm_L",
               "LSH": "lsh_L4", "recurrent memory": "memory_L1"}


def decoded_run(runs, name):
    """The run directory of the smoke reproduction's demo system ``name`` (or, for a prefix, the
    first such run) that was decoded by scripts/decode.sh."""
    found = sorted(path for path in runs.glob(f"demo-{name}*") if (path / "test.decode.json").is_file())
    exact = [path for path in found if path.name == f"demo-{name}"]
    assert found, f"no decoded run demo-{name}* in {runs}"
    return (exact or found)[0]


@pytest.mark.parametrize("family", sorted(FAMILY_RUNS))
def test_every_family_translates_raw_text_as_decode_sh(smoke_all, family, one_thread):
    """The smoke reproduction's tiny model of each family, decoded there by scripts/decode.sh
    (run_system.sh: beam 4, 64 windows a batch, 1.2 x source + 10): translating the raw test
    documents of its corpus gives the same lines."""
    from rfa_doc_mt.data.text import TextDocument
    from rfa_doc_mt.generation.translate import Translator

    out, _ = smoke_all
    run_dir, data = decoded_run(out / "runs", FAMILY_RUNS[family]), out / "data"
    sentences = read_lines(str(data / "raw" / "test.src"))
    documents, start = [], 0
    for document in read_docs(str(data / "test.docs"), num_sentences=len(sentences)):
        documents.append(TextDocument(document.name, sentences[start:start + document.num_sentences]))
        start += document.num_sentences
    translator = Translator(str(run_dir / "checkpoint_best.pt"), str(data), cpu=True)
    translated = [line for document in translator.translate(documents) for line in document]
    assert translated == read_lines(str(run_dir / "test.hyp"))


def test_gpus_are_asked_of_torch_only_where_a_gpu_driver_is(monkeypatch):
    """Without a GPU driver's device files a reproduction counts no GPUs and starts no torch import;
    with them it asks torch, in a child process."""
    from rfa_doc_mt.reproduce import cli

    asked = []

    def run(command, **kwargs):
        asked.append(command)
        return subprocess.CompletedProcess(command, 0, stdout="3\n", stderr="")

    monkeypatch.setattr(subprocess, "run", run)
    monkeypatch.setattr(cli.os.path, "exists", lambda path: False)
    monkeypatch.setattr("glob.glob", lambda pattern: [])
    assert cli.gpu_count() == 0 and asked == []
    monkeypatch.setattr("glob.glob", lambda pattern: ["/dev/nvidia0"] if pattern.startswith("/dev/nvidia") else [])
    assert cli.gpu_count() == 3 and len(asked) == 1 and "torch.cuda.device_count()" in asked[0][-1]
