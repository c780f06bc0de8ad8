"""Fixtures and helpers shared by the tests.

Numerical comparisons
---------------------
Two fp32 computations of one quantity that differ only in the order of their operations (the
reference, training and incremental forms of an attention; a batch against its rows; a full
pass against token-by-token decoding) do not agree bit for bit, and how far apart they land
depends on the CPU's kernels (AVX-512, AVX2 and torch's generic kernels sum in different
orders). The tolerance therefore follows from the arithmetic, never from what one machine printed:

* a sum (or dot product) of n fp32 terms lies within γ_n·Σ|terms| of the exact sum, with
  γ_n = n·u/(1 - n·u) and u = 2⁻²⁴ the unit roundoff (Higham, *Accuracy and Stability of
  Numerical Algorithms*, 2nd ed., §3.1); to first order the errors of a chain of sums add, so
  n is the total number of terms accumulated along the path from the inputs to the compared
  value (stated in each test);
* two such computations lie within 2·γ_n ≈ n·eps of each other, relative to the size of
  the terms, eps = 2⁻²³ = :data:`FP32_EPS`;
* the size of the terms is taken as the largest magnitude compared (``magnitude``), or
  given by the test when the terms are larger than their sum (cancellation, e.g. the
  random-feature normaliser).

``fp32_tolerance(terms, magnitude)`` is that bound; ``assert_fp32_close`` applies it and prints
the measured difference beside it (``pytest -s``). Outputs of different orders of operations
at positions nothing reads (padding) are left out by the tests.
"""

import contextlib
import os
import subprocess
import sys

import pytest
import torch
from no_hangs import NoHangs

FP32_EPS = torch.finfo(torch.float32).eps  # 2**-23 = 2u


def fp32_tolerance(terms: int, magnitude: float) -> float:
    """Largest difference expected between two fp32 evaluations of a value whose computation
    accumulates ``terms`` terms along its longest path, the terms of size ``magnitude``."""
    gamma = terms * FP32_EPS / 2 / (1 - terms * FP32_EPS / 2)
    return 2 * gamma * float(magnitude)


def low_precision_tolerance(roundings: int, magnitude: float, dtype: torch.dtype = torch.bfloat16) -> float:
    """Largest error of a computation in which ``roundings`` operands on the path are rounded to
    ``dtype`` (autocast rounds the inputs and the weights of every matmul; it accumulates in
    fp32), against the same computation in fp32: to first order each rounding adds a relative
    error of at most u = eps(dtype) / 2 of the values it passes on, of size ``magnitude``."""
    return roundings * torch.finfo(dtype).eps / 2 * float(magnitude)


def assert_fp32_close(actual: torch.Tensor, expected: torch.Tensor, terms: int, magnitude: float = None,
                      name: str = "") -> float:
    """Assert ``|actual - expected| <= fp32_tolerance(terms, magnitude)`` everywhere; returns the
    largest difference. ``magnitude`` defaults to the largest |expected|."""
    actual, expected = actual.detach().double(), expected.detach().double()
    assert torch.isfinite(expected).all() and torch.isfinite(actual).all(), f"{name}: values that are not finite"
    if magnitude is None:
        magnitude = expected.abs().max().item() if expected.numel() else 0.0
    bound = fp32_tolerance(terms, magnitude)
    difference = (actual - expected).abs().max().item() if expected.numel() else 0.0
    print(f"[fp32] {name or 'difference'}: {difference:.3g} (bound {bound:.3g}: {terms} terms of size {magnitude:.3g})")
    torch.testing.assert_close(actual, expected, rtol=0.0, atol=bound,
                               msg=lambda message: f"{name}: {message}\n(bound: {terms} fp32 terms of size "
                                                   f"{magnitude:.3g})")
    return difference


def probe_like(output: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """A fixed random direction to project ``output`` on before taking a gradient.

    A dependence test asks whether an output depends on an input through a gradient. The plain
    sum of an output can have an exactly zero true gradient (the sum of a LayerNorm's output is
    its bias, whatever its input), and then the test reads rounding noise; a random projection
    of the output has a non-zero gradient wherever the output depends on the input."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(output.shape, generator=generator, dtype=output.dtype)


@pytest.fixture
def one_thread():
    """Tiny tensors: one thread is fastest, and spared spin-waits on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)



