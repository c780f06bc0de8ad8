"""What the embedded reproduction costs on this machine, before starting it: seconds per
training update of every system it trains, and the core-seconds of a run at a budget.

    python -m rfa_doc_mt.bench.update_cost [--budget 1000] [--systems demo-rfa_L4,...] [--out cost.json]

For every system ``scripts/reproduce_all.sh`` trains on the embedded corpus (as
``python -m rfa_doc_mt.reproduce --list`` names them), the model its config builds (tiny,
randomly initialised, one torch thread) takes training steps on a batch of random windows of
its ``--context-size`` + 1 sentences of ``--sentence-length`` tokens, as many windows as make
``--tokens`` tokens (the demo configs' 4096-token batches hold about 3900): forward,
label-smoothed cross-entropy, backward. ``seconds_per_update`` is the median of ``--steps``
timed steps after a warm-up; times the system's updates at ``--budget`` it gives the
system's training core-seconds. The optimiser, data loading, validation and the evaluation
after training are not in it: a real run costs more (on the 2-core machine of the README, a
third more), and systems train two at a time, so divide by two for the least wall time.

The memory fine-tunings read a document one sentence at a time with the memory of the
sentences before, which a batch of windows does not represent: they are listed, not measured.
Run it alone on the machine: it is a timing.
"""

import argparse
import os
import shlex
import statistics
import subprocess
import sys
from typing import Dict, List

from .common import commit_info, machine_info, random_window_step, record_load_at_end, timed_steps, write_json

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


def option_value(arguments: List[str], option: str, default: str) -> str:
    return arguments[arguments.index(option) + 1] if option in arguments else default


def model_options(arguments: List[str]) -> List[str]:
    """MODEL_ARGS without ``--arch NAME`` and ``--share-all-embeddings`` (build_model's own)."""
    options, skip = [], False
    for argument in arguments:
        if skip:
            skip = False
        elif argument == "--arch":
            skip = True
        elif argument != "--share-all-embeddings":
            options.append(argument)
    return options


def seconds_per_update(config: str, root: str, args) -> Dict:
    """One config's model in this process: the median seconds of a training step."""
    import torch

    from ..models.build import build_model, dictionary_task, toy_dictionary

    arguments = config_arguments(config, root)
    sentences = int(option_value(arguments["task"], "--context-size", "0")) + 1
    arch = option_value(arguments["model"], "--arch", "")
    torch.set_num_threads(args.threads)
    dictionary, separator = toy_dictionary(args.vocabulary - 5)  # with the 4 special symbols and <sep>
    model = build_model(arch, dictionary_task(dictionary, separator), model_options(arguments["model"]),
                        seed=args.seed, share_all_embeddings=True).train()
    step, windows, batch_tokens = random_window_step(model, dictionary, separator, args.tokens, sentences,
                                                     args.sentence_length, args.seed)
    seconds = timed_steps(step, args.steps)
    return {"arch": arch, "sentences_per_window": sentences, "windows": windows, "tokens": batch_tokens,
            "seconds_per_update": statistics.median(seconds), "step_seconds": seconds}


def run(args) -> Dict:
    from ..reproduce import EMBEDDED, EXPERIMENTS
    from ..reproduce.experiments import systems_to_train
    from ..reproduce.papers import ROOT

    systems = systems_to_train([row for experiment in EXPERIMENTS.values()
                                for row in experiment.corpora.get(EMBEDDED, [])])
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
    measured = {}  # config -> figures (a config trained twice, e.g. as stage 1, is timed once)
    for system in systems:
        entry = {"system": system.key, "config": system.config, "updates": system.updates(args.budget)}
        if system.starts_from:
            entry["not_measured"] = "fine-tuned with the recurrent memory, one sentence at a time"
            print(f"{system.key:36s} {entry['updates']:5d} updates  not measured ({entry['not_measured']})", flush=True)
        else:
            if system.config not in measured:
                measured[system.config] = seconds_per_update(system.config, ROOT, args)
            entry.update(measured[system.config])
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
    return record_load_at_end(result)


def main(argv=None) -> int:
    from ..reproduce.papers import FULL_BUDGET

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=int, default=FULL_BUDGET, help=f"updates per system (default {FULL_BUDGET})")
    parser.add_argument("--systems", type=lambda s: [x for x in s.split(",") if x],
                        help="only these systems (keys as --list prints them), comma-separated")
    parser.add_argument("--tokens", type=int, default=3900, help="tokens per batch (default 3900)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up (default 3)")
    parser.add_argument("--sentence-length", type=int, default=7,
                        help="tokens per sentence (default 7: the embedded corpus's sentences with their separator)")
    parser.add_argument("--vocabulary", type=int, default=EMBEDDED_VOCABULARY)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", help="JSON file to write")
    args = parser.parse_args(argv)
    for name in ("budget", "tokens", "steps", "sentence_length", "threads"):
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
