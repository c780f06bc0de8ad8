"""Warm starts for the test suite: one process imports torch, fairseq and the plugin once, then
runs each ``python -m rfa_doc_mt.MODULE ...`` that a test starts while it listens in a fork of
itself.

    PYTHONPATH=tests/warm_start python -m warm_start_server SOCKET     # listen until stopped
    PYTHONPATH=tests/warm_start RFA_DOC_MT_WARM_START=SOCKET python -m rfa_doc_mt.fairseq_command ...

Test machinery only: nothing of it is in the package. Every run of a command of this package that
imports fairseq (training, decoding, consistency scoring, preparation, the benchmarks) spends
3-5 s of CPU importing torch and fairseq before it does anything; the test suite starts hundreds
of them (tests/conftest.py starts a server for the session and puts this directory first on the
``PYTHONPATH`` of the commands it starts). There, at interpreter start-up, ``sitecustomize.py``
hands the command line, working directory, environment, ``sys.path`` (as ``python -m`` will
set it) and its standard input, output and error (the file descriptors themselves) to the
server (:func:`delegate`), which forks; the fork runs the module as ``python -m`` would
(:func:`runpy.run_module`) and reports its exit status, which the client exits with. Output
goes where the command's own would; a client that is killed takes its fork down with it.

The fork is the same program with the same options: what differs is only what was imported
before ``main`` ran. It refuses (and the client then runs the command itself, as without the
variable) when the client's interpreter, the ``rfa_doc_mt`` it would import or fairseq are other
files than the server's, when it sets variables that the server's imports have already read
(``ATEN_CPU_CAPABILITY``, ``MKL_NUM_THREADS``, ``PYTHONHASHSEED``, ...) to other values.
``OMP_NUM_THREADS`` and ``PYTHONWARNINGS`` are applied in the fork. Without the variable, or
with no server listening, nothing changes. The package's ``LIGHT_TOOLS`` run in forks too: they
import no fairseq, but the reproduction's driver imports numpy, sacrebleu and matplotlib (3-5 s
of CPU cold). Each fork leads a process group of its own, which holds what its command starts
(a reproduction's runs, with their clients): a client that goes away takes the whole group down,
as killing the client's own group would end a cold command and everything it started.
"""

import gc
import importlib.util
import json
import os
import runpy
import signal
import socket
import struct
import sys
import threading
import time
import traceback
import warnings
from typing import List, Optional

VARIABLE = "RFA_DOC_MT_WARM_START"
# read once, when torch or numpy load: a client must agree with the server on them
FIXED_AT_IMPORT = ("ATEN_CPU_CAPABILITY", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "PYTHONHASHSEED",
                   "KMP_AFFINITY", "GOMP_CPU_AFFINITY", "CUDA_VISIBLE_DEVICES", "TORCH_LOGS")
# what the server imports before it listens; torch._dynamo: torch imports it (2-3 s) when the first
# optimizer is built, in every training run
PRELOADED = ("rfa_doc_mt", "fairseq_cli.train", "fairseq_cli.generate", "fairseq_cli.validate",
             "rfa_doc_mt.fairseq_command", "rfa_doc_mt.scoring.consistency", "rfa_doc_mt.generation.translate",
             "rfa_doc_mt.data.prepare", "torch._dynamo")
REFUSED = -1000  # the status a server sends for a run it will not do
# where the server appends a line for each run (module, arguments, wall and CPU seconds): where the
# suite's time goes (RFA_DOC_MT_WARM_START_LOG=FILE make test)
RUN_LOG = os.environ.get("RFA_DOC_MT_WARM_START_LOG")


def _origin(name: str, path: List[str]) -> Optional[str]:
    """The file ``import name`` (a top-level package) would load with ``sys.path`` = ``path``,
    found without importing it."""
    saved = sys.path[:]
    sys.path[:] = path
    try:
        spec = importlib.util.find_spec(name)
    finally:
        sys.path[:] = saved
    return os.path.realpath(spec.origin) if spec and spec.origin else None


def _identity(environment, path: List[str]) -> dict:
    """What must be the same in a client and the server for a fork to stand for the client."""
    return {"executable": os.path.realpath(sys.executable),
            "package": _origin("rfa_doc_mt", path),
            "fairseq": _origin("fairseq", path),
            "fixed": {name: environment.get(name) for name in FIXED_AT_IMPORT}}


# ---------------------------------------------------------------------------------------
# the client: sitecustomize.py, at the start-up of a command when the variable is set


def _send(connection: socket.socket, payload: dict) -> None:
    data = json.dumps(payload).encode("utf-8")
    socket.send_fds(connection, [struct.pack("!Q", len(data))], [0, 1, 2])
    connection.sendall(data)


def delegate(module: str, arguments: List[str], path: List[str]) -> Optional[int]:
    """Run ``python -m module arguments`` in the server's fork, with ``sys.path`` = ``path`` (as
    ``python -m`` sets it); its exit status, or None when no server took it (then the caller runs
    the command itself)."""
    socket_path = os.environ.get(VARIABLE)
    if not socket_path:
        return None
    try:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.connect(socket_path)
    except OSError:
        return None
    with connection:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        _send(connection, {"module": module, "argv": list(arguments), "cwd": os.getcwd(), "env": dict(os.environ),
                           "path": list(path), "identity": _identity(os.environ, path)})
        reply = b""
        while len(reply) < 4:
            chunk = connection.recv(4 - len(reply))
            if not chunk:
                return None if not reply else 1  # the server went away before the fork answered
            reply += chunk
    status = struct.unpack("!i", reply)[0]
    return None if status == REFUSED else status


