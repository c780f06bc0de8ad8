"""Running systems: the checks before any long work (data, configs, architectures), training,
decoding and scoring each system through scripts/run_system.sh, the benchmarks, and the embedded
corpus."""

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from ..data.io import DataError, atomic_write
from ..training_state import trains_further
from .papers import EMBEDDED, EMBEDDED_CORPORA, ROOT, SHARED_WIT3, System
from .tables import UPDATES, read_json


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------
# input checks


def data_problems(data: str, needs_consistency: bool, selects_on_consistency: bool = False) -> List[str]:
    """What is missing from a prepared corpus (empty: nothing). ``selects_on_consistency``: the
    configs validate on DATA/valid_consistency (Wu et al. 2022's consistency models, appendix A.2)."""
    if not os.path.isdir(data):
        return [f"{data}: data directory not found (prepare one with scripts/prepare_*.sh)"]
    prep_path = os.path.join(data, "prep.json")
    if not os.path.isfile(prep_path):
        return [f"{data}: no prep.json: not a corpus prepared by scripts/prepare_*.sh"]
    prep = read_json(prep_path)
    source, target = prep["source_lang"], prep["target_lang"]
    problems = []
    for split in ("train", "valid", "test"):
        for lang in (source, target):
            path = os.path.join(data, f"{split}.{source}-{target}.{lang}.idx")
            if not os.path.isfile(path):
                problems.append(f"{path}: missing (the {split} split is needed)")
    if needs_consistency and not os.path.isdir(os.path.join(data, "consistency")):
        problems.append(f"{data}/consistency: missing: this experiment scores contrastive sets "
                        "(scripts/prepare_consistency.sh writes them)")
    if selects_on_consistency and not os.path.isfile(os.path.join(data, "valid_consistency", "consistency.json")):
        problems.append(f"{data}/valid_consistency: missing: these configs select checkpoints on the consistency of "
                        "contrastive dev sets "
                        "(scripts/prepare_consistency.sh --out DATA/valid_consistency DEV.json ...)")
    return problems


_SOURCE_LINE = re.compile(r"^\s*(?:source|\.)\s+(\S.*?)\s*$", re.MULTILINE)
_ARCH = re.compile(r"--arch[= ]+([A-Za-z0-9_]+)")


def _sourced_path(expression: str, config: str) -> Optional[str]:
    """The file a config's ``source`` line names, for the two forms the configs use: from the
    project (``${RFA_DOC_MT_ROOT:-...}/configs/...``) and beside the config
    (``$(dirname "${BASH_SOURCE[0]}")/...``); None for any other."""
    if "RFA_DOC_MT_ROOT" in expression:
        return os.path.join(ROOT, expression.rsplit("}", 1)[1].strip('"').lstrip("/"))
    if "BASH_SOURCE" in expression:
        return os.path.join(os.path.dirname(config), expression.rsplit(")", 1)[1].strip('"').lstrip("/"))
    return None


def config_architectures(config: str) -> Tuple[List[str], List[str]]:
    """Every ``--arch`` a config and the files it sources name, read as text (no bash runs):
    (architectures, problems). A config that chooses between architectures (configs/lsh/common.sh
    by ATTENTION) names each of them."""
    archs, problems, seen, queue = [], [], set(), [config]
    while queue:
        path = os.path.normpath(queue.pop(0))
        if path in seen:
            continue
        seen.add(path)
        if not os.path.isfile(path):
            problems.append(f"sources {path}, which does not exist")
            continue
        with open(path, encoding="utf-8") as handle:
            text = "\n".join(line for line in handle.read().splitlines() if not line.lstrip().startswith("#"))
        archs += [arch for arch in dict.fromkeys(_ARCH.findall(text)) if arch not in archs]
        for expression in _SOURCE_LINE.findall(text):
            sourced = _sourced_path(expression, path)
            if sourced is None:
                problems.append(f"sources {expression}, which this check cannot follow")
            else:
                queue.append(sourced)
    return archs, problems


_CONTEXT_SIZE = re.compile(r"--context-size[= ]+([0-9]+)")


