"""Warm starts (rfa_doc_mt/warm_start.py): a command run in the server's fork behaves as it does
started cold, and a client the server must not stand for runs cold."""

import os
import subprocess
import sys
import time

import pytest

from rfa_doc_mt import warm_start

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def server(warm_start_server):
    path = os.environ.get(warm_start.VARIABLE)
    if not path:
        pytest.skip("the warm-start server is off (RFA_DOC_MT_WARM_START=off)")
    for _ in range(600):  # it listens once it has imported torch and fairseq
        if os.path.exists(path):
            return path
        time.sleep(0.1)
    pytest.fail("the warm-start server did not start listening within a minute")


def run(env, *arguments, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", *arguments], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=300)


def test_a_command_behaves_the_same_warm_and_cold(server, tmp_path):
    """Its arguments, working directory, output streams and exit status: the same both ways; warm,
    fairseq is not imported again (its import-time INFO line is not printed)."""
    runs = {}
    for mode in ("warm", "cold"):
        env = dict(os.environ, RFA_DOC_MT_WARM_START=server if mode == "warm" else "off")
        (tmp_path / mode).mkdir()
        runs[mode] = [run(env, "rfa_doc_mt.data.prepare", "synthetic", "--out", "corpus", "--max-distance", "0",
                          cwd=tmp_path / mode),
                      run(env, "rfa_doc_mt.fairseq_command", "fairseq-preprocess"),
                      run(env, "rfa_doc_mt.scoring.consistency", "--help")]
    for warm, cold in zip(runs["warm"], runs["cold"]):
        assert warm.returncode == cold.returncode and warm.stdout == cold.stdout
        assert warm.stderr == cold.stderr.replace(
            "INFO:fairseq.tasks.text_to_speech:Please install tensorboardX: pip install tensorboardX\n", "")
    assert [r.returncode for r in runs["warm"]] == [2, 2, 0]
    assert "--max-distance: must be at least 1" in runs["warm"][0].stderr
    assert "tensorboardX" not in runs["warm"][1].stderr


def test_a_client_that_differs_in_what_the_imports_read_is_refused(server, monkeypatch, capfd):
    monkeypatch.setattr(sys, "argv", ["rfa_doc_mt.scoring.consistency", "--help"])
    monkeypatch.setenv(warm_start.VARIABLE, server)
    assert warm_start.delegate("rfa_doc_mt.scoring.consistency") == 0
    assert capfd.readouterr().out.startswith("usage: consistency.py")
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default" if os.environ.get("ATEN_CPU_CAPABILITY") != "default"
                       else "avx2")
    assert warm_start.delegate("rfa_doc_mt.scoring.consistency") is None  # the caller then runs it itself
    assert capfd.readouterr().out == ""
    monkeypatch.setenv(warm_start.VARIABLE, server + ".nobody")
    assert warm_start.delegate("rfa_doc_mt.scoring.consistency") is None
