"""What the embedded reproduction costs on this machine, before starting it: seconds per
training update of every system it trains, and the core-seconds of a run at a budget.

    python -m rfa_doc_mt.reproduce.cost [--budget 1000] [--systems demo-rfa_L4,...] [--out cost.json]

For every system ``scripts/reproduce_all.sh`` trains on the embedded corpus (as ``python -m
rfa_doc_mt.reproduce --list`` names them), the model its config builds (tiny, randomly
initialised, one torch thread) takes training steps on a batch of random windows of its
``--context-size`` + 1 sentences of ``--sentence-length`` tokens, as many windows as make
``--tokens`` tokens (the demo configs' 4096-token batches hold about 3900): forward,
label-smoothed cross-entropy, backward. The models are built first and take their steps in turns
(a warm-up each, then ``--steps`` rounds of one step of each; the step is
:func:`rfa_doc_mt.bench.common.random_window_step`, the benchmarks' timing step), so that a load
that comes and goes falls on all of them alike; ``seconds_per_update`` is the median of a
model's timed steps; times the system's updates at ``--budget`` it gives the system's training
core-seconds. The optimiser, data loading, validation and the evaluation after training are not
in it: a real run costs more (on the 2-core machine of the README, a third more), and systems
train two at a time, so divide by two for the least wall time.

The memory fine-tunings read a document one sentence at a time with the memory of the
sentences before, which a batch of windows does not represent: they are listed, not measured.
Run it alone on the machine: it is a timing.

Table 1's search (``rfa_doc_mt.reproduce.search``) trains its settings instead of the demo
configs' own: each setting's model (its RFA projections) is timed too, and ``table1`` gives the
core-seconds of its training steps, search and seeds: ``--seeds``, with the seeds of each row
costed at its dearest setting (the choice is not known before the search).
"""

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import time
from typing import Dict, List

from ..bench.common import random_window_step
from ..fairseq_command import option_value, without_option
from ..provenance import commit_info, machine_info, record_load_at_end, write_json
from .experiments import EXPERIMENTS, systems_to_train
from .papers import DEFAULT_SEEDS, EMBEDDED, FULL_BUDGET, ROOT
from .search import FULL_PLAN, reachable, runs_per_row, variant

# the embedded corpus's joint vocabulary (dict.src.txt + dict.tgt.txt of its preparation)
EMBEDDED_VOCABULARY = 540


def config_arguments(config: str, root: str) -> Dict[str, List[str]]:
    """TASK_ARGS and MODEL_ARGS of a config script, as the shell expands them."""
    script = 'source "$1"; printf "%s\\0" "$TASK_ARGS" "$MODEL_ARGS"'  # NUL-separated: the values span lines
    done = subprocess.run(["bash", "-c", script, "bash", os.path.join(root, config)], capture_output=True,
                          text=True, env={**os.environ, "RFA_DOC_MT_ROOT": root})
    values = done.stdout.split("\0")
    if done.returncode != 0 or len(values) < 2:
        raise RuntimeError(f"could not read the arguments of {config}: {done.stderr.strip()}")
    return {"task": shlex.split(values[0]), "model": shlex.split(values[1])}


def model_options(arguments: List[str]) -> List[str]:
    """MODEL_ARGS without ``--arch NAME`` and ``--share-all-embeddings`` (build_model's own)."""
    return [argument for argument in without_option(arguments, "--arch") if argument != "--share-all-embeddings"]