def config_context_size(config: str) -> int:
    """The ``--context-size`` a config names (read as text; 0 where it names none as a number:
    a config that sets it from a variable)."""
    path = os.path.join(ROOT, config)
    if not os.path.isfile(path):
        return 0
    with open(path, encoding="utf-8") as handle:
        found = _CONTEXT_SIZE.search(handle.read())
    return int(found.group(1)) if found else 0


def config_problems(systems: Sequence[System]) -> List[str]:
    """Missing configs, configs without an architecture, architectures fairseq does not know."""
    problems, archs = [], {}
    for system in systems:
        path = os.path.join(ROOT, system.config)
        if not os.path.isfile(path):
            problems.append(f"{system.config}: config file not found")
            continue
        names, config_errors = config_architectures(path)
        problems += [f"{system.config}: {error}" for error in config_errors]
        if not names:
            problems.append(f"{system.config}: MODEL_ARGS has no --arch")
            continue
        archs[system.config] = names
    if archs:
        import logging

        # fairseq's import announces an optional package it lacks; not this script's business
        logging.getLogger("fairseq.tasks.text_to_speech").setLevel(logging.WARNING)
        from fairseq.models import ARCH_MODEL_REGISTRY

        from .. import models  # noqa: F401  (registers this project's architectures)

        for config, names in archs.items():
            problems += [f"{config}: unknown architecture {arch!r}"
                         for arch in names if arch not in ARCH_MODEL_REGISTRY]
    return problems


# ---------------------------------------------------------------------------------------
# running systems


# What run_system.sh can do after the training (its EVALUATE): decode and score the validation
# split, the test split, score the contrastive sets
EVALUATIONS = ("valid", "test", "consistency", "attention")
FULL_EVALUATION = ("test", "consistency")


def finished(run_dir: str, evaluate: Sequence[str], scoring_consistency: bool, train_args: Sequence[str] = ()) -> bool:
    """Whether a run has finished its training (train.sh's train.done; not one that ``train_args``,
    its fairseq-train arguments, train on: a cap raised above the one it stopped at) and has what
    ``evaluate`` asks of it (consistency only where the corpus has contrastive sets)."""
    outputs = {"valid": ["valid.bleu.json"], "test": ["test.bleu.json"], "consistency": ["consistency.json"],
               "attention": ["attention.json", "attention.last.json"]}
    return os.path.isfile(os.path.join(run_dir, "train.done")) and not trains_further(run_dir, train_args) and \
        all(os.path.isfile(os.path.join(run_dir, output)) for step in evaluate
            if step != "consistency" or scoring_consistency for output in outputs[step])


Request = Tuple[System, Tuple[str, ...]]  # a system, and what to evaluate after its training (EVALUATIONS)


class _Task:
    def __init__(self, system: System, evaluate: Sequence[str]):
        self.system, self.evaluate = system, set(evaluate)

    @property
    def key(self) -> str:
        return self.system.key

    def ordered(self) -> List[str]:
        return [step for step in EVALUATIONS if step in self.evaluate]


