"""Warm starts (tests/warm_start/): a command run in the server's fork behaves as it does started
cold, a client the server must not stand for runs cold, and a user's command, without this
directory on its PYTHONPATH, always runs cold."""

import os
import subprocess
import sys
import time

import pytest
import sitecustomize
import warm_start_server as warm_start
from conftest import WARM_START_DIR, with_warm_start_hook

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Python's own record of what a process imports (PYTHONPROFILEIMPORTTIME: a line per module on
# standard error): whether fairseq was imported in the command's own process
IMPORT_TIMES = {"PYTHONPROFILEIMPORTTIME": "1"}


def imported_here(stderr: str, module: str = "fairseq") -> bool:
    return any(line.startswith("import time:") and line.rsplit("|", 1)[-1].strip() == module
               for line in stderr.splitlines())


def without_import_times(stderr: str) -> str:
    return "".join(line for line in stderr.splitlines(True) if not line.startswith("import time:"))


@pytest.fixture
def server(warm_start_server):
    path = warm_start_server
    if not path:
        pytest.skip("the warm-start server is off (RFA_DOC_MT_WARM_START=off)")
    for _ in range(600):  # it listens once it has imported torch and fairseq
        if os.path.exists(path):
            return path
        time.sleep(0.1)
    pytest.fail("the warm-start server did not start listening within a minute")


def environment(server, hook=True):
    """The commands' environment: this checkout's package from any directory, with or without the hook."""
    paths = [path for path in os.environ.get("PYTHONPATH", "").split(os.pathsep) if path and path != WARM_START_DIR]
    env = dict(os.environ, RFA_DOC_MT_WARM_START=server, PYTHONPATH=os.pathsep.join([ROOT] + paths))
    return with_warm_start_hook(env) if hook else env


def run(env, *arguments, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", *arguments], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=300)


def test_a_command_behaves_the_same_warm_and_cold(server, tmp_path):
    """Its arguments, working directory, output streams and exit status: the same both ways; warm,
    fairseq is not imported again (its import-time INFO line is not printed)."""
    runs = {}
    for mode in ("warm", "cold"):
        env = dict(environment(server if mode == "warm" else "off"), **IMPORT_TIMES)
        (tmp_path / mode).mkdir()
        runs[mode] = [run(env, "rfa_doc_mt.data.prepare", "synthetic", "--out", "corpus", "--max-distance", "0",
                          cwd=tmp_path / mode),
                      run(env, "rfa_doc_mt.fairseq_command", "fairseq-eval-lm"),
                      run(env, "rfa_doc_mt.scoring.consistency", "--help")]
    for warm, cold in zip(runs["warm"], runs["cold"]):
        assert warm.returncode == cold.returncode and warm.stdout == cold.stdout
        assert without_import_times(warm.stderr) == without_import_times(cold.stderr)
    assert [r.returncode for r in runs["warm"]] == [2, 2, 0]
    assert "--max-distance: must be at least 1" in runs["warm"][0].stderr
    assert imported_here(runs["cold"][1].stderr) and not imported_here(runs["warm"][1].stderr)


def test_a_command_a_script_starts_runs_warm(server):
    """scripts/common.sh's ``fairseq_command`` (train.sh, decode.sh) puts its checkout before the
    session's PYTHONPATH: the hook stays on it, and the command is handed to the server."""
    shell = f'source "{ROOT}/scripts/common.sh"; fairseq_command fairseq-eval-lm'
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, cwd="/", timeout=300,
                          env=dict(with_warm_start_hook(os.environ), RFA_DOC_MT_WARM_START=server, **IMPORT_TIMES))
    assert done.returncode == 2 and "usage: python -m rfa_doc_mt.fairseq_command" in done.stderr
    assert not imported_here(done.stderr)  # fairseq was not imported again


def test_a_users_command_runs_cold_even_with_the_variable_set(server):
    """Without tests/warm_start on its PYTHONPATH (a user's shell), a command never reaches the
    server, whatever RFA_DOC_MT_WARM_START says: the package holds no hand-off."""
    cold = run(dict(environment(server, hook=False), **IMPORT_TIMES), "rfa_doc_mt.fairseq_command",
               "fairseq-eval-lm")
    assert cold.returncode == 2 and imported_here(cold.stderr)  # fairseq imported in its own process
    for root, _, files in os.walk(os.path.join(ROOT, "rfa_doc_mt")):
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(root, name), encoding="utf-8") as handle:
                    text = handle.read()
                assert warm_start.VARIABLE not in text and "warm_start" not in text, name


