"""Keeping finished runs (rfa_doc_mt/reproduce/keep.py) and pausing the other runs while one is
timed alone (running.pause): no training here, folders of small files and sleeping processes."""

import json
import os
import subprocess
import sys
import time

import pytest

from rfa_doc_mt.data.io import DataError
from rfa_doc_mt.reproduce import System
from rfa_doc_mt.reproduce.keep import corpus_fingerprint, keep_run, kept_runs, restore_runs
from rfa_doc_mt.reproduce.running import ALONE, decode_alone, descendants, pause, resume


def corpus(folder, command="prepare --out X", reference="a b\nc d\n"):
    folder.mkdir(parents=True)
    (folder / "prep.json").write_text(json.dumps({"corpus": "synthetic", "seed": 1, "command": command}))
    (folder / "test.ref.tgt").write_text(reference)
    (folder / "consistency").mkdir()
    (folder / "consistency" / "anaphora.json").write_text('{"examples": []}')
    return str(folder)


def finished_run(folder):
    folder.mkdir(parents=True)
    (folder / "train.done").write_text("")
    (folder / "train.log").write_text("num_updates=200\n")
    (folder / "test.hyp").write_text("a b\nc e\n")
    (folder / "checkpoint_best.pt").write_bytes(b"\0" * 1000)
    (folder / "checkpoint_last.pt").write_bytes(b"\0" * 1000)
    (folder / ".test.bleu.json.x.tmp").write_text("half written")
    (folder / ALONE).mkdir()
    (folder / ALONE / "test.decode.json").write_text('{"seconds": 2.0}')
    return folder


def files_of(folder):
    return {os.path.relpath(os.path.join(d, n), folder): open(os.path.join(d, n), "rb").read()
            for d, _, names in os.walk(folder) for n in names}


def test_a_kept_run_comes_back_whole_without_its_checkpoints(tmp_path):
    data = corpus(tmp_path / "data")
    run = finished_run(tmp_path / "runs" / "run-a")
    keep = str(tmp_path / "keep")
    assert keep_run(str(run), keep, "run-a", data)
    assert not keep_run(str(run), keep, "run-a", data)  # the same files: the same archive, not rewritten
    assert kept_runs(keep) == ["run-a"]
    # another machine: the corpus generated again elsewhere (its command names another folder)
    other = corpus(tmp_path / "elsewhere" / "data", command="prepare --out Y")
    assert corpus_fingerprint(other) == corpus_fingerprint(data)
    runs = tmp_path / "elsewhere" / "runs"
    assert restore_runs(keep, str(runs), other, log=lambda message: None) == ["run-a"]
    expected = {name: content for name, content in files_of(run).items()
                if not name.endswith((".pt", ".tmp"))}
    assert files_of(runs / "run-a") == expected and "train.done" in expected
    assert restore_runs(keep, str(runs), other) == []  # finished here now: nothing to restore
    # a changed file is written anew
    (run / "test.hyp").write_text("a b\nc d\n")
    assert keep_run(str(run), keep, "run-a", data)


def test_an_older_copy_of_a_run_never_replaces_its_newer_archive(tmp_path):
    data = corpus(tmp_path / "data")
    run = finished_run(tmp_path / "runs" / "run-a")
    keep = str(tmp_path / "keep")
    assert keep_run(str(run), keep, "run-a", data)
    assert ".kept" not in files_of(tmp_path / "keep")  # the record stays in the folder, out of the archive
    # a copy restored elsewhere, then the run redone here (its decoding timed again) and kept anew
    copy = tmp_path / "tables"
    restore_runs(keep, str(copy), data, log=lambda message: None)
    (run / ALONE / "test.decode.json").write_text('{"seconds": 1.5}')
    assert keep_run(str(run), keep, "run-a", data, log=lambda message: None)
    newer = open(os.path.join(keep, "run-a.tar.xz"), "rb").read()
    # the copy, restored before that, must not put its older files back
    messages = []
    assert not keep_run(str(copy / "run-a"), keep, "run-a", data, log=messages.append)
    assert open(os.path.join(keep, "run-a.tar.xz"), "rb").read() == newer and "not kept" in messages[0]
    # restored anew, the copy is the archive's: what is redone there is kept
    (copy / "run-a.replaced").mkdir()
    os.replace(copy / "run-a", copy / "run-a.replaced" / "run-a")
    restore_runs(keep, str(copy), data, log=lambda message: None)
    (copy / "run-a" / "test.hyp").write_text("a b\nc f\n")
    assert keep_run(str(copy / "run-a"), keep, "run-a", data)
    assert not keep_run(str(copy / "run-a"), keep, "run-a", data)  # the same files: not rewritten
    # a folder with no record of the archive (kept before records, or copied by hand) does not overwrite it
    os.remove(run / ".kept")
    assert not keep_run(str(run), keep, "run-a", data, log=messages.append)
    assert "no record" in messages[-1] and "delete the archive" in messages[-1]