def descendants(pid: int) -> List[int]:
    """The processes below ``pid`` (children, theirs, ...), read from /proc; [] where there is none."""
    parents: Dict[int, List[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as handle:
                ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # ended meanwhile
        parents.setdefault(ppid, []).append(int(entry))
    found, queue = [], [pid]
    while queue:
        for child in parents.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found


def pause(processes: Sequence[subprocess.Popen]) -> List[int]:
    """Stop (SIGSTOP) each process and everything below it: the top first, so that it starts
    nothing new, then what is below until no new process appears; the pids stopped."""
    stopped: List[int] = []
    for process in processes:
        if process.poll() is not None:
            continue
        tree = [process.pid]
        while tree:
            for pid in tree:
                try:
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append(pid)
                except ProcessLookupError:
                    pass
            tree = [pid for pid in descendants(process.pid) if pid not in stopped]
    return stopped


def resume(pids: Sequence[int]) -> None:
    """Continue (SIGCONT) what :func:`pause` stopped."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def _exit_on_signal(number, frame):
    raise SystemExit(128 + number)


@contextlib.contextmanager
def paused(processes: Sequence[subprocess.Popen]) -> Iterator[None]:
    """``processes`` and what they started stopped (:func:`pause`) while the block runs, and
    continued after it, however it ends: a SIGTERM meanwhile ends this process through the
    continuing (a stopped process would keep its group's SIGTERM pending and never end)."""
    terminate = signal.signal(signal.SIGTERM, _exit_on_signal)
    stopped = pause(processes)
    try:
        yield
    finally:
        resume(stopped)
        signal.signal(signal.SIGTERM, terminate)


def run_systems(requests: Sequence[Request], data: str, runs: str, jobs: int,
                arguments: Callable[[System], Sequence[str]], more: Optional[Callable[[], List[Request]]] = None,
                priority: Callable[[System], tuple] = lambda system: (), gpus: int = 0,
                alone_after: Optional[Callable[[System], None]] = None) -> None:
    """Train, decode and score systems (scripts/run_system.sh), ``jobs`` at a time, each with
    its extra fairseq-train ``arguments(system)``, then evaluated as requested for it (any of
    ``EVALUATIONS``: a system of Figure 3 alone needs no test decoding, a setting of Table 1's
    search its validation split only).

    ``more()``, called at the start and whenever a run ends, may request further runs (Table
    1's search requests each system's seeds once it has chosen its setting). A system requested
    twice before it starts runs once for both requests; one run of a system at a time. A
    fine-tuned system starts once the system it starts from has finished. Lowest ``priority``
    first, then in the order requested. Prints a line per start and finish; raises DataError
    listing the failures at the end. ``gpus`` > 1: each run gets a GPU no other run holds
    (``CUDA_VISIBLE_DEVICES``), or waits for one. ``alone_after(system)`` is called when a run
    has finished, with the other runs paused (:func:`pause`), so that what it does (decoding
    timed alone) runs alone; they go on afterwards, whatever it raises."""
    scoring_consistency = os.path.isdir(os.path.join(data, "consistency"))
    requested: Dict[str, set] = {}
    systems: Dict[str, System] = {}
    pending: List[_Task] = []
    running: Dict[str, Tuple[subprocess.Popen, float, object, _Task]] = {}
    gpu_of: Dict[str, int] = {}  # the GPU of each running system (gpus > 1)
    failed: Dict[str, str] = {}
    counts = {"started": 0, "done": 0}
    os.makedirs(runs, exist_ok=True)
    begun = time.monotonic()

    def add(new: Sequence[Request]) -> None:
        for system, evaluate in new:
            unknown = set(evaluate) - set(EVALUATIONS)
            if unknown:
                raise ValueError(f"{system.key}: cannot evaluate {sorted(unknown)}")
            first = system.key not in requested  # a first request trains, whatever it evaluates
            missing = set(evaluate) - requested.setdefault(system.key, set())
            if not missing and not first:
                continue
            requested[system.key] |= missing
            systems.setdefault(system.key, system)
            waiting = next((task for task in pending if task.key == system.key), None)
            if waiting is not None:
                waiting.evaluate |= missing
            else:
                pending.append(_Task(system, missing))

    def unfinished(key: str) -> bool:
        return key in running or any(task.key == key for task in pending)

    add(requests)
    if more is not None:
        add(more())
    while pending or running:
        for key, (process, start, handle, task) in list(running.items()):
            if process.poll() is None:
                continue
            handle.close()
            del running[key]
            gpu_of.pop(key, None)
            log_path = os.path.join(runs, f"{key}.log")
            if process.returncode == 0:
                counts["done"] += 1
                log(f"finished {key} in {time.monotonic() - start:.0f} s ({counts['done']} runs done, "
                    f"{len(pending) + len(running)} waiting or running, {time.monotonic() - begun:.0f} s so far)")
                if alone_after is not None:
                    with paused([entry[0] for entry in running.values()]):
                        try:
                            alone_after(task.system)
                        except DataError as error:  # the run stands; what follows it is redone at the end
                            log(f"after {key}: {error}")
            else:
                with open(log_path, encoding="utf-8", errors="replace") as f:
                    tail = "".join(f.readlines()[-12:])
                failed[key] = log_path
                log(f"FAILED {key} (exit {process.returncode}); the end of {log_path}:\n{tail}")
            if more is not None:
                add(more())
        pending.sort(key=lambda task: priority(task.system))  # stable: the order requested within a priority
        for task in list(pending):
            if len(running) >= jobs or (gpus > 1 and len(gpu_of) >= gpus):
                break
            system = task.system
            if system.key in running:
                continue
            parent = systems.get(system.starts_from) if system.starts_from else None
            if parent is not None:
                if parent.key in failed:
                    failed[system.key] = f"starts from {parent.key}, which failed"
                    pending.remove(task)
                    log(f"skipped {system.key}: it starts from {parent.key}, which failed")
                    continue
                if unfinished(parent.key):
                    continue
            pending.remove(task)
            run_dir = os.path.join(runs, system.key)
            evaluate = task.ordered()
            if finished(run_dir, evaluate, scoring_consistency, arguments(system)):
                log(f"{system.key}: finished earlier (OUT/runs/{system.key}), skipped")
                if more is not None:
                    add(more())
                continue
            counts["started"] += 1
            system_env = dict(os.environ, OMP_NUM_THREADS="1", EVALUATE=" ".join(evaluate))
            if gpus > 1:
                gpu_of[system.key] = min(set(range(gpus)) - set(gpu_of.values()))
                system_env["CUDA_VISIBLE_DEVICES"] = str(gpu_of[system.key])
            if parent is not None:  # main() checked that every starts_from is in the plan
                system_env["MEMORY_PRETRAINED"] = os.path.join(runs, parent.key, "checkpoint_best.pt")
            command = [os.path.join(ROOT, "scripts", "run_system.sh"), os.path.join(ROOT, system.config), data,
                       run_dir, *arguments(system)]
            handle = open(os.path.join(runs, f"{system.key}.log"), "a", encoding="utf-8")
            handle.write(f"\n# {time.strftime('%Y-%m-%d %H:%M:%S')} EVALUATE='{' '.join(evaluate)}' "
                         f"{shlex.join(command)}\n")
            handle.flush()
            process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=system_env)
            running[system.key] = (process, time.monotonic(), handle, task)
            log(f"started {system.key} [{counts['started']}] (then: {', '.join(evaluate) or 'nothing'}; progress: "
                f"tail -f {runs}/{system.key}.log)")
        if running:
            time.sleep(1.0)
    if failed:
        raise DataError("systems failed: " + "; ".join(f"{k} ({v})" for k, v in failed.items()))


# ---------------------------------------------------------------------------------------
# where a reproduction stands


def validation_curve(run_dir: str) -> Tuple[List[Tuple[int, float]], str]:
    """A run's validation curve and what it measures: s-BLEU where it validates on BLEU, else loss."""
    from .tables import learning_curve

    curve = learning_curve(run_dir, "bleu")
    return (curve, "validation s-BLEU") if curve else (learning_curve(run_dir, "loss"), "validation loss")


# a fairseq-train start in a run's train.log (its configuration, with max_update), a timed line, a progress line
TRAIN_START = "| fairseq_cli.train | {"
MAX_UPDATE = re.compile(r"'max_update': (\d+)")
STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) \|")


def training_pace(run_dir: str, now: Optional[float] = None) -> Optional[str]:
    """Where a run in training stands in time, from its train.log: when it last logged, its pace
    since it last started (seconds an update between its first and last progress lines since then,
    validations and checkpoints included: a gap while it was stopped is not counted) and, with a
    last update set, about how long until it. None before two progress lines of one start."""
    import datetime

    path = os.path.join(run_dir, "train.log")
    if not os.path.isfile(path):
        return None
    points, last_stamp, max_update = [], None, None
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            stamp = STAMP.match(line)
            if not stamp:
                continue
            when = datetime.datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S").timestamp()
            last_stamp = when
            if TRAIN_START in line:
                points, found = [], MAX_UPDATE.search(line)
                max_update = int(found.group(1)) if found else None
            elif "| train_inner |" in line:
                found = UPDATES.findall(line)
                if found:
                    points.append((when, int(found[-1])))
    if len(points) < 2 or points[-1][1] <= points[0][1]:
        return None
    pace = (points[-1][0] - points[0][0]) / (points[-1][1] - points[0][1])
    ago = ((time.time() if now is None else now) - last_stamp) / 60
    text = (f"last logged {time.strftime('%H:%M', time.localtime(last_stamp))} ({ago:.0f} min ago); "
            f"{pace:.2f} s an update since its last start")
    if max_update and max_update > points[-1][1]:
        text += f": about {(max_update - points[-1][1]) * pace / 3600:.1f} hours to update {max_update}"
    return text


def run_status(run_dir: str, first_stage: bool = False) -> str:
    """One run's state from its files: not started, training (updates so far, its validation
    s-BLEU, or loss, and :func:`training_pace`), or finished (where it stopped and why, whether its
    test split is scored; a ``first_stage``, which another run is fine-tuned from, is not scored)."""
    from .convergence import stopped_early
    from .tables import trained_updates

    if not os.path.isfile(os.path.join(run_dir, "train.log")):
        return "not started"
    updates = trained_updates(run_dir)
    curve, metric = validation_curve(run_dir)
    if curve:
        best = (max if metric.endswith("BLEU") else min)(score for _, score in curve)
        best_update = max(u for u, score in curve if score == best)
        figures = f"{metric} {curve[-1][1]:.2f} at {curve[-1][0]}, best {best:.2f} at {best_update}"
    else:
        figures = "no validation yet"
    if not os.path.isfile(os.path.join(run_dir, "train.done")):
        pace = training_pace(run_dir)
        return f"training: {updates or 0} updates; {figures}" + (f"; {pace}" if pace else "")
    how = "stopped on its patience" if stopped_early(run_dir) else "stopped at its last update"
    scored = "a first stage, not scored" if first_stage else \
        "scored" if os.path.isfile(os.path.join(run_dir, "test.bleu.json")) else "not scored yet"
    return f"trained: {how}, {updates} updates; {figures}; {scored}"


def run_curve(run_dir: str) -> Optional[str]:
    """A run's whole validation curve on one line, each point's update, its epochs in brackets (where
    the log says how long an epoch is) and its score: how runs of different window sizes, whose
    epochs differ in updates, compare per pass over the data. Where the score is s-BLEU, each
    point's validation NLL (fairseq's ``nll_loss``, bits a token) follows it: a loss still falling
    where the s-BLEU has levelled off is a run still learning. None before the first validation."""
    from .tables import learning_curve, updates_per_epoch

    curve, metric = validation_curve(run_dir)
    if not curve:
        return None
    epoch = updates_per_epoch(run_dir)
    losses = dict(learning_curve(run_dir, "nll_loss")) if metric.endswith("BLEU") else {}
    points = [f"{updates}{f' ({updates / epoch:.1f})' if epoch else ''} {score:.2f}"
              f"{f' / {losses[updates]:.3f}' if updates in losses else ''}" for updates, score in curve]
    epochs = f" (epochs: {epoch} updates each)" if epoch else ""
    return f"{metric}{' / NLL' if losses else ''} at update{epochs}: " + ", ".join(points)


def print_status(runs: str, systems: Sequence[System], kept: Sequence[str] = (),
                 curves: bool = False) -> Dict[str, str]:
    """Each run of ``systems`` (and any other run under ``runs``: Table 1's search settings) with
    :func:`run_status`, and a count; {run: state}. A run that ``runs`` has not finished but that
    is among the ``kept`` ones (--keep) is said to be kept: the next run of the command restores it.
    ``curves``: each run's validation curve under its line (:func:`run_curve`)."""
    keys = [system.key for system in systems]
    if os.path.isdir(runs):
        keys += sorted(name for name in os.listdir(runs)
                       if os.path.isdir(os.path.join(runs, name)) and name not in keys
                       and not name.endswith(".restoring") and ".replaced-" not in name)
    first_stages = {system.starts_from for system in systems if system.starts_from}
    states = {key: run_status(os.path.join(runs, key), key in first_stages) for key in keys}
    for key in kept:
        if key in states and not states[key].startswith("trained"):
            states[key] = "trained, kept (--keep): the next run of this command restores it"
    counts = {label: sum(state.startswith(label) for state in states.values())
              for label in ("trained", "training", "not started")}
    print(f"{runs}: {len(states)} runs: {counts['trained']} trained, {counts['training']} training or "
          f"interrupted, {counts['not started']} not started")
    width = max((len(key) for key in states), default=0)
    for key, state in states.items():
        print(f"  {key:{width}s}  {state}")
        curve = run_curve(os.path.join(runs, key)) if curves else None
        if curve:
            print(f"  {'':{width}s}    {curve}")
    return states


# ---------------------------------------------------------------------------------------
# decoding speed, measured alone

ALONE = "decoded-alone"  # a run's folder for its test split decoded again alone: OUT/runs/KEY/ALONE/test.*


def decode_alone(systems: Sequence[System], data: str, runs: str) -> None:
    """Decode each system's test split once more (scripts/decode.sh into RUN/decoded-alone/), one
    system at a time while nothing else of the experiment runs, with one torch thread as the runs
    train: the decoding a run did for its scores shared the machine with another run's training
    (and with whatever else ran then), so its speed does not compare between rows; these do.
    Skipped where the run's current checkpoint_best.pt was decoded so before, and where a run
    restored without checkpoints (keep.py) was; a run with neither its checkpoint nor a timing
    keeps the speed of its own decoding, which the table marks."""
    todo = []
    for system in systems:
        run_dir = os.path.join(runs, system.key)
        checkpoint = os.path.join(run_dir, "checkpoint_best.pt")
        done = os.path.join(run_dir, ALONE, "test.decode.json")
        if not os.path.isfile(checkpoint):
            if not os.path.isfile(os.path.join(run_dir, "train.done")):
                raise DataError(f"{system.key}: no checkpoint_best.pt in {run_dir} to time its decoding")
            if not os.path.isfile(done):
                log(f"decoding speed: {system.key} has no checkpoint left to time alone (restored from what was "
                    "kept of it): its own decoding's speed stands, marked")
            continue
        if not os.path.isfile(done) or os.path.getmtime(done) < os.path.getmtime(checkpoint):
            todo.append((system, run_dir, checkpoint))
    for count, (system, run_dir, checkpoint) in enumerate(todo, 1):
        log(f"decoding speed: {system.key}'s test split decoded alone ({count} of {len(todo)}; log: "
            f"{run_dir}/{ALONE}.log)")
        os.makedirs(os.path.join(run_dir, ALONE), exist_ok=True)
        command = [os.path.join(ROOT, "scripts", "decode.sh"), os.path.join(ROOT, system.config), data, checkpoint,
                   os.path.join(run_dir, ALONE, "test")]
        with open(os.path.join(run_dir, f"{ALONE}.log"), "w", encoding="utf-8") as handle:
            done = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT,
                                  env=dict(os.environ, OMP_NUM_THREADS="1", SPLIT="test"))
        if done.returncode != 0:
            raise DataError(f"{system.key}: decoding its test split alone failed; see {run_dir}/{ALONE}.log")


