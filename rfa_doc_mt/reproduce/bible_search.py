"""The search behind configs/bible/: the BPE size, then the model size and learning rate, chosen on
validation s-BLEU of the transformer at L = 1 (the cheapest system) on the Bible en-es.

    python -m rfa_doc_mt.reproduce.bible_search --corpora DIR --out DIR [--jobs 2]

``--corpora`` holds the corpus prepared at each BPE size, ``en-es-bpe{4,8,16,27}k``
(``scripts/prepare_bible.sh --bpe-size N``; 27k is what ``prepare_text.sh``'s rule, a piece per
50 words, gives this text). Every setting trains ``UPDATES`` updates from the same seed, validated
every ``INTERVAL`` on s-BLEU as the convergence budget validates (beam 4); its score is its best
validation. Stage 1 compares the BPE sizes at the configs' model (3+3 layers of width 128) and
the peak learning rate 2e-3; stage 2, at the chosen BPE size, the peak learning rate 3e-3 (the
configs' since: it won) and a smaller model (2+2 layers, at 2e-3). Every setting names its
learning rate against the configs' own, so that the search reruns as it ran. No peak rate below
2e-3 is tried: every stage-1 curve still rises steeply at
its last validation, where a slower rate would be judged behind at this budget whatever it
reaches later. A setting is chosen among those whose converged runs fit the experiment's budget
(``Setting.fits_budget``): the BPE sizes whose updates cost well over the configs' own (16k and
27k; ``--time-steps`` prints each setting's cost) are trained for the record, after stage 2, and
never chosen. Re-running resumes (scripts/train.sh resumes each
run); the table is printed and written to OUT/search.md and OUT/search.json.

    python -m rfa_doc_mt.reproduce.bible_search --corpora DIR --out DIR --time-steps

times a training step of every setting's model instead (forward, loss and backward on a batch of
random windows, the models in turns, one thread; as ``rfa_doc_mt.reproduce.cost`` does), each
against the configs' own, and writes OUT/steps.md: run it with nothing else on the machine.
"""

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from ..data.io import DataError, atomic_write
from ..provenance import commit_info, machine_info, write_json
from .convergence import NO_EPOCH_END, VALIDATION_DECODING
from .papers import ROOT
from .running import log
from .tables import fmt, learning_curve, markdown

UPDATES = 3000
INTERVAL = 500
CONFIG = "configs/bible/transformer_L1.sh"
# a smaller model: 2+2 layers (a wider one, configs/text/'s width 256, is not searched: the budget was sized at 128)
SMALL = ("--encoder-layers", "2", "--decoder-layers", "2")
# the peak learning rate stage 1 and the smaller model trained at (the configs' own is stage 2's 3e-3)
FIRST_LR = ("--lr", "2e-3")


@dataclass(frozen=True)
class Setting:
    name: str
    bpe: str  # the corpus folder under --corpora
    overrides: Tuple[str, ...] = ()
    # whether a converged run of every system of the experiment at this size fits its budget
    fits_budget: bool = True


BPE_SIZES = ("bpe4k", "bpe8k", "bpe16k", "bpe27k")
# the configs' own setting, against which --time-steps prices the others
OWN = "bpe8k"
# The sizes whose training update costs well over the configs' own (--time-steps: the output layer and
# embeddings grow with the vocabulary; docs/reproduction.md has the figures): the budget sized the
# experiment at the configs' own, so these are trained for the record (is a larger vocabulary better
# text for text?) and never chosen.
DEARER_THAN_THE_BUDGET = ("bpe16k", "bpe27k")


def stage1() -> List[Setting]:
    return [Setting(bpe, bpe, FIRST_LR, fits_budget=bpe not in DEARER_THAN_THE_BUDGET) for bpe in BPE_SIZES]


def stage2(bpe: str) -> List[Setting]:
    return [Setting(f"{bpe}-lr3e-3", bpe), Setting(f"{bpe}-2+2", bpe, FIRST_LR + SMALL)]


def train_args(setting: Setting) -> List[str]:
    never = str(NO_EPOCH_END)
    return ["--max-update", str(UPDATES), "--validate-interval-updates", str(INTERVAL),
            "--save-interval-updates", str(INTERVAL), "--keep-interval-updates", "1", "--validate-interval", never,
            "--save-interval", never, "--eval-bleu", "--eval-bleu-args", VALIDATION_DECODING,
            "--best-checkpoint-metric", "bleu", "--maximize-best-checkpoint-metric", *setting.overrides]