def transformer_terms(embed_dim: int, ffn_dim: int, encoder_layers: int, decoder_layers: int, source: int,
                      target: int, features: int = 0, vocabulary: int = 0) -> int:
    """Terms accumulated along the longest path from the inputs to a decoder output.

    Per attention: the input and output projections (2 x ``embed_dim``) and the sum over its
    keys (``source`` or ``target`` positions; RFA adds the dot products over ``features``);
    per LayerNorm its mean and variance (2 x ``embed_dim``); per feed-forward block
    ``embed_dim + ffn_dim``; then the output projection (``embed_dim``) and, for scores, the
    log-softmax over the ``vocabulary``."""
    attention = 2 * embed_dim + features
    encoder_layer = attention + source + 2 * 2 * embed_dim + embed_dim + ffn_dim
    decoder_layer = 2 * attention + target + source + 3 * 2 * embed_dim + embed_dim + ffn_dim
    return encoder_layers * encoder_layer + decoder_layers * decoder_layer + embed_dim + vocabulary


def build_model(arch: str, task, *options: str, seed: int = 1, **attributes):
    """The tests' one way to build a model: :func:`rfa_doc_mt.models.build.build_model` (the
    registered architecture ``arch`` with command-line ``options``), in eval mode."""
    from rfa_doc_mt.models.build import build_model as build

    return build(arch, task, options, seed=seed, **attributes).eval()


@contextlib.contextmanager
def process_group(folder):
    """A one-process gloo group for the test's block (file rendezvous in ``folder``). What holds it
    (a DDP) must be freed inside the block: the group is released at its end as a worker releases
    its own (compat.release_process_group), and a DDP still alive then fails the test instead of
    hanging a later one when it is freed (pytorch/pytorch#75097)."""
    from rfa_doc_mt.compat import release_process_group

    torch.distributed.init_process_group("gloo", init_method=f"file://{folder}/rendezvous", rank=0, world_size=1)
    try:
        yield
    finally:
        assert release_process_group(), "a DDP module still holds the process group at the end of the block"


def max_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float()).abs().max().item()


# ``make test`` runs the suite in two processes (pytest-xdist, ``-n 2 --dist loadfile
# --no-loadscope-reorder``), each with one torch thread, and so do the commands its tests start:
# two processes at two threads each on two cores only spin-wait.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


# ---- where the suite's CPU goes -------------------------------------------------------------------
# Each test phase's CPU seconds in its test process and the commands it waited for (resource's
# SELF and CHILDREN): the commands a warm-start fork ran are the server's children, counted in its
# own log (RFA_DOC_MT_WARM_START_LOG). The summary lists the phases that took the most, beside
# pytest's --durations (wall time, which counts waits and the other process's load).
CPU_SECONDS = "cpu_seconds"


def cpu_now() -> float:
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    started = getattr(item, "_cpu_started", {}).get(call.when)
    if started is not None:
        outcome.get_result().user_properties.append((CPU_SECONDS, round(cpu_now() - started, 2)))


def _phase_start(item, when):
    item.__dict__.setdefault("_cpu_started", {})[when] = cpu_now()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    _phase_start(item, "setup")
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    _phase_start(item, "call")
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    _phase_start(item, "teardown")
    yield


def pytest_terminal_summary(terminalreporter):
    phases = [(dict(report.user_properties).get(CPU_SECONDS, 0.0), report.when, report.nodeid)
              for reports in terminalreporter.stats.values() for report in reports
              if getattr(report, "user_properties", None) and getattr(report, "when", None)]
    if not phases:
        return
    total = sum(seconds for seconds, _, _ in phases)
    terminalreporter.write_sep("=", f"most CPU ({total:.0f} s in the test processes and the commands they waited for)")
    for seconds, when, nodeid in sorted(phases, reverse=True)[:15]:
        terminalreporter.write_line(f"{seconds:8.2f}s {when:8s} {nodeid}")


