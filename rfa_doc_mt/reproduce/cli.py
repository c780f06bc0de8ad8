"""``python -m rfa_doc_mt.reproduce``: the command line, and the tables written with their
machine and command."""

import argparse
import os
import shlex
import sys
import time
from dataclasses import replace
from typing import Dict, List, Optional, Tuple

from ..data.io import DataError, atomic_write
from ..provenance import commit_info, machine_info, write_json
from . import __doc__ as PACKAGE_DOC
from .convergence import capped_runs_note, run_convergence, stopping_rules_note
from .experiments import EXPERIMENTS, budget_note, embedded_train_args, print_list, systems_to_train
from .keep import keep_run, kept_runs, restore_runs
from .papers import (
    BIBLE,
    CONTEXT_LENGTH_BUDGET,
    DEFAULT_CONVERGENCE,
    DEFAULT_SEEDS,
    EMBEDDED,
    FULL_BUDGET,
    ROOT,
    SMOKE_BATCH_ARGS,
    SMOKE_BLEU_BUDGET,
    SMOKE_CONVERGENCE,
    SMOKE_SEEDS,
    SMOKE_TRAIN_ARGS,
    TABLE1_BUDGET,
    Experiment,
    System,
    row_seed,
)
from .running import (
    config_context_size,
    config_problems,
    data_problems,
    decode_alone,
    finished,
    log,
    prepare_embedded,
    print_status,
    run_benchmark,
    run_systems,
    speed_corpus,
)
from .search import CHOSEN_PLAN, FULL_PLAN, SMOKE_PLAN, SMOKE_SEEDED_ROWS, Table1Search
from .tables import bleu_curves_plot, curves_plot, system_results


def parse_row_seeds(text: str) -> Dict[str, int]:
    """``--row-seeds``: "ROW=N,ROW=N" → {row: N}, every N at least 1."""
    seeds = {}
    for item in text.split(","):
        row, equals, count = item.strip().partition("=")
        if not equals or not row or not count.strip().isdigit() or int(count) < 1:
            raise ValueError(f"--row-seeds: {item.strip()!r} is not ROW=N with N at least 1")
        seeds[row.strip()] = int(count)
    return seeds


class Context:
    """What a table function reads: the systems (row id, System), their results, the benchmark;
    for a table of several seeds, ``seeds`` (row id → [(seed, System)]), the ``search`` that
    chose them and the ``runs`` directory (their outputs, compared between systems)."""

    def __init__(self, systems, results, bench, png_path, seeds=None, search=None, runs=None):
        self.systems, self.results, self.bench, self.png_path = systems, results, bench, png_path
        self.seeds: Dict[str, List[Tuple[int, System]]] = seeds or {row: [(1, system)] for row, system in systems}
        self.search: Optional[Table1Search] = search
        self.runs = runs
        self.notes: List[str] = []
        self.plot: Optional[str] = None
        self.curves: Optional[str] = None
        self.extra: dict = {}  # more top-level entries of the JSON
        self.converged = False  # under the convergence budget: each result has its "convergence"


