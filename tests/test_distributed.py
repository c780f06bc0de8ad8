"""Multi-worker training through fairseq's own distributed engine, on CPU (gloo, two processes).

Two workers run every training of this file together (one spawn, :func:`run_workers`); each
training goes through fairseq's launcher (``distributed_utils.call_main``, adapted for the CPU
by rfa_doc_mt/compat.py), trainer, DDP wrapper and data sharding, exactly as ``fairseq-train``
runs it, except that the two processes are started once for all trainings (``--distributed-no-spawn``
with an explicit rank) instead of once per training, which keeps the file inside its time budget.
``test_train_script_spawns_two_cpu_workers`` runs the real command line, spawn included.

While they train, the workers record what the tests compare: the parameters at the end, every
random matrix RFA draws and the LSH rotations and shuffle seeds at every forward (through a
global module forward hook, test-only), and the rows of every training step, (document,
sentence) for the recurrent-memory model (a spy on the task's ``train_step``, test-only).
"""

import contextlib
import hashlib
import json
import logging
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
USER_DIR = os.path.join(ROOT, "rfa_doc_mt")

# dropout off, plain SGD: with no adaptive step the parameter difference between two runs is
# the learning rate times the accumulated gradient difference (see fp32_parameter_tolerance)
COMMON = ["--task", "doc_translation", "--user-dir", USER_DIR, "--source-lang", "src", "--target-lang", "tgt",
          "--share-all-embeddings", "--dropout", "0", "--optimizer", "sgd", "--lr", "0.5",
          "--criterion", "cross_entropy", "--num-workers", "0", "--seed", "1", "--no-epoch-checkpoints",
          "--log-format", "simple", "--log-interval", "1"]
FAMILIES = {
    "doc_transformer": ["--arch", "doc_transformer_tiny", "--context-size", "1", "--max-tokens", "512"],
    "rfa_doc_transformer": ["--arch", "rfa_doc_transformer_tiny", "--context-size", "1", "--max-tokens", "512"],
    "lstm_doc_transformer": ["--arch", "long_short_doc_transformer_tiny", "--context-size", "2", "--max-tokens", "512",
                             "--local-heads", "2", "--local-attention", "encoder,decoder"],
    "lsh_doc_transformer": ["--arch", "lsh_doc_transformer_tiny", "--context-size", "3", "--max-tokens", "512",
                            "--lsh-attention", "encoder-self,decoder-self,cross", "--lsh-chunk-size", "8",
                            "--lsh-hash-classes", "4", "--lsh-rounds", "2"],
    # trained from scratch here (the configs fine-tune it); small groups so that each worker gets several
    "memory_doc_transformer": ["--arch", "memory_doc_transformer_tiny", "--context-size", "0",
                               "--recurrent-memory", "--optimization-window", "1-3", "--max-tokens", "64",
                               "--ddp-backend", "legacy_ddp"],
}
# N of the resume tests: their uninterrupted two-worker runs are also these families' runs
RESUMED = {"rfa_doc_transformer": 6, "memory_doc_transformer": 10}
INTERRUPTED_AT = 4  # the run is stopped after its checkpoint at this update (--save-interval-updates 2)


def updates(family):
    """Updates of each family's two-worker training."""
    return RESUMED.get(family, 4)


def run_name(family):
    return f"{family}-uninterrupted" if family in RESUMED else family


def training_args(data, family, save_dir, *extra):
    return [data, *COMMON, *FAMILIES[family], "--save-dir", save_dir, *extra]


def free_port():
    return free_ports(1)[0]


def free_ports(count):
    """``count`` ports free now, all different (each held until all are found)."""
    with contextlib.ExitStack() as stack:
        probes = [stack.enter_context(socket.socket()) for _ in range(count)]
        for probe in probes:
            probe.bind(("localhost", 0))
        return [probe.getsockname()[1] for probe in probes]


def marked_environment(marker):
    """This environment, cold (no warm-start server: every process of the command is its own
    descendant) and marked, so that every process the command starts can be found by its mark."""
    return dict(os.environ, OMP_NUM_THREADS="1", RFA_DOC_MT_WARM_START="", RFA_DOC_MT_TEST_MARK=marker)