def corpus_of(corpora: str, setting: Setting) -> str:
    return os.path.join(corpora, f"en-es-{setting.bpe}")


def train(settings: Sequence[Setting], corpora: str, out: str, jobs: int) -> None:
    """Each setting's run (scripts/train.sh: a finished one is left as it is), ``jobs`` at a time."""
    waiting, running, failed = list(settings), {}, []
    while waiting or running:
        for name, (process, handle) in list(running.items()):
            if process.poll() is not None:
                handle.close()
                del running[name]
                (failed.append(name) if process.returncode else log(f"finished {name}"))
        while waiting and len(running) < jobs:
            setting = waiting.pop(0)
            command = ["bash", os.path.join(ROOT, "scripts", "train.sh"), os.path.join(ROOT, CONFIG),
                       corpus_of(corpora, setting), os.path.join(out, setting.name), *train_args(setting)]
            handle = open(os.path.join(out, f"{setting.name}.log"), "a", encoding="utf-8")
            running[setting.name] = (subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT,
                                                      env=dict(os.environ, OMP_NUM_THREADS="1")), handle)
            log(f"started {setting.name} (progress: tail -f {out}/{setting.name}/train.log)")
        time.sleep(1.0)
    if failed:
        raise DataError(f"search runs failed: {', '.join(failed)} (their logs: {out}/NAME.log)")


def score(out: str, setting: Setting) -> Optional[Tuple[float, int]]:
    """The best validation s-BLEU of a setting's run and its update (of equal scores, the later)."""
    curve = learning_curve(os.path.join(out, setting.name), "bleu")
    return max(((bleu, updates) for updates, bleu in curve), default=None)


def trained(out: str, setting: Setting) -> bool:
    """Whether a setting's run has finished (scripts/train.sh's record)."""
    return os.path.isfile(os.path.join(out, setting.name, "train.done"))


def chosen(out: str, settings: Sequence[Setting]) -> Setting:
    scored = [(score(out, setting), setting) for setting in settings if setting.fits_budget]
    missing = [setting.name for result, setting in scored if result is None]
    if not scored:
        raise DataError(f"no run in {out} has finished among {', '.join(setting.name for setting in settings)}")
    if missing:
        raise DataError(f"no validation score for {', '.join(missing)} (see {out}/NAME/train.log)")
    return max(scored, key=lambda pair: pair[0][0])[1]


def model_of(setting: Setting) -> Tuple[str, Tuple[str, ...]]:
    """What a training step's cost depends on: the corpus (its vocabulary) and the model's options."""
    pairs = zip(setting.overrides[::2], setting.overrides[1::2])  # (option, value): the overrides' form
    return setting.bpe, tuple(word for option, value in pairs if option != "--lr" for word in (option, value))


def time_steps(corpora: str, out: str, settings: Sequence[Setting], rounds: int = 8) -> int:
    """Seconds of a training step of each setting's model (the configs' model with its overrides,
    at its corpus's vocabulary), the models in turns; printed and written to OUT/steps.md."""
    from .cost import steps_in_turns, training_step

    steps, vocabulary = {}, {}
    for setting in settings:
        model = model_of(setting)
        if model in steps:
            continue
        with open(os.path.join(corpus_of(corpora, setting), "dict.en.txt"), encoding="utf-8") as handle:
            vocabulary[model] = sum(1 for _ in handle)
        options = argparse.Namespace(threads=1, vocabulary=vocabulary[model] + 5, seed=1, tokens=3400,
                                     sentence_length=30)
        steps[model] = training_step(CONFIG, ROOT, options, model[1])[0]
    log(f"timing {len(steps)} models, {rounds} steps each, in turns")
    seconds = {model: statistics.median(times) for model, times in steps_in_turns(steps, rounds).items()}
    own = seconds[(OWN, ())]
    rows = [[setting.name, " ".join(model_of(setting)[1]) or "—", str(vocabulary[model_of(setting)]),
             f"{seconds[model_of(setting)]:.3f}", f"{seconds[model_of(setting)] / own:.2f}",
             "yes" if setting.fits_budget else "no"] for setting in settings]
    table = markdown(["setting", "model overrides", "joint vocabulary", "s / step", f"× {OWN}'s",
                      "fits the budget"], rows, right_from=2)
    machine, commit = machine_info("cpu"), commit_info()
    text = (f"{table}\n\nA training step (forward, label-smoothed cross-entropy, backward; no optimiser "
            f"update) of {CONFIG}'s model with the overrides on a batch of random windows of about 3400 "
            f"tokens, one thread, the models in turns, the median of {rounds}. Machine: {machine['cpu']}, "
            f"{machine['cpu_count']} cores; commit {(commit['commit'] or '?')[:7]}.\n")
    with atomic_write(os.path.join(out, "steps.md")) as handle:
        handle.write(text)
    print(text)
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        return search(argv)
    except DataError as error:
        print(f"bible_search: {error}", file=sys.stderr)
        return 2