def test_a_client_that_differs_in_what_the_imports_read_is_refused(server, monkeypatch, capfd):
    arguments, path = ["--help"], [ROOT] + sys.path
    monkeypatch.setenv(warm_start.VARIABLE, server)
    assert warm_start.delegate("rfa_doc_mt.scoring.consistency", arguments, path) == 0
    assert capfd.readouterr().out.startswith("usage: consistency.py")
    # a light tool (it starts without fairseq) runs in a fork too
    assert warm_start.delegate("rfa_doc_mt.scoring.bleu", arguments, path) == 0
    assert capfd.readouterr().out.startswith("usage: bleu.py")
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default" if os.environ.get("ATEN_CPU_CAPABILITY") != "default"
                       else "avx2")
    assert warm_start.delegate("rfa_doc_mt.scoring.consistency", arguments, path) is None  # the caller runs it
    assert capfd.readouterr().out == ""
    monkeypatch.delenv("ATEN_CPU_CAPABILITY")
    monkeypatch.setenv(warm_start.VARIABLE, server + ".nobody")
    assert warm_start.delegate("rfa_doc_mt.scoring.consistency", arguments, path) is None


def test_a_killed_client_takes_down_what_its_command_started(server, tmp_path):
    """A fork leads a process group of its own, which its command's processes join (a
    reproduction's runs): killing the client ends them all, as killing a cold command's process
    group would, and nothing of an interrupted run goes on writing."""
    (tmp_path / "starts_a_child.py").write_text("import subprocess, time\n"
                                                "child = subprocess.Popen(['sleep', '300'])\n"
                                                "print(child.pid, flush=True)\n"
                                                "time.sleep(300)\n")
    code = "import sys, warm_start_server as w; sys.exit(w.delegate('starts_a_child', [], sys.argv[1:]))"
    client = subprocess.Popen([sys.executable, "-c", code, str(tmp_path), ROOT, *sys.path], stdout=subprocess.PIPE,
                              text=True, env=dict(with_warm_start_hook(os.environ), RFA_DOC_MT_WARM_START=server))
    child = int(client.stdout.readline())  # printed by the fork's command: the server took it
    try:
        client.kill()
        client.wait(timeout=60)
        for _ in range(100):
            if not alive(child):
                break
            time.sleep(0.1)
        assert not alive(child), "the command's child outlived its killed client"
    finally:
        if alive(child):
            os.kill(child, 9)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, killed and not yet reaped by whoever adopted it, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("command, argv, expected", [
    (["python", "-m", "rfa_doc_mt.data.prepare", "synthetic", "--out", "x"], ["-m", "synthetic", "--out", "x"],
     ("rfa_doc_mt.data.prepare", ["synthetic", "--out", "x"])),
    (["python", "-u", "-W", "ignore", "-m", "rfa_doc_mt.bench.decode_speed", "-m", "run"], ["-m", "-m", "run"],
     ("rfa_doc_mt.bench.decode_speed", ["-m", "run"])),
    (["python", "-mrfa_doc_mt.scoring.consistency", "--help"], ["-m", "--help"],
     ("rfa_doc_mt.scoring.consistency", ["--help"])),
    (["python", "-c", "pass", "-m", "rfa_doc_mt.data.prepare"], ["-c", "-m", "rfa_doc_mt.data.prepare"], None),
    (["python", "script.py", "-m", "rfa_doc_mt.data.prepare"], ["script.py", "-m", "rfa_doc_mt.data.prepare"], None),
])
def test_the_hook_finds_the_module_a_command_runs(monkeypatch, command, argv, expected):
    """``python [options] -m MODULE ARGS``, from sys.argv as Python sets it at start-up
    (``["-m", ARGS]`` while the module is not found yet) and the command line as given."""
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setattr(sys, "orig_argv", command)
    assert sitecustomize.started_module() == expected