def marked_processes(marker):
    """{pid: command line} of the processes started with RFA_DOC_MT_TEST_MARK=marker."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as environ:
                if f"RFA_DOC_MT_TEST_MARK={marker}".encode() not in environ.read().split(b"\0"):
                    continue
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                found[int(pid)] = cmdline.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # ended meanwhile, or not ours to read
            continue
    return found


def kill_marked(marker):
    """Kill every process of a run (a test that failed half-way leaves none training on)."""
    for pid in marked_processes(marker):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def wait_for(condition, timeout, what):
    ended = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < ended, f"{what}: not within {timeout} s"
        time.sleep(0.5)


def logged_updates(path):
    """The number of updates fairseq-train has logged to ``path`` so far (--log-interval 1)."""
    return len(re.findall(r"train_inner.* num_updates=", open(path).read())) if os.path.exists(path) else 0


# ---- what runs inside each worker ---------------------------------------------------------------


def digest(tensor):
    return hashlib.sha1(tensor.detach().cpu().contiguous().numpy().tobytes()).hexdigest()


class Recorder:
    """Test-only observer of one training in one worker."""

    def __init__(self):
        self.model = None
        self.initial = None
        self.random_matrices = []  # (update, draw digest) per RFA training draw
        self.lsh = []  # (update, rotations digest, shuffle seed digest) per LSH training forward
        # (update, dummy, rows) per train_step call; rows: (document, sentence) in document-ordered
        # batches, else window ids
        self.steps = []
        self.losses = []  # (update, summed loss, sample size) per train_step call of a real batch
        self.memory_warnings = []

    def forward_hook(self, module, inputs, output):
        from fairseq.models import FairseqEncoderDecoderModel

        from rfa_doc_mt.modules.lsh_attention import LSHCrossAttention, _LSHAttention
        from rfa_doc_mt.modules.random_feature_attention import RandomMatrices

        if isinstance(module, FairseqEncoderDecoderModel) and self.model is not module:
            self.model = module  # its first forward comes before the first update
            self.initial = {name: value.detach().clone() for name, value in module.state_dict().items()}
        if not module.training:
            return
        if isinstance(module, RandomMatrices):
            self.random_matrices.append((module.num_updates, digest(output)))
        elif isinstance(module, _LSHAttention):
            shuffle = ""
            if isinstance(module, LSHCrossAttention):
                shuffle = digest(torch.randint(2 ** 30, (4,), generator=module.shuffle_generator("cpu")))
            self.lsh.append((module.num_updates, digest(module.rotations), shuffle))

    def record_step(self, sample, update_num, ignore_grad):
        steps = sample["steps"][sample["context_steps"]:] if "steps" in sample else [sample]
        if "document" in steps[0]["window"]:
            rows = [(int(d), int(p)) for step in steps
                    for d, p in zip(step["window"]["document"].tolist(), step["window"]["position"].tolist())]
        else:
            rows = sample["id"].tolist()
        self.steps.append((update_num, bool(ignore_grad), rows))

    def result(self):
        return {"params": {name: value.detach().clone() for name, value in self.model.state_dict().items()},
                "initial": self.initial,
                "random_matrices": self.random_matrices, "lsh": self.lsh, "steps": self.steps,
                "losses": self.losses, "memory_warnings": self.memory_warnings}


def train(argv):
    """``fairseq-train argv`` in this process: fairseq_cli.train.cli_main with the arguments given."""
    from fairseq import checkpoint_utils, options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.distributed import utils as distributed_utils
    from fairseq_cli.train import main

    import rfa_doc_mt  # noqa: F401  (compat)
    from rfa_doc_mt.tasks.doc_translation import DocTranslationTask

    if hasattr(checkpoint_utils.save_checkpoint, "best"):
        del checkpoint_utils.save_checkpoint.best  # a fresh process has none
    recorder = Recorder()
    hook = torch.nn.modules.module.register_module_forward_hook(recorder.forward_hook)
    fairseq_train_step = DocTranslationTask.train_step

    def spy_train_step(task, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        recorder.record_step(sample, update_num, ignore_grad)
        loss, sample_size, logging_output = fairseq_train_step(task, sample, model, criterion, optimizer, update_num,
                                                               ignore_grad)
        if not ignore_grad:  # a dummy batch (a worker out of batches): the trainer drops its figures
            recorder.losses.append((update_num, float(logging_output["loss"]), float(logging_output["sample_size"])))
        return loss, sample_size, logging_output

    class WarningList(logging.Handler):
        def emit(self, record):
            recorder.memory_warnings.append(record.getMessage())

    warnings = WarningList(logging.WARNING)
    logging.getLogger("rfa_doc_mt.generation.memory_decoding").addHandler(warnings)
    DocTranslationTask.train_step = spy_train_step
    try:
        parser = options.get_training_parser()
        args = options.parse_args_and_arch(parser, input_args=argv)
        distributed_utils.call_main(convert_namespace_to_omegaconf(args), main)
    finally:
        DocTranslationTask.train_step = fairseq_train_step
        logging.getLogger("rfa_doc_mt.generation.memory_decoding").removeHandler(warnings)
        hook.remove()
    return recorder.result()


def worker(rank, runs, ports, out):
    """One of two workers: every (name, argv) of ``runs`` in turn, results to ``out/name.rank.pt``.
    Each training ends by destroying its process group (compat.release_process_group), so each
    rendezvous on a port of its own: on one port, a worker that started the next training first
    could meet the other's store of the last one."""
    torch.set_num_threads(1)  # two workers on two cores
    for (name, argv), port in zip(runs, ports):
        distributed = ["--distributed-world-size", "2", "--distributed-no-spawn", "--distributed-rank", str(rank),
                       "--device-id", str(rank), "--distributed-init-method", f"tcp://localhost:{port}"]
        torch.save(train(argv + distributed), os.path.join(out, f"{name}.{rank}.pt"))
        assert not torch.distributed.is_initialized()


