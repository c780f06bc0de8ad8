"""What a reproduction took, read back from its runs' logs (rfa_doc_mt.reproduce.taken)."""

import json

import pytest

from rfa_doc_mt.reproduce.taken import main, run_taken, training_segments


def fairseq_line(when: str, text: str) -> str:
    return f"2026-11-28 {when} | INFO | {text}"


def start(when: str) -> list:
    return [fairseq_line(when, "fairseq.utils | --user-dir=/x/rfa_doc_mt has already been imported."),
            fairseq_line(when, "fairseq_cli.train | {'_name': None, 'common': {}}"),
            "  a continuation line without a time"]


def write_run(folder, train_lines, decoded=("10.5", "7.5")):
    folder.mkdir()
    (folder / "train.log").write_text("\n".join(train_lines) + "\n")
    if decoded:
        (folder / "decoded-alone").mkdir()
        for name, seconds in zip(("test.generate.err", "decoded-alone/test.generate.err"), decoded):
            (folder / name).write_text(
                "INFO:fairseq_cli.generate:Translated 466 sentences (2,981 tokens) in "
                f"{seconds}s (62.1 sentences/s, 397.5 tokens/s)\n")
    return str(folder)


def interrupted_run():
    # trained 23:00-23:10 (to 1030 updates), interrupted, resumed 23:20 from 1000, done 23:50
    return (start("23:00:00")
            + [fairseq_line("23:05:00", "train_inner | epoch 001:  100 / 215 num_updates=500"),
               fairseq_line("23:10:00", "train_inner | epoch 002:  30 / 215 num_updates=1030")]
            + start("23:20:00")
            + [fairseq_line("23:20:01", "fairseq.trainer | Loaded checkpoint (epoch 2 @ 1000 updates)"),
               fairseq_line("23:50:00", "train | epoch 010 | loss 1.3 | num_updates 3000 | lr 0.0005")])


def test_each_start_is_a_segment_and_the_time_between_them_is_not_counted(tmp_path):
    run = run_taken(write_run(tmp_path / "context-transformer_L8", interrupted_run()))
    assert run["starts"] == 2 and run["updates"] == 3000
    assert run["train_seconds"] == 10 * 60 + 30 * 60  # not the 50 minutes from first to last line
    # evaluation: the test split decoded after training (10.5 s), then alone (7.5 s)
    assert run["evaluation_seconds"] == pytest.approx(10.5 + 7.5)
    assert run["seconds"] == pytest.approx(run["train_seconds"] + run["evaluation_seconds"])


def test_a_start_whose_lines_span_seconds_opens_one_segment_only():
    lines = ([fairseq_line("10:00:00", "fairseq.utils | --user-dir=/x has already been imported."),
              fairseq_line("10:00:02", "fairseq_cli.train | {'_name': None}"),
              fairseq_line("10:30:00", "train | num_updates 1000")])
    segments = training_segments(lines)
    assert len(segments) == 1 and (segments[0][1] - segments[0][0]).total_seconds() == 1800


def test_a_run_decoded_once_has_no_evaluation_time_yet(tmp_path):
    folder = write_run(tmp_path / "run", interrupted_run())
    (tmp_path / "run" / "decoded-alone" / "test.generate.err").unlink()
    assert run_taken(folder)["evaluation_seconds"] is None


def test_a_run_not_evaluated_yet_counts_its_training_only(tmp_path, capsys):
    folder = write_run(tmp_path / "context-lsh_L15", interrupted_run(), decoded=None)
    assert run_taken(folder)["evaluation_seconds"] is None
    assert main([folder, "--slots", "2", "--json", str(tmp_path / "taken.json")]) == 0
    out = capsys.readouterr().out
    written = json.loads((tmp_path / "taken.json").read_text())
    assert written["slots"] == 2 and [run["updates"] for run in written["runs"]] == [3000]
    # 40 minutes for 3000 updates; the log's intervals carry no train_wall: no step time
    assert "| context-lsh_L15 | 2 | 3000 | 40.0 | — | 40.0 | 13.3 | — |" in out
    assert "0.7 hours of one run slot" in out and "0.3 hours of 2 slots" in out and "1 without" in out


def test_a_folder_without_a_training_log_is_refused(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main([str(tmp_path / "empty")]) == 2
    assert "no train.log" in capsys.readouterr().err


def test_the_step_time_is_the_median_training_step_and_leaves_the_validations_out(tmp_path, capsys):
    # 50 updates a log interval, 45 s and 60 s inside the training steps; the 10-minute gap before
    # 150 is a validation: the hour-long training time counts it, the step time does not
    lines = start("10:00:00") + [
        fairseq_line(when, f"train_inner | epoch 001:  {n} / 400 loss=5.2, ups=1.1, num_updates={n}, "
                           f"train_wall={wall}, wall=0")
        for when, n, wall in (("10:00:45", 50, 45), ("10:01:45", 100, 60), ("10:12:30", 150, 45))] + [
        fairseq_line("11:00:00", "train | epoch 001 | loss 5.0 | num_updates 200")]
    folder = write_run(tmp_path / "bible-transformer_L4", lines, decoded=None)
    assert run_taken(folder)["step_seconds"] == pytest.approx(45 / 50)
    assert main([folder]) == 0
    assert "| bible-transformer_L4 | 1 | 200 | 60.0 | — | 60.0 | 300.0 | 0.90 |" in capsys.readouterr().out