# ---------------------------------------------------------------------------------------
# benchmarks


def run_benchmark(kind: str, out: str, corpus_data: str, smoke: bool) -> dict:
    """The experiment's benchmark (skipped when its JSON exists): decode_speed or training_memory."""
    bench_dir = os.path.join(out, "bench")
    os.makedirs(bench_dir, exist_ok=True)
    path = os.path.join(bench_dir, f"{kind}.json")
    if os.path.isfile(path):
        log(f"{kind}: measured earlier ({path}), not re-run")
        return read_json(path)
    python = sys.executable
    if kind == "decode_speed":
        settings = ["--window-sizes", "1,2", "--batch-scale", "0.004", "--batches", "1"] if smoke else \
            ["--batch-scale", str(1 / 32), "--batches", "1"]
        command = [python, "-m", "rfa_doc_mt.bench.decode_speed", "run", "--data", corpus_data, "--out", path,
                   "--threads", "1", *settings]
        plot = [python, "-m", "rfa_doc_mt.bench.decode_speed", "plot", path, "--out",
                os.path.join(out, "rfa_figure4.png")]
    else:
        # a smoke run measures the attentions its LSH table trains (the measurement is the same for each)
        settings = ["--quick", "--context-sizes", "0,3", "--attentions", "full,self-cross"] if smoke else \
            ["--tokens", "3133"]
        command = [python, "-m", "rfa_doc_mt.bench.training_memory", "run", "--out", path, "--threads", "1",
                   *settings]
        plot = [python, "-m", "rfa_doc_mt.bench.training_memory", "plot", path, "--out",
                os.path.join(out, "lsh_table2_memory.png")]
    log(f"{kind}: {shlex.join(command)} (log: {bench_dir}/{kind}.log)")
    # this checkout first on the benchmark's path, the caller's path after it
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [ROOT] + [path for path in os.environ.get("PYTHONPATH", "").split(os.pathsep) if path]))
    with open(os.path.join(bench_dir, f"{kind}.log"), "w", encoding="utf-8") as handle:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                                   env=environment)
        for line in process.stdout:  # progress: the benchmark's own per-setting lines, not fairseq's logging
            handle.write(line)
            handle.flush()
            if line.strip() and not line.startswith(("INFO:", "WARNING:", "  warnings.warn", "/")):
                log(f"{kind}: {line.strip()}")
        if process.wait() != 0:
            raise DataError(f"{kind} benchmark failed; see {bench_dir}/{kind}.log")
    subprocess.run(plot, check=True, capture_output=True, cwd=ROOT, env=environment)
    return read_json(path)