def run_workers(runs, out):
    torch.multiprocessing.spawn(worker, args=(runs, free_ports(len(runs)), out), nprocs=2, join=True)
    return {name: [torch.load(os.path.join(out, f"{name}.{rank}.pt"), weights_only=False) for rank in range(2)]
            for name, _ in runs}


# ---- fixtures -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from rfa_doc_mt.data import prepare

    out = tmp_path_factory.mktemp("corpus") / "data"
    prepare.main(["synthetic", "--out", str(out), "--train-documents", "20", "--valid-documents", "4",
                  "--test-documents", "2", "--contrastive-pairs", "2", "--workers", "1"])
    return str(out)


@pytest.fixture(scope="module")
def two_workers(corpus, tmp_path_factory):
    """Every two-worker training of this file, run by one pair of worker processes:
    ``{name: [result of worker 0, result of worker 1]}`` (see :class:`Recorder`), and ``"dir"``."""
    work = tmp_path_factory.mktemp("two_workers")
    runs = [(family, training_args(corpus, family, str(work / family), "--max-update", str(updates(family))))
            for family in FAMILIES if family not in RESUMED]
    every = ["--save-interval-updates", "2", "--keep-interval-updates", "1"]
    for family in RESUMED:
        resumed, last = str(work / f"{family}-resumed"), str(updates(family))
        runs += [(f"{family}-uninterrupted", training_args(corpus, family, str(work / f"{family}-uninterrupted"),
                                                           "--max-update", last, *every)),
                 (f"{family}-interrupted", training_args(corpus, family, resumed,
                                                         "--max-update", str(INTERRUPTED_AT), *every)),
                 (f"{family}-resumed", training_args(corpus, family, resumed, "--max-update", last, *every))]
    return dict(run_workers(runs, str(work)), dir=work)


@pytest.fixture(scope="module")
def one_worker(corpus, tmp_path_factory):
    """The same trainings on one worker with --update-freq 2 (in this process), on demand."""
    work = tmp_path_factory.mktemp("one_worker")
    results = {}

    def result(family):
        if family not in results:
            threads = torch.get_num_threads()
            torch.set_num_threads(1)
            try:
                results[family] = train(training_args(corpus, family, str(work / family), "--max-update",
                                                      str(updates(family)), "--update-freq", "2"))
            finally:
                torch.set_num_threads(threads)
        return results[family]
    return result


# ---- tolerance ----------------------------------------------------------------------------------


def fp32_parameter_tolerance(result, family, updates):
    """Largest difference expected between the parameters of two fp32 runs that compute the same
    updates in different orders of operations (other threads, one gradient summed by two workers'
    all-reduce or by --update-freq accumulation).

    A gradient element is a sum over the tokens of an update (at most 2 x --max-tokens) of terms
    that each accumulate the longest path of the model (``transformer_terms``, twice for the
    memory model, whose loss reaches the previous sentence); two orders of these sums differ by
    at most 2·γ_n·Σ|terms| (tests/conftest.py). With plain SGD a parameter moves by lr·Σ_u g_u;
    the scale of lr·Σ|terms| over the run is taken from the largest movement of a parameter over
    the run (which leaves out cancellation between terms); each update also rounds the parameter
    once (eps·|θ|). Measured on the development machine: 0 (the same kernels, one thread each);
    the bugs this file was written against gave 0.177 (RFA draws per micro-batch), 0.0102 (other
    batches after resuming at an epoch boundary) and 0.00396 (memories lost on resume)."""
    from conftest import FP32_EPS, fp32_tolerance, transformer_terms

    max_tokens = int(FAMILIES[family][FAMILIES[family].index("--max-tokens") + 1])
    longest = max_tokens  # a window is at most a whole batch long
    vocabulary = len(result["params"]["encoder.embed_tokens.weight"])
    path = transformer_terms(128, 256, 2, 2, longest, longest, vocabulary=vocabulary)  # the *_tiny sizes
    if family == "memory_doc_transformer":
        path *= 2
    floats = [name for name, value in result["params"].items() if value.is_floating_point()]
    moved = max((result["params"][name].double() - result["initial"][name].double()).abs().max().item()
                for name in floats)
    largest = max(result["params"][name].abs().max().item() for name in floats)
    return fp32_tolerance(2 * max_tokens + path, moved) + updates * FP32_EPS * largest