def write_outputs(experiment: Experiment, out: str, corpus: str, context: Context, table: str, rows: list,
                  command: str, bleu_signature: Optional[str]) -> str:
    if experiment.benchmark == "decode_speed":
        corpus_label = "randomly initialised paper-size models (speed only: nothing is trained; the source text " \
            "is named below)"
    elif corpus == EMBEDDED and experiment.embedded_data == "data-long-range":
        corpus_label = ("the embedded long-range corpus (synthetic, antecedents 1-14 sentences back; not the paper's "
                        "data: compare trends, not values)")
    elif corpus == EMBEDDED:
        corpus_label = "the embedded synthetic corpus (not the paper's data: compare trends, not values)"
    elif corpus == BIBLE:
        corpus_label = ("the Bible, English to Spanish (real text: the World English Bible and Reina-Valera 1909, a "
                        "chapter a document; docs/data.md)")
    else:
        corpus_label = f"corpus {corpus}"
    machine = machine_info("cpu")
    notes = list(context.notes)
    if bleu_signature:
        notes.append(f"BLEU: sacrebleu `{bleu_signature}`; s-BLEU over sentences, d-BLEU over documents.")
    header = (f"## {experiment.title}\n\nOurs: {corpus_label}. Command: `{command}`. "
              f"Machine: {machine.get('cpu', '?')}, {machine['cpu_count']} cores, torch {machine['torch']}.\n")
    text = header + "\n" + table + "\n" + "".join(f"\n{note}\n" for note in notes)
    with atomic_write(os.path.join(out, f"{experiment.name}.md")) as handle:
        handle.write(text)
    write_json({"experiment": experiment.name, "title": experiment.title, "paper": experiment.paper,
                "corpus": corpus, "command": command, "machine": machine, "commit": commit_info(),
                "rows": rows, "notes": notes, "plot": context.plot, "curves_plot": context.curves,
                "curves": {system.key: context.results[system.key]["curve"] for _, system in context.systems},
                "valid_bleu_curves": {key: result["convergence"]["curve"] for key, result in context.results.items()
                                      if result.get("convergence")},
                "stage1_curves": {system.starts_from: context.results[system.key]["stage1_curve"]
                                  for _, system in context.systems if system.starts_from}, **context.extra},
               os.path.join(out, f"{experiment.name}.json"))
    return text


def static_requests(plan, searched: bool) -> Tuple[List[System], Dict[str, set]]:
    """The systems the experiments' rows train (Table 1's left to its search when ``searched``)
    and what each must be evaluated for: what the tables that show it read (Figure 3 reads
    consistency only), nothing for a system only started from (the memory model's stage 1)."""
    static = [(experiment, system) for experiment, rows in plan if not (searched and experiment.searches)
              for _, system in rows]
    systems = systems_to_train(("", system) for _, system in static)
    evaluate: Dict[str, set] = {system.key: set() for system in systems}
    for experiment, system in static:
        evaluate[system.key].update(experiment.evaluates)
    return systems, evaluate


def share_identical_runs(systems: List[System], train_args, runs: str, evaluate: Dict[str, set]) -> List[System]:
    """Systems trained from the same config with the same arguments are one run: the later ones
    become links to the first's run directory (in a smoke run the memory model's stage 1 is the
    L=1 transformer), their evaluations its, the systems started from them start from it."""
    first: Dict[tuple, System] = {}
    alias: Dict[str, str] = {}
    for system in sorted(systems, key=lambda s: not evaluate[s.key]):  # a table's run first, then a stage 1
        signature = (system.config, tuple(train_args(system)), system.starts_from)
        path = os.path.join(runs, system.key)
        own_run = os.path.isdir(path) and not os.path.islink(path)  # trained on its own earlier: kept
        if signature in first and not own_run:
            alias[system.key] = first[signature].key
        else:
            first.setdefault(signature, system)
    kept = []
    for system in systems:
        if system.key in alias:
            target = alias[system.key]
            evaluate[target] |= evaluate.pop(system.key)
            os.makedirs(runs, exist_ok=True)
            link = os.path.join(runs, system.key)
            if not os.path.islink(link):
                os.symlink(target, link)
            log(f"{system.key}: the same training as {target}, shares its run")
            continue
        if system.starts_from in alias:
            system = replace(system, starts_from=alias[system.starts_from])
        kept.append(system)
    return kept


def full_budget(experiment: str) -> int:
    """Updates per system on the embedded corpus without --budget: the experiment's own; `all`
    shares systems between the tables, so each of them trains FULL_BUDGET."""
    return FULL_BUDGET if experiment == "all" else EXPERIMENTS[experiment].budget