def training_step(config: str, root: str, args, extra_model_options=()):
    """One config's model (with ``extra_model_options`` after its own) and a training step of it
    on its batch: (step function, its figures)."""
    import torch

    from ..models.build import build_model, dictionary_task, toy_dictionary

    arguments = config_arguments(config, root)
    arguments["model"] = arguments["model"] + list(extra_model_options)
    sentences = int(option_value(arguments["task"], "--context-size", "0")) + 1
    arch = option_value(arguments["model"], "--arch", "")
    torch.set_num_threads(args.threads)
    dictionary, separator = toy_dictionary(args.vocabulary - 5)  # with the 4 special symbols and <sep>
    model = build_model(arch, dictionary_task(dictionary, separator), model_options(arguments["model"]),
                        seed=args.seed, share_all_embeddings=True).train()
    step, windows, batch_tokens = random_window_step(model, dictionary, separator, args.tokens, sentences,
                                                     args.sentence_length, args.seed)
    return step, {"arch": arch, "sentences_per_window": sentences, "windows": windows, "tokens": batch_tokens}


def steps_in_turns(steps: Dict, rounds: int) -> Dict[object, List[float]]:
    """Seconds of ``rounds`` training steps of each model, the models taking turns (one warm-up
    each first): a load that changes while they are timed falls on all of them alike."""
    for step in steps.values():
        step()
    seconds: Dict[object, List[float]] = {model: [] for model in steps}
    for _ in range(rounds):
        for model, step in steps.items():
            start = time.perf_counter()
            step()
            seconds[model].append(time.perf_counter() - start)
    return seconds


def model_overrides(system) -> tuple:
    """The model options among a system's overrides (RFA's; --lr and --seed leave a step's cost)."""
    options, keep = [], False
    for argument in system.overrides:
        if argument.startswith("--"):
            keep = argument.startswith("--rfa-")
        if keep:
            options.append(argument)
    return tuple(options)


def table1_settings():
    """Every system Table 1's search may train, by row: whatever each stage chooses, and under
    each choice the row it inherits from may make."""
    by_row = {}
    for row, base in EXPERIMENTS["rfa_table1"].corpora[EMBEDDED]:
        search = FULL_PLAN.rows[row]
        parents = [{}] if not search.inherits else \
            [{search.inherits: choice} for choice in reachable(search.inherits, FULL_PLAN, {})]
        settings = [s for chosen in parents for s in reachable(row, FULL_PLAN, chosen)]
        by_row[row] = [variant(base, search.family, setting, 1) for setting in dict.fromkeys(settings)]
    return by_row


def table1_estimate(seconds: Dict[str, float], seeds: int, budget: int) -> Dict:
    """Core-seconds of the training steps of Table 1's search and seeds from the seconds per
    update of its systems (by key): each row's search runs and its seeds, each costed at the
    dearest setting the row may train (the choices are not known before the search)."""
    per_row = {}
    for row, systems in table1_settings().items():
        dearest = max(seconds[system.key] for system in systems) * budget
        searched = runs_per_row(row, FULL_PLAN)
        per_row[row] = {"search_runs": searched, "search_core_seconds": searched * dearest,
                        "seed_runs": seeds - 1, "seed_core_seconds": (seeds - 1) * dearest}
    total = sum(r["search_core_seconds"] + r["seed_core_seconds"] for r in per_row.values())
    return {"seeds": seeds, "budget": budget, "rows": per_row, "core_seconds": total,
            "runs": sum(r["search_runs"] + r["seed_runs"] for r in per_row.values())}