def float_parameter_difference(a, b):
    assert a.keys() == b.keys()
    return max((a[name].double() - b[name].double()).abs().max().item() for name in a if a[name].is_floating_point())


def report(name, difference, tolerance):
    print(f"[distributed] {name}: largest parameter difference {difference:.3g} (tolerance {tolerance:.3g})")


# ---- the launcher -------------------------------------------------------------------------------


def train_script(corpus, out, *extra):
    config = os.path.join(ROOT, "configs", "demo", "transformer_L1.sh")
    return ["bash", os.path.join(ROOT, "scripts", "train.sh"), config, corpus, str(out),
            "--distributed-world-size", "2", "--max-tokens", "512", *extra]


def test_train_script_spawns_two_cpu_workers(corpus, tmp_path):
    """scripts/train.sh CONFIG DATA OUT --distributed-world-size 2: fairseq's launcher spawns two
    gloo workers on this CPU machine (compat.py) and they train together, and every process of
    the run has ended when the command returns."""
    out, marker = tmp_path / "run", f"two-workers-{os.getpid()}"
    completed = subprocess.run(train_script(corpus, out, "--max-update", "2"), capture_output=True, text=True,
                               timeout=600, env=marked_environment(marker))
    log = (out / "train.log").read_text() if (out / "train.log").exists() else ""
    assert completed.returncode == 0, completed.stderr[-3000:] + log[-3000:]
    assert marked_processes(marker) == {}
    assert "distributed init (rank 0)" in log and "distributed init (rank 1)" in log
    assert "`broadcast_buffers` is deprecated" not in log  # torch 2.13's FutureWarning (compat.py)
    state = torch.load(out / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    distributed = state["cfg"]["distributed_training"]
    assert (distributed["distributed_world_size"], distributed["distributed_backend"]) == (2, "gloo")
    assert state["optimizer_history"][-1]["num_updates"] == 2


# ---- two machines -------------------------------------------------------------------------------


TRAIN_INNER_LOSS = re.compile(r"\| train_inner \| epoch \d+: +\d+ / \d+ loss=([\d.]+),.* num_updates=(\d+),")


def per_update_losses(results):
    """{update: loss} as fairseq-train logs it (train_inner, --log-interval 1: the criterion's loss
    summed over the workers' batches, over their summed sample size, in bits, to 3 decimals)."""
    totals = {}
    for result in results:
        for update, loss, sample_size in result["losses"]:
            summed = totals.setdefault(update + 1, [0.0, 0.0])  # train_step's update_num counts from 0
            summed[0] += loss
            summed[1] += sample_size
    return {update: round(loss / sample_size / math.log(2), 3) for update, (loss, sample_size) in totals.items()}


def test_two_machines_train_as_one_machine_with_two_workers(corpus, two_workers, tmp_path):
    """docs/training.md's recipe for several machines, on this one: two torchrun "nodes" (node ranks
    0 and 1, --nnodes 2, one CPU worker each, gloo over 127.0.0.1) start fairseq-train, which
    reads torchrun's environment (compat.py on CPU; fairseq's _infer_torch_distributed_launch_init
    on GPUs). They log the losses of the single-machine two-worker run of the same training
    (two_workers: ranks 0 and 1 of one machine) and end with its parameters, bit for bit."""
    family = "doc_transformer"
    port, save_dir, marker = free_port(), tmp_path / "run", f"two-nodes-{os.getpid()}"
    fairseq_train = os.path.join(os.path.dirname(sys.executable), "fairseq-train")
    argv = training_args(corpus, family, str(save_dir), "--max-update", str(updates(family)),
                         "--distributed-world-size", "2")
    # python -m torch.distributed.run is torchrun (its console script may name another interpreter)
    nodes = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(rank),
                               "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", str(port),
                               fairseq_train, *argv],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=marked_environment(marker))
             for rank in range(2)]
    try:
        outputs = [node.communicate(timeout=600)[0] for node in nodes]
    finally:
        for node in nodes:
            node.kill()
    for rank, (node, output) in enumerate(zip(nodes, outputs)):
        assert node.returncode == 0, f"node {rank}:\n{output[-3000:]}"
    assert marked_processes(marker) == {}  # torchrun's workers ended with their nodes
    assert "distributed init (rank 0): env://" in outputs[0] and "distributed init (rank 1): env://" in outputs[1]
    logged = {int(update): float(loss) for loss, update in TRAIN_INNER_LOSS.findall(outputs[0])}
    expected = per_update_losses(two_workers[run_name(family)])
    print(f"[distributed] two machines: losses {logged}; one machine, two workers: {expected}")
    assert sorted(logged) == list(range(1, updates(family) + 1)) and logged == expected
    state = torch.load(save_dir / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    assert state["cfg"]["distributed_training"]["distributed_world_size"] == 2
    single_machine = two_workers[run_name(family)][0]["params"]
    assert state["model"].keys() == single_machine.keys()
    for name, value in state["model"].items():  # the same batches, all-reduces and steps
        assert torch.equal(value, single_machine[name]), name


# ---- a killed worker ends the run ----------------------------------------------------------------
# Each run below trains on (--max-update far away, no validation) until one worker is killed after
# its third update, and must then end whole, with an error that says so, well before it could have
# finished on its own.
KILLED_RUN_ENDS_WITHIN = 120  # seconds after the kill; torch's join waits up to 30 s for SIGTERM


def test_a_killed_worker_ends_a_two_worker_training_with_a_clear_error(corpus, tmp_path):
    out, marker = tmp_path / "run", f"killed-worker-{os.getpid()}"
    command = subprocess.Popen(train_script(corpus, out, "--max-update", "100000", "--disable-validation",
                                            "--log-interval", "1"),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=marked_environment(marker))
    try:
        wait_for(lambda: logged_updates(out / "train.log") >= 3 or command.poll() is not None, 300, "three updates")
        workers = {pid: line for pid, line in marked_processes(marker).items() if "spawn_main" in line
                   and "resource_tracker" not in line}
        assert len(workers) == 2, (workers, command.poll())
        os.kill(max(workers), signal.SIGKILL)
        killed = time.monotonic()
        output = command.communicate(timeout=KILLED_RUN_ENDS_WITHIN)[0]
        print(f"[distributed] ended {time.monotonic() - killed:.1f} s after the kill")
        wait_for(lambda: marked_processes(marker) == {}, 30, "every process of the run ended")
    finally:
        command.kill()
        kill_marked(marker)
    assert command.returncode != 0
    log = (out / "train.log").read_text()
    assert re.search(r"distributed training stopped: worker [01] failed first, and the others were ended \(", log), \
        output[-3000:] + log[-3000:]
    assert re.search(r"worker [01]: killed by SIGKILL", log), log[-3000:]
    assert "The same command resumes from" in log


def test_a_killed_worker_ends_both_torchrun_nodes(corpus, tmp_path):
    """The recipe for several machines, a worker of node 1 killed: node 0's worker learns it from
    gloo ("Connection closed by peer", or "reset") and fails, and both torchrun nodes end with an error."""
    family, port, marker = "doc_transformer", free_port(), f"killed-node-{os.getpid()}"
    fairseq_train = os.path.join(os.path.dirname(sys.executable), "fairseq-train")
    argv = training_args(corpus, family, str(tmp_path / "run"), "--max-update", "100000", "--disable-validation",
                         "--distributed-world-size", "2")
    logs = [tmp_path / f"node{rank}.log" for rank in range(2)]
    nodes = []
    try:
        for rank in range(2):
            with open(logs[rank], "w") as log:
                nodes.append(subprocess.Popen(
                    [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(rank),
                     "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", str(port),
                     fairseq_train, *argv], stdout=log, stderr=subprocess.STDOUT, env=marked_environment(marker)))
        wait_for(lambda: logged_updates(logs[0]) >= 3 or any(node.poll() is not None for node in nodes), 300,
                 "three updates")
        worker = [pid for pid, line in marked_processes(marker).items()
                  if "fairseq-train" in line and "torch.distributed.run" not in line
                  and open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1] == str(nodes[1].pid)]
        assert len(worker) == 1, (worker, [node.poll() for node in nodes])
        os.kill(worker[0], signal.SIGKILL)
        for node in nodes:
            node.wait(timeout=KILLED_RUN_ENDS_WITHIN)
        wait_for(lambda: marked_processes(marker) == {}, 30, "every process of the run ended")
    finally:
        for node in nodes:
            node.kill()
        kill_marked(marker)
    outputs = [log.read_text() for log in logs]
    assert [node.returncode != 0 for node in nodes] == [True, True], outputs[0][-3000:]
    assert re.search("Connection (closed|reset) by peer", outputs[0]), outputs[0][-3000:]
    assert "(SIGKILL)" in outputs[1], outputs[1][-3000:]