def search(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpora", required=True, help="folder of the corpora en-es-bpe{4,8,16,27}k")
    parser.add_argument("--out", required=True, help="folder of the runs and the table")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (each on one thread)")
    parser.add_argument("--table", action="store_true",
                        help="only tabulate the runs trained so far (a setting still training: its curve so far)")
    parser.add_argument("--time-steps", action="store_true",
                        help="time a training step of every setting's model instead of training (OUT/steps.md)")
    args = parser.parse_args(argv)
    missing = [corpus_of(args.corpora, s) for s in stage1() if not os.path.isfile(os.path.join(
        corpus_of(args.corpora, s), "prep.json"))]
    if missing:
        parser.error(f"no prepared corpus at {', '.join(missing)} (scripts/prepare_bible.sh --bpe-size N --out ...)")
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    start = time.monotonic()
    first = stage1()
    if args.time_steps:
        return time_steps(args.corpora, out, first + [s for bpe in BPE_SIZES if bpe == OWN for s in stage2(bpe)])
    if not args.table:
        train([setting for setting in first if setting.fits_budget], args.corpora, out, args.jobs)
    bpe = chosen(out, [setting for setting in first if trained(out, setting)]).bpe
    second = stage2(bpe)
    if not args.table:
        train(second, args.corpora, out, args.jobs)
        train([setting for setting in first if not setting.fits_budget], args.corpora, out, args.jobs)
    settings = first + second
    done = [setting for setting in settings if trained(out, setting)]
    best = chosen(out, [setting for setting in done if setting.bpe == bpe])
    rows, entries = [], []
    for setting in settings:
        result = score(out, setting)
        curve = learning_curve(os.path.join(out, setting.name), "bleu")
        state = "yes" if setting in done else f"to {curve[-1][0]}" if curve else "no"
        rows.append([setting.name, " ".join(setting.overrides) or "—", state, fmt(result[0]) if result else "—",
                     str(result[1]) if result else "—", " ".join(fmt(bleu) for _, bleu in curve),
                     "yes" if setting.fits_budget else "no", "**chosen**" if setting == best else ""])
        entries.append({"setting": setting.name, "bpe": setting.bpe, "overrides": list(setting.overrides),
                        "trained": setting in done, "best_valid_s_bleu": result[0] if result else None,
                        "at": result[1] if result else None, "curve": curve, "fits_budget": setting.fits_budget,
                        "chosen": setting == best})
    table = markdown(["setting", "overrides of " + CONFIG, f"trained ({UPDATES})", "best validation s-BLEU",
                      "at update", f"validation s-BLEU every {INTERVAL}", "fits the budget", "chosen"], rows,
                     right_from=2)
    if any(setting.fits_budget and setting not in done for setting in settings):
        table += "\n\nNot every setting the budget affords has trained: the choice may still change."
    command = "python -m rfa_doc_mt.reproduce.bible_search " + shlex.join(sys.argv[1:] if argv is None else argv)
    machine, commit = machine_info("cpu"), commit_info()
    text = (f"{table}\n\nEvery run: {CONFIG} with the overrides, seed 1, {UPDATES} updates, validated every "
            f"{INTERVAL} (beam 4), one thread{'' if args.table else f', {args.jobs} runs at a time'}. "
            f"Command: `{command}`; machine: "
            f"{machine['cpu']}, {machine['cpu_count']} cores; commit {(commit['commit'] or '?')[:7]}"
            f"{' (with changes)' if commit['dirty'] else ''}.\n")
    with atomic_write(os.path.join(out, "search.md")) as handle:
        handle.write(text)
    write_json({"command": command, "machine": machine, "commit": commit, "settings": entries},
               os.path.join(out, "search.json"))
    print(text)
    log(f"done in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
