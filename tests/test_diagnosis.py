"""The diagnosis of RFA's slow learning end to end in smoke mode (not part of `all`): its smoke rows
trained a fixed budget validated on s-BLEU, their curves and where their cross attention looks.
A folder of its own (its corpora generated there), so that it runs beside the smoke reproduction
of tests/test_reproduce.py, not after it."""

import json
import os
import subprocess

import pytest

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_diagnosis_trains_a_fixed_budget_validated_on_bleu_and_reads_the_cross_attention(tmp_path):
    out = tmp_path / "reproduce"
    for name, rows in (("rfa_diagnosis", ["rfa_causal", "rfa_local"]), ("rfa_diagnosis_long", ["rfa_delta"])):
        completed = subprocess.run(["bash", os.path.join(ROOT, "scripts", f"reproduce_{name}.sh"), "--smoke",
                                    "--out", str(out), "--jobs", "2"], capture_output=True, text=True, timeout=3000)
        assert completed.returncode == 0, completed.stderr[-3000:]
        data = json.loads((out / f"{name}.json").read_text())
        assert [row["row"] for row in data["rows"]] == rows
        for row in data["rows"]:
            assert [u for u, _ in row["valid_bleu_curve"]] == [2, 4]  # every 2 updates for a fixed 4
            assert row["convergence"]["last_update"] == 4 and not row["convergence"]["stopped_early"]
            share = row["cross_attention_on_current_sentence"]
            assert share["windows"] >= 1 and len(share["per_layer"]) == 2 and 0 < share["uniform"] < 1
        text = (out / f"{name}.md").read_text()
        assert "| valid 2 | valid 4 | best valid | selected at |" in text and "Fixed budget" in text
        assert (out / f"{name}_curves.png").stat().st_size > 0
    options = {row["row"]: row["options"] for row in data["rows"]}
    assert options == {"rfa_delta": ["--rfa-update", "delta"]}