# ---- two workers --------------------------------------------------------------------------------


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_family_trains_on_two_cpu_workers_with_identical_parameters(two_workers, family):
    first, second = two_workers[run_name(family)]
    assert first["params"].keys() == second["params"].keys()
    for name in first["params"]:  # the same all-reduced gradients, the same steps: bit for bit
        assert torch.equal(first["params"][name], second["params"][name]), name
    state = torch.load(two_workers["dir"] / run_name(family) / "checkpoint_last.pt", map_location="cpu",
                       weights_only=False)
    assert state["optimizer_history"][-1]["num_updates"] == updates(family)
    assert float_parameter_difference(first["params"], first["initial"]) > 1e-2  # it trained
    for name, value in state["model"].items():  # what rank 0 saved is what both hold
        assert torch.equal(value, first["params"][name]), name


@pytest.mark.parametrize("family", ["doc_transformer", "rfa_doc_transformer", "lstm_doc_transformer",
                                    "lsh_doc_transformer"])
def test_two_workers_equal_one_worker_with_update_freq_2(two_workers, one_worker, family):
    """fairseq deals batch 2u to worker 0 and batch 2u+1 to worker 1 at update u; one worker with
    --update-freq 2 accumulates the same two batches. (The memory model deals whole document
    groups to workers, not batches in turn, so it has no one-worker counterpart.)"""
    workers, one = two_workers[run_name(family)], one_worker(family)
    assert [rows for _, _, rows in one["steps"]] == [
        rows for pair in zip(*(worker["steps"] for worker in workers)) for _, dummy, rows in pair if not dummy]
    difference = float_parameter_difference(workers[0]["params"], one["params"])
    tolerance = fp32_parameter_tolerance(workers[0], family, updates(family))
    report(f"{family}, two workers vs one with --update-freq 2", difference, tolerance)
    assert difference <= tolerance