def test_an_unfinished_run_is_neither_kept_nor_lost(tmp_path):
    data = corpus(tmp_path / "data")
    run = finished_run(tmp_path / "runs" / "run-a")
    (run / "train.done").unlink()
    with pytest.raises(DataError, match="not finished"):
        keep_run(str(run), str(tmp_path / "keep"), "run-a", data)
    (run / "train.done").write_text("")
    keep_run(str(run), str(tmp_path / "keep"), "run-a", data)
    # here an interrupted training of the same run: moved aside, the kept one restored
    runs = tmp_path / "here"
    interrupted = runs / "run-a"
    interrupted.mkdir(parents=True)
    (interrupted / "checkpoint_last.pt").write_bytes(b"1")
    messages = []
    assert restore_runs(str(tmp_path / "keep"), str(runs), data, log=messages.append) == ["run-a"]
    aside = [name for name in os.listdir(runs) if name.startswith("run-a.replaced-")]
    assert len(aside) == 1 and (runs / aside[0] / "checkpoint_last.pt").read_bytes() == b"1"
    assert (runs / "run-a" / "train.done").is_file() and "moved to" in messages[0]


def test_a_run_kept_from_another_corpus_is_refused(tmp_path):
    data = corpus(tmp_path / "data")
    keep_run(str(finished_run(tmp_path / "runs" / "run-a")), str(tmp_path / "keep"), "run-a", data)
    other = corpus(tmp_path / "other", reference="a b\nc x\n")
    with pytest.raises(DataError, match="another corpus"):
        restore_runs(str(tmp_path / "keep"), str(tmp_path / "fresh"), other)
    assert not (tmp_path / "fresh").exists()


def test_decoding_speed_of_a_restored_run_is_not_timed_again(tmp_path):
    """A finished run without its checkpoint keeps what it has; an unfinished one is an error."""
    run = finished_run(tmp_path / "runs" / "run-a")
    for name in ("checkpoint_best.pt", "checkpoint_last.pt"):
        (run / name).unlink()
    system = System("a", "configs/context/transformer_L15.sh", name="run-a")
    decode_alone([system], str(tmp_path / "data"), str(tmp_path / "runs"))  # decodes nothing: no checkpoint
    (run / ALONE / "test.decode.json").unlink()
    decode_alone([system], str(tmp_path / "data"), str(tmp_path / "runs"))  # nor here: its own decoding stands
    assert not (run / ALONE / "test.decode.json").exists()
    (run / "train.done").unlink()
    with pytest.raises(DataError, match="no checkpoint_best.pt"):
        decode_alone([system], str(tmp_path / "data"), str(tmp_path / "runs"))


def state(pid):
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().rsplit(")", 1)[1].split()[0]


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
def test_pause_stops_a_run_and_what_it_started(tmp_path):
    # a run's shape: a shell that started a python that computes
    busy = f"{sys.executable} -c 'while True: pass'"
    process = subprocess.Popen(["bash", "-c", f"{busy} & wait"])
    try:
        for _ in range(100):
            below = descendants(process.pid)
            if below:
                break
            time.sleep(0.05)
        assert len(below) == 1
        stopped = pause([process])
        assert sorted(stopped) == sorted([process.pid] + below)
        for _ in range(100):  # a signal is delivered when the process next runs
            if {state(pid) for pid in stopped} == {"T"}:
                break
            time.sleep(0.02)
        assert {state(pid) for pid in stopped} == {"T"}
        time.sleep(0.3)
        assert state(below[0]) == "T"  # and stays so
        resume(stopped)
        time.sleep(0.2)
        assert state(below[0]) in "RS"
    finally:
        for pid in descendants(process.pid):
            os.kill(pid, 9)
        process.kill()
        process.wait()


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
def test_a_sigterm_while_runs_are_paused_leaves_none_stopped(tmp_path):
    """The orchestrator ended (SIGTERM) while it times a run alone: the runs it paused go on, to
    receive their own signals, instead of staying stopped for ever."""
    script = tmp_path / "orchestrator.py"
    script.write_text(
        "import os, signal, subprocess, sys, time\n"
        "from rfa_doc_mt.reproduce.running import paused\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time\\nwhile True: time.sleep(0.01)'],\n"
        "                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "print(child.pid, flush=True)\n"
        "with paused([child]):\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(5)\n"
        "print('not ended', flush=True)\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    child = int(done.stdout.split()[0])
    try:
        assert done.returncode == 128 + 15 and "not ended" not in done.stdout
        time.sleep(0.2)
        assert state(child) in "RS"
    finally:
        os.kill(child, 9)