def gpu_count() -> int:
    """GPUs torch sees (0 without CUDA), asked in a child process: this command imports no torch.
    A machine without a GPU driver's device files (NVIDIA's /dev/nvidia0..., AMD's /dev/kfd) has
    none, and is not asked (a torch import, seconds)."""
    import glob
    import subprocess

    if not glob.glob("/dev/nvidia[0-9]*") and not os.path.exists("/dev/kfd"):
        return 0
    done = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                          capture_output=True, text=True)
    return int(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip().isdigit() else 0


def bleu_budget(args, experiments: List[Experiment]):
    """Without --converge: the fixed budget validated on s-BLEU of experiments that have one (the
    diagnosis; a smoke run's own), else None (the fixed budget validated on loss)."""
    if not experiments or any(e.bleu_budget is None for e in experiments):
        return None
    return SMOKE_BLEU_BUDGET if args.smoke else experiments[0].bleu_budget


def group_convergence(args, experiments: List[Experiment]):
    """The convergence budget of experiments that share a corpus (and so their runs): the first
    one's that has its own (else the default; a smoke run's own), with the command line's changes."""
    convergence = SMOKE_CONVERGENCE if args.smoke else \
        next((e.convergence for e in experiments if e.convergence is not None), DEFAULT_CONVERGENCE)
    changes = {name: value for name, value in (("interval", args.validate_every), ("patience", args.patience),
                                               ("cap", args.cap), ("min_gain", args.min_gain)) if value is not None}
    return replace(convergence, **changes)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=PACKAGE_DOC.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=PACKAGE_DOC)
    parser.add_argument("experiment", nargs="?", help="one of: " + ", ".join(list(EXPERIMENTS) + ["all"]))
    parser.add_argument("--out", default=os.path.join(ROOT, "work", "reproduce"),
                        help="results directory (default: work/reproduce; re-running resumes there)")
    parser.add_argument("--corpus", default=EMBEDDED, help="embedded (default) or a real corpus (see --list)")
    parser.add_argument("--data", help="prepared corpus directory (required with a real --corpus)")
    parser.add_argument("--jobs", type=int,
                        help="systems trained at once (default: one per GPU, each on its own, where torch sees "
                             "GPUs; else one per CPU core, one torch thread each)")
    parser.add_argument("--smoke", action="store_true", help="tiny corpus, 3 updates, tiny benchmarks: a test run")
    parser.add_argument("--budget", type=int,
                        help=f"updates per system on the embedded corpus (default {FULL_BUDGET}, the full run; "
                             f"rfa_table1 alone: {TABLE1_BUDGET}, for its 25 runs; context_length alone: "
                             f"{CONTEXT_LENGTH_BUDGET}; fewer make a shorter run whose "
                             "tables say so)")
    parser.add_argument("--converge", action="store_true",
                        help="embedded corpus: train every run until its validation s-BLEU stops improving (the "
                             "convergence budget: validated every --validate-every updates, stopped after --patience "
                             "validations without a higher score or at --cap updates; each experiment's defaults "
                             "in --list), instead of a fixed number of updates; Table 1 trains the settings its "
                             "search chose, the context-length experiment L = 4 and 15 and the memory model")
    parser.add_argument("--validate-every", type=int, help="with --converge: updates between validations")
    parser.add_argument("--patience", type=int,
                        help="with --converge: validations without a higher validation s-BLEU before a run stops")
    parser.add_argument("--cap", type=int, help="with --converge: the most updates a run trains")
    parser.add_argument("--min-gain", type=float,
                        help="with --converge: the validation s-BLEU a validation must gain over the last one that "
                             "reset the patience to reset it (0: any gain; fairseq-train's --patience-min-gain)")
    parser.add_argument("--seeds", type=int,
                        help=f"Table 1 (rfa_table1) on the embedded corpus: seeds each system's chosen setting "
                             f"trains with, seed 1 being its search run (default {DEFAULT_SEEDS}; with --smoke "
                             f"{SMOKE_SEEDS} for the L=1 rows, 1 for the others): the table gives their mean and "
                             "standard deviation and compares each seed with the transformer's of the same seed")
    parser.add_argument("--row-seeds", metavar="ROW=N[,ROW=N...]",
                        help="with --converge: the seeds these rows train with, in place of the experiment's own "
                             "(a third seed where two disagree: transformer_L15=3,long_short_L15=3; the rows: "
                             "--list --converge); a row compared with the transformer needs the transformer's "
                             "seeds too")
    parser.add_argument("--rows", metavar="ROW[,ROW...]", type=lambda text: [r for r in text.split(",") if r],
                        help="train and tabulate only these rows of the experiment (their seeds too; ROW_seedN: "
                             "that seed alone, with --converge; the rows: --list; Table 1: with --converge), e.g. to "
                             "run part of a long experiment first")
    parser.add_argument("--keep", metavar="DIR",
                        help="keep each finished run's files, checkpoints left out, in DIR/RUN.tar.xz (after timing "
                             "its decoding alone, the other runs paused), and restore into OUT the runs kept there "
                             "that OUT lacks: the same command resumes on a machine that lost OUT, training only "
                             "what is left (commit DIR, or copy it away)")
    parser.add_argument("--status", action="store_true",
                        help="where a reproduction in --out stands: each run trained, training (or interrupted) or "
                             "not started, with its updates and validation scores, and for a run in training when it "
                             "last logged, its pace and the hours left to its last update; trains nothing")
    parser.add_argument("--curves", action="store_true",
                        help="with --status: each run's whole validation curve too, every point with its epochs")
    parser.add_argument("--list", action="store_true",
                        help="list experiments, corpora and systems (Table 1's search and seeds), then exit")
    args = parser.parse_args(argv)
    if args.budget is not None and args.budget < 1:
        parser.error("--budget must be at least 1")
    if args.seeds is not None and args.seeds < 1:
        parser.error("--seeds must be at least 1")
    seeds = args.seeds if args.seeds is not None else SMOKE_SEEDS if args.smoke else DEFAULT_SEEDS
    for name in ("validate_every", "patience", "cap"):
        value = getattr(args, name)
        if value is not None and (value < 1 or not args.converge):
            parser.error(f"--{name.replace('_', '-')} goes with --converge and must be at least 1")
    if args.min_gain is not None and (args.min_gain < 0 or not args.converge):
        parser.error("--min-gain goes with --converge and must be at least 0")
    try:
        args.row_seeds = parse_row_seeds(args.row_seeds) if args.row_seeds else None
    except ValueError as error:
        parser.error(str(error))
    if args.row_seeds and not args.converge:
        parser.error("--row-seeds goes with --converge")
    if args.converge and args.budget is not None:
        parser.error("--budget and --converge are two budgets: give one")
    if args.list:
        print_list(args.budget, seeds, CHOSEN_PLAN if args.converge else SMOKE_PLAN if args.smoke else FULL_PLAN,
                   converge=args.converge)
        return 0
    if args.experiment not in list(EXPERIMENTS) + ["all"]:
        parser.error(f"experiment must be one of {', '.join(list(EXPERIMENTS) + ['all'])}, got {args.experiment!r}")
    args.full_budget = full_budget(args.experiment)
    if args.budget is None:
        args.budget = args.full_budget
    args.gpus = gpu_count()
    if args.jobs is None:
        args.jobs = args.gpus or os.cpu_count() or 1
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    if args.seeds is not None and args.corpus != EMBEDDED:
        parser.error("--seeds goes with the embedded corpus (a real corpus trains each paper config once)")
    experiments = [e for e in EXPERIMENTS.values() if e.in_all] if args.experiment == "all" else \
        [EXPERIMENTS[args.experiment]]
    if args.rows:
        if args.experiment == "all":
            parser.error("--rows goes with one experiment, not `all`")
        if any(e.searches for e in experiments) and not args.converge:
            # the search chooses some rows' settings from others' (RFA L = 4's); at convergence each row
            # trains the setting chosen before, on its own
            parser.error("--rows goes with Table 1 only with --converge (its search chooses rows' settings from "
                         "other rows')")
        known = {row_id for row_id, _ in experiments[0].systems(args.corpus)}
        unknown = sorted(name for name in args.rows if row_seed(name)[0] not in known)
        if unknown:
            parser.error(f"--rows: no row {', '.join(unknown)} in {args.experiment} (its rows: {', '.join(known)})")
        one_seed = [name for name in args.rows if row_seed(name)[0] != name]
        if one_seed and not args.converge:
            parser.error(f"--rows {one_seed[0]}: one seed of a row goes with --converge")
        if one_seed and any(e.searches for e in experiments):
            parser.error(f"--rows {one_seed[0]}: Table 1's seeds are its search's (--seeds), each row with all of them")
        seeded = {row_id for row_id, _ in experiments[0].rows(args.corpus, converged=True,
                                                               row_seeds=args.row_seeds)}
        beyond = [name for name in one_seed if "{}_seed{}".format(*row_seed(name)) not in seeded
                  and row_seed(name)[1] != 1]
        if beyond:
            parser.error(f"--rows {beyond[0]}: the row trains fewer seeds (give it more with --row-seeds)")
    if args.row_seeds:
        if any(e.searches for e in experiments):
            parser.error("--row-seeds: Table 1's seeds are its search's (--seeds)")
        known = {row_id for e in experiments for row_id, _ in e.rows(args.corpus, converged=True)}
        unknown = sorted(set(args.row_seeds) - known)
        if unknown:
            parser.error(f"--row-seeds: no row {', '.join(unknown)} in {args.experiment} at convergence (the rows: "
                         "--list --converge)")
    if args.experiment == "all" and args.corpus != EMBEDDED:
        parser.error("`all` runs on the embedded corpus; run each experiment with its own --corpus and --data")
    if args.corpus != EMBEDDED and not args.data:
        parser.error(f"--corpus {args.corpus} needs --data DIR (a corpus prepared by scripts/prepare_*.sh)")
    if args.corpus == EMBEDDED and args.data:
        parser.error("--data goes with a real --corpus; the embedded corpus is generated into OUT/data")
    if args.converge and args.corpus != EMBEDDED and not all(args.corpus in e.converges_on for e in experiments):
        parser.error("--converge goes with the embedded corpus (the paper configs stop early on their own)")
    if args.corpus != EMBEDDED and any(args.corpus in e.converges_on for e in experiments) and not args.converge:
        parser.error(f"{args.experiment} trains every run on --corpus {args.corpus} until it stops improving: "
                     "give --converge")
    out = os.path.abspath(args.out)
    if args.curves and not args.status:
        parser.error("--curves goes with --status")
    if args.status:
        plan = []
        for experiment in experiments:
            rows = experiment.rows(args.corpus, args.smoke, args.converge, args.row_seeds, args.rows)
            if experiment.searches and args.converge and args.corpus == EMBEDDED:
                # Table 1 at convergence: each row's chosen setting, with its seeds
                search = Table1Search(rows, CHOSEN_PLAN, seeds, os.path.join(out, "runs"))
                search.requests()
                rows = [(row, system) for row, chosen in search.plans.items() for _, system in chosen.seeds]
            plan += systems_to_train(rows)
        print_status(os.path.join(out, "runs"), list({system.key: system for system in plan}.values()),
                     kept_runs(args.keep), curves=args.curves)
        return 0
    command = "scripts/" + ("reproduce_all.sh" if args.experiment == "all" else f"reproduce_{args.experiment}.sh") \
        + "".join(f" {shlex.quote(a)}" for a in (argv if argv is not None else sys.argv[1:])[1:])
    start = time.monotonic()

    # the experiments of one corpus at a time (on the embedded setting each names the generated
    # corpus it trains on; the runs of all of them go to OUT/runs)
    groups: Dict[str, List[Experiment]] = {}
    for experiment in experiments:
        groups.setdefault(experiment.embedded_data if args.corpus == EMBEDDED else "data", []).append(experiment)
    for data_name, group in groups.items():
        run_experiments(args, group, out, data_name, seeds, command)
    log(f"done in {time.monotonic() - start:.0f} s; tables: " +
        ", ".join(os.path.join(out, f"{e.name}.md") for e in experiments))
    return 0