def test_random_matrices_and_lsh_rotations_are_identical_on_both_workers(two_workers):
    first, second = two_workers[run_name("rfa_doc_transformer")]
    assert first["random_matrices"] == second["random_matrices"]
    assert sorted({update for update, _ in first["random_matrices"]}) == list(range(updates("rfa_doc_transformer")))
    # every update draws new matrices
    assert len({matrix for _, matrix in first["random_matrices"]}) > updates("rfa_doc_transformer")
    first, second = two_workers[run_name("lsh_doc_transformer")]
    assert first["lsh"] == second["lsh"]
    assert sorted({update for update, _, _ in first["lsh"]}) == list(range(updates("lsh_doc_transformer")))
    shuffles = {update: shuffle for update, _, shuffle in first["lsh"] if shuffle}
    assert len(set(shuffles.values())) == updates("lsh_doc_transformer")  # the cross-attention shuffle changes


def test_memory_documents_stay_in_order_on_their_worker(two_workers):
    workers = two_workers[run_name("memory_doc_transformer")]
    documents_of = []
    for result in workers:
        assert result["memory_warnings"] == []  # every sentence read the memory its predecessor wrote
        seen = {}
        for _, dummy, rows in result["steps"]:
            if not dummy:
                for document, sentence in rows:
                    seen.setdefault(document, []).append(sentence)
        # (the run stays inside its first epoch: each document is read once, from its first sentence)
        for document, sentences in seen.items():
            assert sentences == list(range(len(sentences))), (document, sentences)
        documents_of.append(set(seen))
    assert documents_of[0] and documents_of[1] and not documents_of[0] & documents_of[1]
    assert len(workers[0]["steps"]) == len(workers[1]["steps"]) == updates("memory_doc_transformer")


@pytest.mark.parametrize("family", list(RESUMED))
def test_resumed_run_reaches_the_parameters_of_an_uninterrupted_run(two_workers, family):
    """Two workers stopped after their checkpoint at update INTERRUPTED_AT (for RFA the end of
    an epoch: the next epoch's batches must be those of an uninterrupted run; for the memory
    model the middle of document groups: the memories must come back) and restarted."""
    for rank in range(2):
        uninterrupted, resumed = (two_workers[f"{family}-{run}"][rank] for run in ("uninterrupted", "resumed"))
        assert resumed["memory_warnings"] == []
        later = [step for step in uninterrupted["steps"] if step[0] >= INTERRUPTED_AT]
        assert resumed["steps"] == later
        assert resumed["random_matrices"] == [draw for draw in uninterrupted["random_matrices"]
                                              if draw[0] >= INTERRUPTED_AT]
        difference = float_parameter_difference(uninterrupted["params"], resumed["params"])
        tolerance = fp32_parameter_tolerance(uninterrupted, family, updates(family))
        report(f"{family}, worker {rank}, resumed vs uninterrupted", difference, tolerance)
        assert difference <= tolerance


# ---- document groups on several workers (no processes) -----------------------------------------


def test_interleaved_group_shards_give_each_worker_whole_groups_in_fairseq_round_robin():
    from fairseq.data.iterators import ShardedIterator

    from rfa_doc_mt.data.windows import interleave_group_shards

    groups = [[np.array([10 * g + k]) for k in range(size)] for g, size in enumerate([3, 1, 2, 2])]
    batches = interleave_group_shards(groups, 2)
    shards = [[b.tolist() for b in ShardedIterator(batches, 2, shard)] for shard in range(2)]
    # group 0 (3 batches) to worker 0, groups 1 and 2 to worker 1 (fewer batches), group 3 to the
    # first of two equal workers; worker 1 padded with empty (dummy) batches to the same length
    assert shards[0] == [[0], [1], [2], [30], [31]]
    assert shards[1] == [[10], [20], [21], [], []]