def speed_corpus(out: str, corpus: str, data: Optional[str], smoke: bool, embedded_data: str) -> str:
    """Source text for the decode-speed benchmark: the given corpus; on the embedded setting the
    IWSLT15 test talks of ../shared/data when present (long documents, as the paper's L = 15
    needs), else the synthetic corpus (whose documents are shorter: the JSON says so)."""
    if corpus != EMBEDDED:
        return data
    if os.path.isdir(SHARED_WIT3) and not smoke:
        target = os.path.join(out, "iwslt15")
        if not os.path.isfile(os.path.join(target, "prep.json")):
            log(f"preparing the IWSLT15 test talks -> {target}")
            subprocess.run([os.path.join(ROOT, "scripts", "prepare_iwslt15.sh"), "--wit3-dir", SHARED_WIT3,
                            "--out", target], check=True, stdout=subprocess.DEVNULL)
        return target
    return embedded_data


def prepare_embedded(out: str, smoke: bool, name: str = "data", converged: bool = False) -> str:
    """OUT/``name``: the generated corpus of that name (EMBEDDED_CORPORA), written on first use.
    One OUT holds runs of one kind (smoke or full, a fixed budget or the convergence budget): the
    runs of another would train on from checkpoints of other settings."""
    data = os.path.join(out, name)
    marker = os.path.join(out, "reproduce.json")
    mode = ("smoke" if smoke else "full") + (" converged" if converged else "")
    if os.path.isfile(marker):
        earlier = read_json(marker).get("mode")
        if earlier != mode:
            raise DataError(f"{out} holds a {earlier} run; a {mode} run needs another --out")
    else:
        os.makedirs(out, exist_ok=True)
        with atomic_write(marker) as handle:
            json.dump({"mode": mode}, handle)
    if not os.path.isfile(os.path.join(data, "prep.json")):
        full, smoke_settings = EMBEDDED_CORPORA[name]
        settings = smoke_settings if smoke else full
        log(f"embedded synthetic corpus -> {data}" + (f" ({' '.join(settings)})" if settings else ""))
        done = subprocess.run([os.path.join(ROOT, "scripts", "prepare_synthetic.sh"), "--out", data, *settings],
                              stdout=subprocess.DEVNULL)
        if done.returncode != 0:
            raise DataError(f"preparing the embedded corpus into {data} failed (its errors are above)")
    return data