def run_experiments(args, experiments: List[Experiment], out: str, data_name: str, seeds: int, command: str) -> None:
    """Train, evaluate and tabulate ``experiments``, which share one corpus (--data, or the
    generated OUT/``data_name``)."""
    # 1. what to run: every row's system once; Table 1's search on the embedded corpus adds its
    # settings' runs, then their seeds, as it goes
    plan = [(experiment, experiment.rows(args.corpus, args.smoke, args.converge, args.row_seeds, args.rows))
            for experiment in experiments]
    # experiments on one corpus share runs: they validate as often as the one that asks most
    args.validations = max(experiment.validations for experiment in experiments)
    args.convergence = group_convergence(args, experiments) if args.converge else bleu_budget(args, experiments)
    runs = os.path.join(out, "runs")
    searching = [(experiment, rows) for experiment, rows in plan if experiment.searches and args.corpus == EMBEDDED]
    # a smoke run's extra seed: for the L = 1 rows only, unless --seeds says otherwise
    seeded_rows = SMOKE_SEEDED_ROWS if args.smoke and args.seeds is None else None
    search_plan = CHOSEN_PLAN if args.converge else SMOKE_PLAN if args.smoke else FULL_PLAN
    search = Table1Search(searching[0][1], search_plan, seeds, runs, seeded_rows) if searching else None
    systems, evaluate = static_requests(plan, searched=search is not None)

    # 2. check everything before any long work (the configs where anything is left to train)
    data = os.path.abspath(args.data) if args.data else None
    scored = os.path.isdir(os.path.join(data or os.path.join(out, data_name), "consistency"))
    left = [s.key for s in systems if not finished(os.path.join(runs, s.key), evaluate[s.key], scored)]
    if search:
        left += [s.key for s, done in search.requests() if not finished(os.path.join(runs, s.key), done, scored)]
    problems = config_problems(systems_to_train(row for _, rows in plan for row in rows)) \
        if left or (search and not search.done()) else []
    if data is not None:
        problems += data_problems(data, any(e.needs_consistency for e in experiments if e.systems(args.corpus)),
                                  selects_on_consistency=args.corpus == "opensub-consistency")
    if problems:
        raise DataError("cannot start:\n  " + "\n  ".join(problems))
    if data is None:
        data = prepare_embedded(out, args.smoke, data_name, converged=args.converge)
        problems = data_problems(data, any(e.needs_consistency for e in experiments))
        if problems:
            raise DataError("the embedded corpus is incomplete (delete it to regenerate):\n  " + "\n  ".join(problems))
    if args.keep:
        restored = restore_runs(args.keep, runs, data, log)
        if restored:
            log(f"restored from {args.keep}: {', '.join(restored)}")

    # 3. train, decode and score: the runs others wait for first (the settings of Table 1's search,
    # a fine-tuned system's first stage), fine-tuned ones last; within those, longest first (the
    # widest windows, LSH before the others), so that two runs at a time end together
    waited_for = {system.starts_from for system in systems if system.starts_from}

    # an experiment's own order (Experiment.train_order): what matters most trains first
    ordered = {system.key: order for experiment, rows in plan for row_id, system in rows
               for order in [experiment.train_priority(row_id)] if order is not None}

    def priority(system: System) -> tuple:
        if system.key in ordered:
            return (1, *ordered[system.key])
        first = system.key in waited_for or (search is not None and search.unlocks(system))
        return (0 if first else 2 if system.starts_from else 1, -config_context_size(system.config),
                "lsh" not in system.key)

    def train_args(system: System) -> List[str]:
        if args.corpus != EMBEDDED and not args.converge:
            budget = []
        elif args.convergence is not None:  # a smoke run: its batches, the smoke convergence budget
            budget = embedded_train_args(system, args.budget, convergence=args.convergence)
            if args.smoke:
                budget += SMOKE_BATCH_ARGS
        else:
            budget = SMOKE_TRAIN_ARGS if args.smoke else embedded_train_args(system, args.budget, args.validations)
        return [*budget, *system.overrides]

    systems = share_identical_runs(systems, train_args, runs, evaluate)
    timed_alone = {system.key for experiment, rows in plan if experiment.decodes_alone for _, system in rows}

    def keep(system: System) -> None:
        """--keep: the run, and the first stage it was fine-tuned from (kept once this one is)."""
        if not args.keep or system.key in waited_for:
            return
        for key in [system.key] + ([system.starts_from] if system.starts_from else []):
            if keep_run(os.path.join(runs, key), args.keep, key, data, log=log):
                log(f"kept {key} -> {args.keep}")

    def after_run(system: System) -> None:
        if system.key in timed_alone:
            decode_alone([system], data, runs)
        keep(system)
    if systems or search:
        log(f"{len(systems)} systems" + (" and Table 1's search" if search else "") + f" -> {runs} "
            f"({args.jobs} at a time" + (f"; {args.budget} updates each" if args.corpus == EMBEDDED and not args.smoke
                                         and not args.converge else "") + ")")
        if args.convergence is not None:
            log(f"convergence budget: every run {args.convergence.describe()}")
        run_systems([(system, tuple(sorted(evaluate[system.key]))) for system in systems], data, runs, args.jobs,
                    train_args, more=search.requests if search else None, priority=priority,
                    gpus=args.gpus if args.gpus > 1 else 0,
                    alone_after=after_run if args.keep or timed_alone else None)
    if search and not search.done():
        raise DataError("Table 1's search did not finish: a setting's run has no validation score (see the logs in "
                        f"{runs})")

    # 4. benchmarks, alone on the machine, then the tables
    for experiment, rows in plan:
        bench = None
        if experiment.benchmark == "decode_speed":
            bench = run_benchmark("decode_speed", out, speed_corpus(out, args.corpus, args.data, args.smoke, data),
                                  args.smoke)
        elif experiment.benchmark == "training_memory":
            bench = run_benchmark("training_memory", out, data, args.smoke)
        seed_systems = None
        if search and experiment.searches:
            seed_systems = {row: search.plans[row].seeds for row, _ in rows}
            rows = [(row, seed_systems[row][0][1]) for row, _ in rows]  # each row's seed-1 run of its choice
        every = [system for _, system in rows] + [system for seeded in (seed_systems or {}).values()
                                                  for _, system in seeded]
        if experiment.decodes_alone:
            decode_alone(every, data, runs)
        for system in every:
            keep(system)
        results = {system.key: system_results(os.path.join(runs, system.key), os.path.join(
            runs, system.starts_from) if system.starts_from else None) for system in every}
        if args.convergence is not None:
            for system in every:
                results[system.key]["convergence"] = run_convergence(os.path.join(runs, system.key), system,
                                                                     args.convergence)
                if system.starts_from:
                    stage1 = replace(system, share=1 - system.share, starts_from=None, name=system.starts_from)
                    results[system.key]["stage1_convergence"] = run_convergence(
                        os.path.join(runs, system.starts_from), stage1, args.convergence)
        context = Context(rows, results, bench, os.path.join(out, f"{experiment.name}.png"), seed_systems,
                          search if experiment.searches else None, runs)
        context.converged = args.convergence is not None
        table, json_rows = experiment.table(context)
        if rows and args.convergence is not None:
            context.curves = bleu_curves_plot(rows, seed_systems, results,
                                              os.path.join(out, f"{experiment.name}_curves.png"),
                                              f"{experiment.title}: validation s-BLEU", experiment.curve_panel)
        elif rows:
            context.curves = curves_plot(rows, results, os.path.join(out, f"{experiment.name}_curves.png"),
                                         f"{experiment.title}: validation loss")
        if rows:
            context.notes.append(budget_note(args, results))
        if args.converge and not args.smoke:
            curves = {key: result["convergence"]["curve"] for key, result in results.items()
                      if result.get("convergence")}
            note, rules = stopping_rules_note(curves, args.convergence)
            context.notes.append(note)
            context.extra["stopping_rules"] = rules
            capped = capped_runs_note({f"{system.label} ({system.key})": results[system.key].get("convergence")
                                       for system in every}, args.convergence)
            if capped:
                context.notes.append(capped)
        signature = next((r["bleu_signature"] for r in results.values() if r["bleu_signature"]), None)
        text = write_outputs(experiment, out, args.corpus, context, table, json_rows, command, signature)
        print(text, flush=True)