def memory_task(corpus):
    from rfa_doc_mt.tasks.doc_translation import (
        DocTranslationConfig,
        DocTranslationTask,
    )

    with open(os.path.join(corpus, "prep.json")) as f:
        languages = json.load(f)
    cfg = DocTranslationConfig(data=corpus, source_lang=languages["source_lang"],
                               target_lang=languages["target_lang"], recurrent_memory=True,
                               optimization_window="1-3", train_subset="train", dataset_impl="mmap",
                               required_seq_len_multiple=1)
    task = DocTranslationTask.setup_task(cfg)
    for split in ("train", "valid"):
        task.load_dataset(split)
    return task


@pytest.mark.parametrize("split", ["train", "valid"])
def test_document_ordered_batches_deal_whole_documents_in_order_to_each_worker(corpus, split):
    task = memory_task(corpus)
    dataset = task.datasets[split]
    for epoch in (1, 2):
        shards = []
        for shard in range(2):
            # two documents per group: the 4 validation documents make 2 groups
            iterator = task.get_batch_iterator(dataset, max_sentences=2, seed=1, num_shards=2, shard_id=shard,
                                               epoch=epoch)
            shards.append(list(iterator.next_epoch_itr(shuffle=False)))
        assert len(shards[0]) == len(shards[1])  # the same number of steps: DDP's all-reduces match
        documents_of, windows = [], []
        for batches in shards:
            sentences_of = {}
            real = [bool(sample) for sample in batches]
            assert real == sorted(real, reverse=True)  # empty (dummy) batches only at the end
            for sample in filter(None, batches):
                steps = sample["steps"][sample["context_steps"]:] if "steps" in sample else [sample]
                for step in steps:
                    windows += step["id"].tolist()
                    for document, sentence in zip(step["window"]["document"].tolist(),
                                                  step["window"]["position"].tolist()):
                        sentences_of.setdefault(document, []).append(sentence)
            for document, sentences in sentences_of.items():
                assert sentences == list(range(len(sentences))), (document, sentences)
            documents_of.append(set(sentences_of))
        assert not documents_of[0] & documents_of[1]
        assert sorted(windows) == list(range(len(dataset)))
    assert documents_of[0] and documents_of[1]


def test_memory_training_refuses_torch_ddp_with_a_message(corpus, tmp_path):
    """torch's DDP all-reduces in every backward pass; the memory model runs one per sentence
    position, a number that differs between workers: it needs --ddp-backend legacy_ddp."""
    from conftest import build_model, process_group
    from fairseq.criterions.cross_entropy import CrossEntropyCriterion
    from fairseq.distributed import ModuleProxyWrapper

    task = memory_task(corpus)
    model = build_model("memory_doc_transformer_tiny", task)
    sample = next(iter(task.get_batch_iterator(task.datasets["train"], max_tokens=64).next_epoch_itr()))
    with process_group(tmp_path):
        wrapped = ModuleProxyWrapper(torch.nn.parallel.DistributedDataParallel(model))
        with pytest.raises(ValueError, match="--ddp-backend legacy_ddp"):
            task.train_step(sample, wrapped, CrossEntropyCriterion(task, False), None, 0)
        del wrapped, model  # before the group is released


# ---- compat: the launcher on CPU, untouched on GPU ----------------------------------------------


def parsed_config(corpus, tmp_path, *extra):
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    argv = training_args(corpus, "doc_transformer", str(tmp_path), "--distributed-world-size", "2", *extra)
    return convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(),
                                                                      input_args=argv))


def test_compat_spawns_one_gloo_process_per_worker_without_cuda(corpus, tmp_path, monkeypatch):
    from fairseq.distributed import utils as distributed_utils

    from rfa_doc_mt import compat

    spawned = {}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.multiprocessing, "start_processes", lambda fn, args, nprocs, join, start_method: (
        spawned.update(fn=fn, nprocs=nprocs, cfg=args[1], join=join, start_method=start_method) or "workers"))
    monkeypatch.setattr(compat, "join_workers", lambda workers, save_dir: spawned.update(joined=(workers, save_dir)))
    for name in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"):
        monkeypatch.delenv(name, raising=False)
    distributed_utils.call_main(parsed_config(corpus, tmp_path), main=None)
    assert spawned["fn"] is compat._distributed_main_and_tear_down and spawned["nprocs"] == 2
    assert (spawned["join"], spawned["start_method"], spawned["joined"]) == (False, "spawn", ("workers", str(tmp_path)))
    training = spawned["cfg"].distributed_training
    assert training.distributed_backend == "gloo"
    assert training.distributed_init_method.startswith("tcp://localhost:")


