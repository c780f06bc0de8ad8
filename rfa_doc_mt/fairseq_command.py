"""fairseq's own commands, with this plugin imported before fairseq.

``python -m rfa_doc_mt.fairseq_command fairseq-train ARGS`` is ``fairseq-train ARGS`` (likewise
``fairseq-generate``, ``fairseq-validate``, ``fairseq-interactive``, ``fairseq-preprocess``): the same ``cli_main``, the
same options (``--user-dir`` must name this package, as always), the same output. What differs
is the order of the imports: the plugin's adaptations (:mod:`rfa_doc_mt.compat`) apply before
fairseq loads, and fairseq loads without scikit-learn and scipy.stats, which only tasks and
criteria this plugin never uses need (:mod:`rfa_doc_mt.deferred_imports`): 1.5-2 s of CPU less
in every run and in every worker it spawns. ``scripts/train.sh`` and ``scripts/decode.sh`` start
fairseq this way, and so does ``python -m rfa_doc_mt.data.prepare`` its binarization; the console
scripts work as well.

Two additions. ``fairseq-train`` keeps the memory it frees for its next update
(:func:`keep_freed_memory`). And a ``fairseq-train`` run that finishes writes ``SAVE_DIR/train.resources.json``, the
peak resident memory of its processes (this one and the workers it spawned) and its seconds; a
run resumed from its checkpoint_last.pt (trained on under a raised ``--max-update``) adds to what
its earlier finished starts wrote: the highest peak, the seconds summed. :func:`option_value` and
:func:`without_option` read and edit such command lines as argparse reads them.
"""

import ctypes
import importlib
import json
import logging
import os
import platform
import resource
import sys
import time
from typing import List, Optional, Sequence

COMMANDS = {"fairseq-train": "fairseq_cli.train", "fairseq-generate": "fairseq_cli.generate",
            "fairseq-validate": "fairseq_cli.validate", "fairseq-interactive": "fairseq_cli.interactive",
            "fairseq-preprocess": "fairseq_cli.preprocess"}
# These set up the root logger before they import fairseq (whose import would otherwise set it up
# its own way); fairseq-generate sets it up after, as fairseq's import left it.
LOGGING_FIRST = ("fairseq-train", "fairseq-validate", "fairseq-interactive")


# glibc's malloc gives every freed block above its mmap threshold (32 MB at most) back to the
# kernel and maps a new one at the next request, which then faults in page by page: a training
# update's logits and their gradients (tokens x vocabulary floats: 109 MB for 3400 tokens and 8k
# pieces) go that way at every update, and on a 2-core machine a third of a CPU update's time went
# to those faults (docs/training.md). Kept in the heap, the next update reuses them. The options are
# mallopt's (glibc's malloc.h); the environment variables are how glibc takes them at a process's
# start, for the workers a run spawns.
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
KEPT_MALLOC_OPTIONS = {"MALLOC_MMAP_MAX_": (M_MMAP_MAX, 0), "MALLOC_TRIM_THRESHOLD_": (M_TRIM_THRESHOLD, 2 ** 31 - 1)}


def keep_freed_memory() -> List[str]:
    """Make glibc's malloc keep freed memory in this process and the processes it starts: no
    block served by a fresh mapping, none trimmed from the heap's top. An option the environment
    already sets is left as it is; nothing changes where the C library is not glibc. Returns the
    options set."""
    if sys.platform != "linux" or platform.libc_ver()[0] != "glibc":
        return []
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    chosen = []
    for variable, (option, value) in KEPT_MALLOC_OPTIONS.items():
        if variable not in os.environ and mallopt(option, value) == 1:
            os.environ[variable] = str(value)
            chosen.append(variable)
    return chosen


def configure_logging(command: str) -> None:
    """The root logger as ``command``'s module sets it up: here fairseq was imported first."""
    if command in LOGGING_FIRST:
        logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s",
                            datefmt="%Y-%m-%d %H:%M:%S", level=os.environ.get("LOGLEVEL", "INFO").upper(),
                            stream=sys.stdout, force=True)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] not in COMMANDS:
        asked = argv[:1] in (["-h"], ["--help"])
        print(f"usage: python -m rfa_doc_mt.fairseq_command {{{','.join(COMMANDS)}}} [its options]\n"
              "Runs that fairseq command with this plugin imported first (its own --help lists its options).",
              file=sys.stdout if asked else sys.stderr)
        return 0 if asked else 2
    configure_logging(argv[0])
    if argv[0] == "fairseq-train":
        keep_freed_memory()
    start = time.monotonic()
    resumed = argv[0] == "fairseq-train" and os.path.isfile(os.path.join(save_dir(argv[1:]), "checkpoint_last.pt"))
    command = importlib.import_module(COMMANDS[argv[0]])
    sys.argv = [argv[0], *argv[1:]]  # also what a worker it spawns sees
    command.cli_main()
    if argv[0] == "fairseq-train":
        write_resources(argv[1:], time.monotonic() - start, resumed)
    return 0


def option_value(arguments: Sequence[str], name: str, default: Optional[str] = None) -> Optional[str]:
    """The value of ``name`` among command-line ``arguments`` (``--name V`` or ``--name=V``; the last
    one, as argparse reads them), or ``default``."""
    value = default
    for position, argument in enumerate(arguments):
        if argument == name and position + 1 < len(arguments):
            value = arguments[position + 1]
        elif argument.startswith(name + "="):
            value = argument[len(name) + 1:]
    return value


def without_option(arguments: Sequence[str], name: str) -> List[str]:
    """``arguments`` without ``name`` and its value."""
    kept, skip = [], False
    for argument in arguments:
        if skip:
            skip = False
        elif argument == name:
            skip = True
        elif not argument.startswith(name + "="):
            kept.append(argument)
    return kept


def save_dir(arguments) -> str:
    """The --save-dir of fairseq-train arguments (fairseq's default: checkpoints)."""
    return option_value(arguments, "--save-dir", "checkpoints")


def write_resources(arguments, seconds: float, resumed: bool = False) -> None:
    """SAVE_DIR/train.resources.json: peak resident memory (MB; ru_maxrss is in kB on Linux) of
    this process and of its finished children (the workers of a multi-process run), and seconds;
    ``resumed`` (this start resumed from a checkpoint): combined with what the file holds."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    directory = save_dir(arguments)
    if not os.path.isdir(directory):
        return
    path = os.path.join(directory, "train.resources.json")
    figures = {"peak_resident_mb": round(max(own, children), 1), "this_process_mb": round(own, 1),
               "workers_mb": round(children, 1), "seconds": round(seconds, 1)}
    earlier = {}
    if resumed and os.path.isfile(path):
        try:
            with open(path, encoding="utf-8") as handle:
                earlier = json.load(handle)
        except (OSError, ValueError):  # unreadable: this start's figures alone
            earlier = {}
    for name in ("peak_resident_mb", "this_process_mb", "workers_mb"):
        figures[name] = max(figures[name], earlier.get(name, 0.0))
    figures["seconds"] = round(figures["seconds"] + earlier.get("seconds", 0.0), 1)
    with open(path + ".partial", "w", encoding="utf-8") as handle:
        json.dump(figures, handle)
        handle.write("\n")
    os.replace(path + ".partial", path)


if __name__ == "__main__":
    sys.exit(main())
elif sys.argv[:1] and sys.argv[0] in COMMANDS:
    configure_logging(sys.argv[0])  # a worker spawned by a run started here imports this module first
