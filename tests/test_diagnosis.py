"""The diagnosis of RFA's slow learning end to end in smoke mode (not part of `all`): its smoke rows
trained a fixed budget validated on s-BLEU, their curves and where their cross attention looks.
A folder of its own (its corpus generated there), so that it runs beside the smoke reproduction
of tests/test_reproduce.py, not after it. The long-range diagnosis runs the same driver on the
long-range corpus (trained end to end by the smoke reproduction's context-length experiment):
its smoke plan is checked here, not trained again."""

import json
import os
import subprocess

import pytest

from rfa_doc_mt.reproduce.experiments import EMBEDDED, EXPERIMENTS

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_diagnosis_trains_a_fixed_budget_validated_on_bleu_and_reads_the_cross_attention(tmp_path):
    out = tmp_path / "reproduce"
    completed = subprocess.run(["bash", os.path.join(ROOT, "scripts", "reproduce_rfa_diagnosis.sh"), "--smoke",
                                "--out", str(out), "--jobs", "2"], capture_output=True, text=True, timeout=3000)
    assert completed.returncode == 0, completed.stderr[-3000:]
    data = json.loads((out / "rfa_diagnosis.json").read_text())
    assert [row["row"] for row in data["rows"]] == ["rfa_causal", "rfa_local"]
    for row in data["rows"]:
        assert [u for u, _ in row["valid_bleu_curve"]] == [2, 4]  # every 2 updates for a fixed 4
        assert row["convergence"]["last_update"] == 4 and not row["convergence"]["stopped_early"]
        share = row["cross_attention_on_current_sentence"]
        assert share["windows"] >= 1 and len(share["per_layer"]) == 2 and 0 < share["uniform"] < 1
        # and of the last checkpoint: every run at the same point of training
        last = row["cross_attention_on_current_sentence_last"]
        assert last["updates"] == 4 and last["checkpoint"].endswith("checkpoint_last.pt")
        assert share["updates"] == row["convergence"]["best_update"]
    text = (out / "rfa_diagnosis.md").read_text()
    assert "of the last checkpoint, at 4 updates for every row, the same point of training" in text
    assert "| valid 2 | valid 4 | best valid | selected at |" in text and "Fixed budget" in text
    assert (out / "rfa_diagnosis_curves.png").stat().st_size > 0
    assert {row["row"]: row["options"] for row in data["rows"]}["rfa_causal"] == [
        "--rfa-causal-proj-dim", "32", "--rfa-attention", "causal"]


def test_the_long_range_diagnosis_trains_the_delta_rule_on_the_long_range_corpus_in_smoke_mode():
    long = EXPERIMENTS["rfa_diagnosis_long"]
    rows = long.rows(EMBEDDED, smoke=True)
    assert [row for row, _ in rows] == ["rfa_delta"]
    system = rows[0][1]
    assert system.config == "configs/context/rfa_sgate_L15.sh" and list(system.overrides) == ["--rfa-update", "delta"]
    assert long.embedded_data == "data-long-range" and long.bleu_budget is not None
    assert long.table is EXPERIMENTS["rfa_diagnosis"].table


def test_a_run_read_from_its_kept_checkpoint_only_is_read_again_from_its_last(tmp_path):
    """A diagnosis run trained before attention.last.json existed is not finished: running the
    experiment again reads its last checkpoint (run_system.sh skips the training and the decoding)."""
    from rfa_doc_mt.reproduce.running import finished

    for name in ("train.done", "test.bleu.json", "attention.json"):
        (tmp_path / name).write_text("{}")
    assert finished(str(tmp_path), ["test"], False)
    assert not finished(str(tmp_path), ["test", "attention"], False)
    (tmp_path / "attention.last.json").write_text("{}")
    assert finished(str(tmp_path), ["test", "attention"], False)