class Held:
    """Something a training's frames hold, as they hold its trainer and DDP."""


@pytest.mark.parametrize("fails", [False, True])
def test_a_worker_releases_its_process_group_when_it_ends(monkeypatch, fails):
    """A CPU worker runs fairseq's distributed_main and then releases its process group, also when
    training raised; by then nothing of the training is held any more, not even by the frames of
    the exception's traceback (left to the interpreter's exit, gloo's teardown once killed a worker
    whose training had finished; destroyed under a live DDP, it hung)."""
    import weakref

    from rfa_doc_mt import compat

    events, held = [], []

    def distributed_main(index, main, cfg, kwargs):
        trainer = Held()
        held.append(weakref.ref(trainer))
        events.append(("main", index, cfg, kwargs))
        if fails:
            raise RuntimeError("training failed")

    monkeypatch.setattr(compat.distributed_utils, "distributed_main", distributed_main)
    monkeypatch.setattr(compat, "release_process_group", lambda: events.append(("released", held[0]() is None)))
    if fails:
        with pytest.raises(RuntimeError, match="training failed"):
            compat._distributed_main_and_tear_down(1, None, "cfg", {"start_rank": 0})
    else:
        compat._distributed_main_and_tear_down(1, None, "cfg", {"start_rank": 0})
    assert events == [("main", 1, "cfg", {"start_rank": 0}), ("released", True)]


def test_compat_follows_torchrun_without_cuda(corpus, tmp_path, monkeypatch):
    from rfa_doc_mt import compat

    called = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(compat, "_distributed_main_and_tear_down",
                        lambda index, main, cfg, kwargs: called.append((index, cfg)))
    monkeypatch.setenv("MASTER_ADDR", "localhost")
    monkeypatch.setenv("MASTER_PORT", "29500")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    compat.distributed_utils.call_main(parsed_config(corpus, tmp_path), main=None)
    index, cfg = called[0]
    training = cfg.distributed_training
    assert (index, training.distributed_init_method, training.distributed_rank, training.device_id,
            training.distributed_no_spawn, training.distributed_backend) == (1, "env://", 1, 1, True, "gloo")


def test_compat_leaves_the_gpu_launcher_to_fairseq(corpus, tmp_path, monkeypatch):
    from rfa_doc_mt import compat

    called, spawned = [], []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(compat, "_fairseq_call_main", lambda cfg, main, **kwargs: called.append(cfg))
    monkeypatch.setattr(torch.multiprocessing, "start_processes",
                        lambda fn, args, nprocs, join, start_method: spawned.append(args[1]))
    monkeypatch.setattr(compat, "join_workers", lambda workers, save_dir: None)
    compat.distributed_utils.call_main(parsed_config(corpus, tmp_path), main=None)
    training = called[0].distributed_training
    assert (training.distributed_backend, training.distributed_init_method) == ("nccl", None)
    assert spawned == []
    called.clear()
    compat.distributed_utils.call_main(parsed_config(corpus, tmp_path, "--cpu"), main=None)  # --cpu: CPU workers
    assert called == [] and spawned[0].distributed_training.distributed_backend == "gloo"


# ---- multi-worker runs always end ---------------------------------------------------------------


def ends_well_or_waits(index, waits):
    """A spawned worker: ends well, or (``index`` in ``waits``) waits for good, as a worker stuck
    in its teardown does."""
    if index in waits:
        time.sleep(3600)


def dies_or_waits(index):
    """A spawned worker: worker 1 is killed; worker 0 waits for it, as in a collective."""
    if index == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(3600)


def test_a_worker_stuck_after_the_others_ended_is_ended(caplog):
    from rfa_doc_mt import compat

    workers = torch.multiprocessing.start_processes(ends_well_or_waits, args=({1},), nprocs=2, join=False,
                                                    start_method="spawn")
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="rfa_doc_mt.compat"):
        compat.join_workers(workers, "SAVE_DIR", grace=2, poll=0.2)
    assert time.monotonic() - started < 60
    assert [process.is_alive() for process in workers.processes] == [False, False]
    assert "worker(s) 1 still running 2 s after another worker ended its training" in caplog.text


def test_a_killed_worker_ends_the_others_with_an_error_saying_how():
    from rfa_doc_mt import compat

    workers = torch.multiprocessing.start_processes(dies_or_waits, args=(), nprocs=2, join=False,
                                                    start_method="spawn")
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"worker 1 failed first.*worker 0: killed by SIGTERM; "
                                           r"worker 1: killed by SIGKILL.*SAVE_DIR/checkpoint_last.pt"):
        compat.join_workers(workers, "SAVE_DIR", poll=0.2)
    assert time.monotonic() - started < 60
    assert [process.is_alive() for process in workers.processes] == [False, False]
