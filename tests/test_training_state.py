"""Where a training run stands (rfa_doc_mt.training_state): what train.sh and the reproduction's
runner read before they start fairseq-train again. Run folders are written by the tests; the
real fairseq-train runs under a raised cap are in test_validation_metrics.py."""

import os

from rfa_doc_mt.fairseq_command import option_value, without_option
from rfa_doc_mt.reproduce.convergence import run_convergence
from rfa_doc_mt.reproduce.papers import Convergence, System
from rfa_doc_mt.reproduce.running import finished
from rfa_doc_mt.training_state import EARLY_STOP, STARTED, ended_on_patience, trains_further, why_finished

START = f"2026-01-01 00:00:00 | INFO {STARTED}'_name': None, 'common': {{}}}}"
STOP = f"2026-01-01 00:00:00 | INFO | rfa_doc_mt.tasks.doc_translation | {EARLY_STOP} for last 5 runs"
VALID = "2026-01-01 00:00:00 | INFO | valid | epoch 001 | valid on 'valid' subset | bleu {} | num_updates {}"
SETTINGS = ["--arch", "x", "--max-update", "6000", "--patience", "5"]


def run_folder(path, log_lines, settings=SETTINGS, checkpoint=True):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "train.log"), "w") as handle:
        handle.write("\n".join(log_lines) + "\n")
    with open(os.path.join(path, "train.done"), "w") as handle:
        handle.write("\n".join(settings) + "\n")
    if checkpoint:
        open(os.path.join(path, "checkpoint_last.pt"), "w").close()  # only its presence is read
    return str(path)


def raised(settings, cap):
    return without_option(settings, "--max-update") + ["--max-update", str(cap)]


def test_the_last_start_of_a_run_says_whether_it_stopped_on_its_patience(tmp_path):
    def log(*lines):
        return run_folder(tmp_path / str(len(os.listdir(tmp_path))), list(lines))

    assert ended_on_patience(os.path.join(log(START, STOP), "train.log"))
    assert not ended_on_patience(os.path.join(log(START), "train.log"))  # stopped at its cap
    # stopped on a shorter patience, then resumed under a longer one: it ended where the last start did
    assert not ended_on_patience(os.path.join(log(START, STOP, START), "train.log"))
    assert ended_on_patience(os.path.join(log(START, STOP, START, STOP), "train.log"))
    assert not ended_on_patience(str(tmp_path / "none" / "train.log"))


def test_options_are_read_as_argparse_reads_them():
    arguments = ["--max-update", "10", "--lr", "1", "--max-update=20"]
    assert option_value(arguments, "--max-update") == "20"  # the last one
    assert option_value(arguments, "--patience", "0") == "0"
    assert without_option(arguments, "--max-update") == ["--lr", "1"]


def test_a_raised_cap_trains_on_a_run_that_stopped_at_its_cap_only(tmp_path):
    capped = run_folder(tmp_path / "capped", [START, VALID.format(99.1, 6000)])
    patient = run_folder(tmp_path / "patient", [START, VALID.format(98.0, 3600), STOP])
    # restored from an archive: no checkpoints
    bare = run_folder(tmp_path / "bare", [START, VALID.format(99.1, 6000)], checkpoint=False)
    higher = ["--max-update", "8000"]
    assert trains_further(capped, higher) and not trains_further(capped, ["--max-update", "6000"])
    assert not trains_further(capped, [])  # no cap asked for: as it finished
    assert not trains_further(patient, higher)
    assert not trains_further(bare, higher)
    assert not trains_further(str(tmp_path / "unstarted"), higher)
    # the runner: a finished run with what it evaluates is skipped unless the raised cap trains it on
    for folder in (capped, patient):
        open(os.path.join(folder, "test.bleu.json"), "w").close()
    assert not finished(capped, ["test"], False, higher) and finished(capped, ["test"], False, ["--max-update", "6000"])
    assert finished(patient, ["test"], False, higher)

    # train.sh: the same settings, or a run out of patience under a raised cap, are finished
    assert "these settings" in why_finished(patient, SETTINGS)
    assert "patience" in why_finished(patient, raised(SETTINGS, 8000))
    # another setting changed (a longer patience): it trains on
    longer = without_option(raised(SETTINGS, 8000), "--patience") + ["--patience", "10"]
    assert why_finished(str(tmp_path / "unstarted"), SETTINGS) == ""
    os.remove(os.path.join(patient, "checkpoint_last.pt"))  # not a real checkpoint: nothing to read
    assert why_finished(patient, longer) == ""
    os.remove(os.path.join(capped, "checkpoint_last.pt"))
    assert why_finished(capped, raised(SETTINGS, 8000)) == ""


def test_a_row_flags_the_cap_the_run_itself_trained_under(tmp_path):
    """A run stopped at 6000 by the cap it trained under is flagged under a budget whose cap is now
    higher (it has not been trained on yet), and one trained on to 8000 is judged by that cap."""
    system = System("x", "configs/demo/transformer_L4.sh")
    budget = Convergence(interval=200, patience=5, cap=8000, min_gain=0.2)
    capped = run_folder(tmp_path / "capped", [START, VALID.format(98.2, 5800), VALID.format(99.1, 6000)])
    assert run_convergence(capped, system, budget)["reached_cap"]
    on = run_folder(tmp_path / "on", [START, VALID.format(99.1, 6000), START, VALID.format(99.2, 6200)],
                    settings=raised(SETTINGS, 8000))
    assert not run_convergence(on, system, budget)["reached_cap"]