# ---------------------------------------------------------------------------------------
# the server and its forks


def _receive(connection: socket.socket) -> dict:
    header, fds, _, _ = socket.recv_fds(connection, 8, 3)
    if len(header) != 8 or len(fds) != 3:
        raise ConnectionError("a warm-start client sent no request")
    size = struct.unpack("!Q", header)[0]
    data = b""
    while len(data) < size:
        chunk = connection.recv(min(1 << 20, size - len(data)))
        if not chunk:
            raise ConnectionError("a warm-start client went away")
        data += chunk
    request = json.loads(data)
    request["fds"] = fds
    return request


def _watch(connection: socket.socket) -> None:
    """End this fork and what its command started (its process group) when its client goes away
    (killed, or stopped by a timeout)."""
    try:
        while connection.recv(1):
            pass
    except OSError:
        pass
    os.killpg(os.getpid(), signal.SIGKILL)


def _apply_warnings(options: str, defaults: List) -> None:
    warnings.filters[:] = list(defaults)
    for option in filter(None, options.split(",")):
        try:
            warnings._setoption(option)  # what Python does with PYTHONWARNINGS at start-up
        except warnings._OptionError as error:
            print(f"Invalid -W option ignored: {error}", file=sys.stderr)


def _log_run(request: dict, started: float, status: int) -> None:
    times = os.times()
    line = {"module": request["module"], "argv": request["argv"][:6], "cwd": request["cwd"],
            "wall": round(time.monotonic() - started, 2), "cpu": round(times.user + times.system, 2),
            "children_cpu": round(times.children_user + times.children_system, 2), "status": status}
    with open(RUN_LOG, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\n")


def _run_fork(connection: socket.socket, identity: dict, warning_defaults: List) -> int:
    request = _receive(connection)
    started = time.monotonic()
    status = _run_request(request, connection, identity, warning_defaults)
    if RUN_LOG and status != REFUSED:
        _log_run(request, started, status)
    return status


def _run_request(request: dict, connection: socket.socket, identity: dict, warning_defaults: List) -> int:
    for target, fd in enumerate(request["fds"]):
        os.dup2(fd, target)
        os.close(fd)
    import rfa_doc_mt

    if request["identity"] != identity:
        return REFUSED
    threading.Thread(target=_watch, args=(connection,), daemon=True).start()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[:] = request["path"]
    _apply_warnings(request["env"].get("PYTHONWARNINGS", ""), warning_defaults)
    unbuffered = bool(request["env"].get("PYTHONUNBUFFERED"))
    sys.stdout.reconfigure(line_buffering=os.isatty(1), write_through=unbuffered)
    sys.stderr.reconfigure(line_buffering=True)
    threads = request["env"].get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        import torch

        torch.set_num_threads(int(threads))
    rfa_doc_mt.quiet_fairseq_for(request["module"])  # what the package's __init__ does for a command
    sys.argv = [request["module"], *request["argv"]]
    sys.modules.pop(request["module"], None)  # preloaded: run as __main__, as `python -m` does
    try:
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        status = 0
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            status = stop.code or 0
        else:
            print(stop.code, file=sys.stderr)
            status = 1
    except BaseException:  # noqa: BLE001  (as Python does: the traceback, then status 1)
        traceback.print_exc()
        status = 1
    return status


def _end_children() -> None:
    """End the processes the run started and left running, as its interpreter's exit would: data
    loader workers (fairseq-generate's --num-workers) otherwise outlive ``os._exit`` until their
    watchdog notices (up to 5 s), holding the client's output pipe open until then."""
    import multiprocessing

    children = multiprocessing.active_children()
    for child in children:
        child.terminate()
    for child in children:
        child.join(timeout=5)


def serve(path: str) -> None:
    for module in PRELOADED:
        importlib.import_module(module)
    identity = _identity(os.environ, sys.path)
    warning_defaults = list(warnings.filters)
    gc.freeze()  # what is imported now stays: forks neither scan nor copy it when they collect
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.exists(path):
        os.remove(path)
    listener.bind(path + ".binding")
    listener.listen(64)
    os.rename(path + ".binding", path)  # clients find it once it listens
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # forks are reaped as they end
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while True:
            connection, _ = listener.accept()
            if os.fork() == 0:
                os.setpgid(0, 0)  # the group _watch ends with the client
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                listener.close()
                status = 1
                try:
                    status = _run_fork(connection, identity, warning_defaults)
                except BaseException:  # noqa: BLE001
                    traceback.print_exc()
                finally:
                    try:
                        _end_children()
                    except BaseException:  # noqa: BLE001
                        traceback.print_exc()
                    for stream in (sys.stdout, sys.stderr):
                        try:
                            stream.flush()
                        except (OSError, ValueError):
                            pass
                    try:
                        connection.sendall(struct.pack("!i", status))
                    except OSError:
                        pass
                    os._exit(status & 0xFF if status != REFUSED else 0)
            connection.close()
    finally:
        listener.close()
        if os.path.exists(path):
            os.remove(path)


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print("usage: python -m warm_start_server SOCKET\n" + __doc__.split("\n\n")[0],
              file=sys.stdout if sys.argv[1:] in (["-h"], ["--help"]) else sys.stderr)
        sys.exit(0 if sys.argv[1:] in (["-h"], ["--help"]) else 2)
    serve(sys.argv[1])
