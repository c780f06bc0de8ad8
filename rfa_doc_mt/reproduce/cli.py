"""``python -m rfa_doc_mt.reproduce``: the command line, and the tables written with their
machine and command."""

import argparse
import os
import shlex
import sys
import time
from typing import List, Optional

from ..bench.common import commit_info, machine_info, write_json
from ..data.io import DataError, atomic_write
from . import __doc__ as PACKAGE_DOC
from .experiments import EXPERIMENTS, budget_note, embedded_train_args, print_list, systems_to_train
from .papers import EMBEDDED, FULL_BUDGET, ROOT, SMOKE_TRAIN_ARGS, Experiment, System
from .running import (
    config_problems,
    data_problems,
    log,
    prepare_embedded,
    run_benchmark,
    run_systems,
    speed_corpus,
)
from .tables import curves_plot, system_results


class Context:
    """What a table function reads: the systems (row id, System), their results, the benchmark."""

    def __init__(self, systems, results, bench, png_path):
        self.systems, self.results, self.bench, self.png_path = systems, results, bench, png_path
        self.notes: List[str] = []
        self.plot: Optional[str] = None
        self.curves: Optional[str] = None


def write_outputs(experiment: Experiment, out: str, corpus: str, context: Context, table: str, rows: list,
                  command: str, bleu_signature: Optional[str]) -> str:
    if experiment.benchmark == "decode_speed":
        corpus_label = "randomly initialised paper-size models (speed only: nothing is trained; the source text " \
            "is named below)"
    elif corpus == EMBEDDED:
        corpus_label = "the embedded synthetic corpus (not the paper's data: compare trends, not values)"
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
                "stage1_curves": {system.starts_from: context.results[system.key]["stage1_curve"]
                                  for _, system in context.systems if system.starts_from}},
               os.path.join(out, f"{experiment.name}.json"))
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=PACKAGE_DOC.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=PACKAGE_DOC)
    parser.add_argument("experiment", nargs="?", help="one of: " + ", ".join(list(EXPERIMENTS) + ["all"]))
    parser.add_argument("--out", default=os.path.join(ROOT, "work", "reproduce"),
                        help="results directory (default: work/reproduce; re-running resumes there)")
    parser.add_argument("--corpus", default=EMBEDDED, help="embedded (default) or a real corpus (see --list)")
    parser.add_argument("--data", help="prepared corpus directory (required with a real --corpus)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="systems trained at once, one torch thread each (default: the number of cores)")
    parser.add_argument("--smoke", action="store_true", help="tiny corpus, 3 updates, tiny benchmarks: a test run")
    parser.add_argument("--budget", type=int, default=FULL_BUDGET,
                        help=f"updates per system on the embedded corpus (default {FULL_BUDGET}, the full run; "
                             "fewer make a shorter run whose tables say so)")
    parser.add_argument("--list", action="store_true", help="list experiments, corpora and systems, then exit")
    args = parser.parse_args(argv)
    if args.budget < 1:
        parser.error("--budget must be at least 1")
    if args.list:
        print_list(args.budget)
        return 0
    if args.experiment not in list(EXPERIMENTS) + ["all"]:
        parser.error(f"experiment must be one of {', '.join(list(EXPERIMENTS) + ['all'])}, got {args.experiment!r}")
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    experiments = list(EXPERIMENTS.values()) if args.experiment == "all" else [EXPERIMENTS[args.experiment]]
    if args.experiment == "all" and args.corpus != EMBEDDED:
        parser.error("`all` runs on the embedded corpus; run each experiment with its own --corpus and --data")
    if args.corpus != EMBEDDED and not args.data:
        parser.error(f"--corpus {args.corpus} needs --data DIR (a corpus prepared by scripts/prepare_*.sh)")
    if args.corpus == EMBEDDED and args.data:
        parser.error("--data goes with a real --corpus; the embedded corpus is generated into OUT/data")
    out = os.path.abspath(args.out)
    command = "scripts/" + ("reproduce_all.sh" if args.experiment == "all" else f"reproduce_{args.experiment}.sh") \
        + "".join(f" {shlex.quote(a)}" for a in (argv if argv is not None else sys.argv[1:])[1:])
    start = time.monotonic()

    # 1. check everything before any long work
    plan = [(experiment, experiment.systems(args.corpus)) for experiment in experiments]
    systems = systems_to_train(row for _, rows in plan for row in rows)
    problems = config_problems(systems)
    data = os.path.abspath(args.data) if args.data else None
    if data is not None:
        problems += data_problems(data, any(e.needs_consistency for e in experiments if e.systems(args.corpus)),
                                  selects_on_consistency=args.corpus == "opensub-consistency")
    if problems:
        raise DataError("cannot start:\n  " + "\n  ".join(problems))
    if data is None:
        data = prepare_embedded(out, args.smoke)
        problems = data_problems(data, any(e.needs_consistency for e in experiments))
        if problems:
            raise DataError("the embedded corpus is incomplete (delete it to regenerate):\n  " + "\n  ".join(problems))

    # 2. train, decode and score every system once; longest first (LSH), fine-tuned ones last
    def priority(system: System) -> int:
        return 0 if "lsh" in system.key else 2 if system.starts_from else 1
    runs = os.path.join(out, "runs")
    train_args = {system.key: SMOKE_TRAIN_ARGS if args.smoke else
                  embedded_train_args(system, args.budget) if args.corpus == EMBEDDED else []
                  for system in systems}
    if systems:
        log(f"{len(systems)} systems -> {runs} ({args.jobs} at a time"
            + (f"; {args.budget} updates each" if args.corpus == EMBEDDED and not args.smoke else "") + ")")
        run_systems(sorted(systems, key=priority), data, runs, args.jobs, train_args)

    # 3. benchmarks, alone on the machine, then the tables
    for experiment, rows in plan:
        bench = None
        if experiment.benchmark == "decode_speed":
            bench = run_benchmark("decode_speed", out, speed_corpus(out, args.corpus, args.data, args.smoke, data),
                                  args.smoke)
        elif experiment.benchmark == "training_memory":
            bench = run_benchmark("training_memory", out, data, args.smoke)
        results = {system.key: system_results(os.path.join(runs, system.key), os.path.join(
            runs, system.starts_from) if system.starts_from else None) for _, system in rows}
        context = Context(rows, results, bench, os.path.join(out, f"{experiment.name}.png"))
        table, json_rows = experiment.table(context)
        if rows:
            context.curves = curves_plot(rows, results, os.path.join(out, f"{experiment.name}_curves.png"),
                                         f"{experiment.title}: validation loss")
            context.notes.append(budget_note(args, results))
        signature = next(iter(results.values()))["bleu_signature"] if results and experiment.name != "rfa_figure3" \
            else None
        text = write_outputs(experiment, out, args.corpus, context, table, json_rows, command, signature)
        print(text, flush=True)
    log(f"done in {time.monotonic() - start:.0f} s; tables: " +
        ", ".join(os.path.join(out, f"{e.name}.md") for e, _ in plan))
    return 0