# The files that take longest under `make test` (wall seconds in two processes, as measured
# when this order was set), longest first: they start first, so that no process runs a long file alone at the
# end. Speed only: a file missing here runs after them.
LONGEST_FILES = ("test_validation_metrics.py",  # 176 s
                 "test_distributed.py",  # 108 s
                 "test_prepare.py",  # 96 s
                 "test_integration.py",  # 63 s
                 "test_rfa_fused.py",  # 42 s
                 "test_readme_path.py",  # 35 s
                 "test_diagnosis.py")  # 22 s


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist's ``--dist loadfile`` each test file runs in one process, which builds
    its module fixtures once, and the processes take the files in the order collected
    (``--no-loadscope-reorder``). The file whose tests read the smoke reproduction
    (:func:`smoke_all`, the longest fixture; they all live in tests/test_reproduce.py) goes
    first, then :data:`LONGEST_FILES`, then the rest as collected: the longest first, so that the
    two processes end together (a file taken last runs alone while the other process idles)."""
    smoke_files = {item.nodeid.split("::")[0] for item in items if "smoke_all" in getattr(item, "fixturenames", ())}
    # in two files they could land in two processes, each running the smoke reproduction
    assert len(smoke_files) <= 1, f"the tests that read smoke_all must live in one file, not {sorted(smoke_files)}"

    def rank(item):
        path = item.nodeid.split("::")[0]
        name = os.path.basename(path)
        return (0 if path in smoke_files else 1 + LONGEST_FILES.index(name) if name in LONGEST_FILES
                else 1 + len(LONGEST_FILES))
    items.sort(key=rank)  # stable: each file's tests, and the rest of the files, as collected


# ---- no test can hang the suite: a time limit on every test (tests/no_hangs.py) ------------------


def pytest_configure(config):
    config.pluginmanager.register(NoHangs(config), "no_hangs")


# The warm-start hook (sitecustomize.py) and server of the test session: test machinery, never
# on a user's path.
WARM_START_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "warm_start")


def with_warm_start_hook(environment) -> dict:
    """``environment`` with the warm-start directory first on its PYTHONPATH."""
    paths = [WARM_START_DIR] + [path for path in environment.get("PYTHONPATH", "").split(os.pathsep)
                                if path and path != WARM_START_DIR]
    return dict(environment, PYTHONPATH=os.pathsep.join(paths))


@pytest.fixture(scope="session", autouse=True)
def warm_start_server(tmp_path_factory):
    """A warm-start server for the session (tests/warm_start/): every ``python -m rfa_doc_mt...``
    the tests start, directly or through the scripts, runs in a fork of one process that has
    imported torch and fairseq, instead of importing them again (3-5 s of CPU each). The session
    puts tests/warm_start first on the PYTHONPATH of the commands it starts, where its
    sitecustomize.py hands them to the server. RFA_DOC_MT_WARM_START=off runs them cold, as a
    user's shell does."""
    if os.environ.get("RFA_DOC_MT_WARM_START") == "off":
        yield None
        return
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = str(tmp_path_factory.mktemp("warm") / "socket")
    server = subprocess.Popen([sys.executable, "-m", "warm_start_server", path], cwd=root,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env=with_warm_start_hook(dict(os.environ, RFA_DOC_MT_WARM_START="")))
    saved = {name: os.environ.get(name) for name in ("RFA_DOC_MT_WARM_START", "PYTHONPATH")}
    os.environ.update(with_warm_start_hook(os.environ))
    os.environ["RFA_DOC_MT_WARM_START"] = path  # until it listens, commands start cold
    try:
        yield path
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture(scope="session")
def smoke_all(tmp_path_factory):
    """``reproduce_all.sh --smoke``, once for the whole run: every system of every table trained a
    few updates on a tiny embedded corpus, decoded and scored (tests/test_reproduce.py checks the
    tables, tests/test_translate.py translates with its models). Returns (folder, the process)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = tmp_path_factory.mktemp("reproduce")
    done = subprocess.run(["bash", os.path.join(root, "scripts", "reproduce_all.sh"), "--smoke", "--out", str(out),
                           "--jobs", "2"], capture_output=True, text=True, timeout=3000)
    assert done.returncode == 0, done.stderr[-4000:]
    return out, done