def run(args) -> Dict:
    systems = systems_to_train([row for experiment in EXPERIMENTS.values()
                                for row in experiment.corpora.get(EMBEDDED, [])])
    searched = [system for settings in table1_settings().values() for system in settings]
    systems += [system for system in searched if system.key not in {s.key for s in systems}]
    if args.systems:
        known = {system.key for system in systems}
        unknown = sorted(set(args.systems) - known)
        if unknown:
            raise SystemExit(f"unknown system(s) {', '.join(unknown)}; "
                             f"the embedded run trains {', '.join(sorted(known))}")
        systems = [system for system in systems if system.key in args.systems]
    result = {"machine": machine_info("cpu"), "commit": commit_info(),
              "settings": {"budget": args.budget, "tokens": args.tokens, "steps": args.steps,
                           "sentence_length": args.sentence_length, "vocabulary": args.vocabulary,
                           "threads": args.threads,
                           "step": "forward + label-smoothed cross-entropy + backward, no optimiser update"},
              "systems": []}
    # (config, model options) -> step and figures: a model trained twice (e.g. as stage 1) is timed once
    built = {}
    for system in systems:
        model = (system.config, model_overrides(system))
        if not system.starts_from and model not in built:
            built[model] = training_step(system.config, ROOT, args, model[1])
    seconds = steps_in_turns({model: step for model, (step, _) in built.items()}, args.steps)
    measured = {model: {**figures, "seconds_per_update": statistics.median(seconds[model]),
                        "step_seconds": seconds[model]} for model, (_, figures) in built.items()}
    for system in systems:
        entry = {"system": system.key, "config": system.config, "updates": system.updates(args.budget)}
        if system.starts_from:
            entry["not_measured"] = "fine-tuned with the recurrent memory, one sentence at a time"
            print(f"{system.key:36s} {entry['updates']:5d} updates  not measured ({entry['not_measured']})", flush=True)
        else:
            entry.update(measured[(system.config, model_overrides(system))])
            entry["core_seconds"] = entry["seconds_per_update"] * entry["updates"]
            print(f"{system.key:36s} {entry['updates']:5d} updates  {entry['seconds_per_update']:6.3f} s/update  "
                  f"{entry['core_seconds']:8.0f} core-s", flush=True)
        result["systems"].append(entry)
    timed = [entry for entry in result["systems"] if "core_seconds" in entry]
    total = sum(entry["core_seconds"] for entry in timed)
    result["total_core_seconds"] = total
    result["not_measured"] = [entry["system"] for entry in result["systems"] if "not_measured" in entry]
    print(f"training steps of the {len(timed)} measured systems at {args.budget} updates: {total:.0f} core-s, "
          f"{total / 3600:.2f} h of one core, {total / 7200:.2f} h of two"
          + (f"; not measured: {len(result['not_measured'])} memory fine-tunings" if result["not_measured"] else ""))
    if any(entry["system"] in {s.key for s in searched} for entry in timed):
        per_update = {entry["system"]: entry["seconds_per_update"] for entry in timed}
        if all(system.key in per_update for system in searched):
            estimate = table1_estimate(per_update, args.seeds, args.budget)
            result["table1"] = estimate
            print(f"Table 1's search and {args.seeds} seeds: {estimate['runs']} runs, training steps "
                  f"{estimate['core_seconds']:.0f} core-s, {estimate['core_seconds'] / 7200:.2f} h of two cores")
    return record_load_at_end(result)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=int, default=FULL_BUDGET, help=f"updates per system (default {FULL_BUDGET})")
    parser.add_argument("--systems", type=lambda s: [x for x in s.split(",") if x],
                        help="only these systems (keys as --list prints them), comma-separated")
    parser.add_argument("--tokens", type=int, default=3900, help="tokens per batch (default 3900)")
    parser.add_argument("--steps", type=int, default=3,
                        help="timed steps of each model after one warm-up, the models taking turns (default 3)")
    parser.add_argument("--sentence-length", type=int, default=7,
                        help="tokens per sentence (default 7: the embedded corpus's sentences with their separator)")
    parser.add_argument("--vocabulary", type=int, default=EMBEDDED_VOCABULARY)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--seeds", type=int, default=DEFAULT_SEEDS,
                        help=f"seeds of Table 1's chosen settings, for its estimate (default {DEFAULT_SEEDS})")
    parser.add_argument("--out", help="JSON file to write")
    args = parser.parse_args(argv)
    for name in ("budget", "tokens", "steps", "sentence_length", "threads", "seeds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.vocabulary < 7:
        parser.error("--vocabulary must be at least 7 (the special symbols, <sep> and two words)")
    result = run(args)
    if args.out:
        write_json(result, args.out)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
