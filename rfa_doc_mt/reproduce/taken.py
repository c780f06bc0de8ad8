"""What a reproduction took, read back from its runs' own logs: the wall time each run held its
run slot, training and evaluation apart, so that a budget estimated before the runs
(``rfa_doc_mt.reproduce.cost``, docs/reproduction.md) can be set beside what they cost.

    python -m rfa_doc_mt.reproduce.taken OUT/runs/context-* [--json taken.json]

A run folder (or one restored by ``--keep``) holds ``train.log``, fairseq-train's log, appended
to by every start of the run: each start (a resume after an interruption counts as one) is a
segment, from its first line to its last, and the run's training time is the sum of its
segments, so that the time between an interruption and the resume is not counted, while the
updates an interruption lost since the last checkpoint are (they were trained, then trained
again). Pauses within a segment (the other runs are paused while one decodes alone) count: the
slot was held. Evaluation: the seconds fairseq-generate took to decode the test split
(``test.generate.err``) and to decode it again alone (``decoded-alone/test.generate.err``); the
contrastive scoring between them leaves no time in the run's files and is not counted (about half a
minute a run at L = 8). A run started anew elsewhere, its earlier partial work lost with its
machine, shows only the start that finished.
"""

import argparse
import datetime
import os
import re
import sys
from typing import List, Optional, Sequence, Tuple

from ..provenance import write_json
from .context_length import TRANSLATED, seconds_per_update
from .running import ALONE
from .tables import markdown

STAMP = re.compile(r"^(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) \| ")
# fairseq-train's first lines: the plugin's import notice, then its whole configuration
START = re.compile(r"\| (fairseq\.utils \| --user-dir=|fairseq_cli\.train \| \{)")
UPDATES = re.compile(r"num_updates[ =](\d+)")
DECODINGS = ("test.generate.err", os.path.join(ALONE, "test.generate.err"))

Segment = Tuple[datetime.datetime, datetime.datetime]


def training_segments(lines: Sequence[str]) -> List[Segment]:
    """Each start of fairseq-train in a log its starts append to: (first time, last time)."""
    segments: List[List[datetime.datetime]] = []
    starting = False
    for line in lines:
        stamp = STAMP.match(line)
        if not stamp:
            continue
        when = datetime.datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S")
        if START.search(line):
            if not starting or not segments:
                segments.append([when, when])
            starting = True
        else:
            starting = False
            if not segments:  # a log cut at its top: its first line opens the segment
                segments.append([when, when])
        segments[-1][1] = when
    return [(first, last) for first, last in segments]


def updates_trained(lines: Sequence[str]) -> Optional[int]:
    found = [int(match.group(1)) for line in lines for match in [UPDATES.search(line)] if match]
    return max(found) if found else None


def evaluation_seconds(run_dir: str) -> Optional[float]:
    """The seconds of the test split's two decodings (after training, and alone); None until both
    are done."""
    seconds = 0.0
    for name in DECODINGS:
        path = os.path.join(run_dir, name)
        found = None
        if os.path.exists(path):
            with open(path, errors="replace") as handle:
                found = TRANSLATED.search(handle.read())
        if found is None:
            return None
        seconds += float(found.group("seconds"))
    return seconds


def run_taken(run_dir: str) -> dict:
    path = os.path.join(run_dir, "train.log")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{run_dir}: no train.log (not a run folder)")
    with open(path, errors="replace") as handle:
        lines = handle.read().splitlines()
    segments = training_segments(lines)
    if not segments:
        raise ValueError(f"{path}: no timed line of fairseq-train")
    train = sum((last - first).total_seconds() for first, last in segments)
    evaluation = evaluation_seconds(run_dir)
    return {"run": os.path.basename(os.path.normpath(run_dir)), "starts": len(segments),
            "first": segments[0][0].isoformat(" "), "last": segments[-1][1].isoformat(" "),
            "updates": updates_trained(lines), "train_seconds": train, "evaluation_seconds": evaluation,
            "seconds": train + (evaluation or 0.0), "step_seconds": seconds_per_update(run_dir)}


def report(rows: List[dict], slots: int) -> str:
    def minutes(seconds: Optional[float]) -> str:
        return "—" if seconds is None else f"{seconds / 60:.1f}"

    def per_thousand(row: dict) -> str:
        return f"{row['train_seconds'] / 60 / row['updates'] * 1000:.1f}" if row["updates"] else "—"

    table = markdown(["run", "starts", "updates", "training min", "evaluation min", "min",
                      "training min / 1000 updates", "s / update (steps)"],
                     [[row["run"], str(row["starts"]), "—" if row["updates"] is None else str(row["updates"]),
                       minutes(row["train_seconds"]), minutes(row["evaluation_seconds"]), minutes(row["seconds"]),
                       per_thousand(row), "—" if row["step_seconds"] is None else f"{row['step_seconds']:.2f}"]
                      for row in rows])
    total = sum(row["seconds"] for row in rows)
    missing = sum(row["evaluation_seconds"] is None for row in rows)
    training = sum(row["train_seconds"] for row in rows)
    return (f"{table}\n\ntraining min / 1000 updates: the training time (validations, checkpoint saves and the "
            "updates an interruption made train twice included) over the updates; s / update (steps): the median "
            "training step alone (fairseq's train_wall per update)\n\n"
            f"{len(rows)} runs: {total / 3600:.1f} hours of one run slot in all (training "
            f"{training / 3600:.1f}), {total / 3600 / slots:.1f} hours of {slots} slots side by side at best"
            + (f"; {missing} without the evaluation's times (not counted)" if missing else ""))


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rfa_doc_mt.reproduce.taken", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="run folders (OUT/runs/RUN), each with its train.log")
    parser.add_argument("--slots", type=int, default=2, help="runs trained side by side (default 2)")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    if args.slots < 1:
        parser.error("--slots must be at least 1")
    try:
        rows = [run_taken(run_dir) for run_dir in args.runs if os.path.isdir(run_dir)]
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if not rows:
        print("error: none of the paths is a run folder", file=sys.stderr)
        return 2
    print(report(rows, args.slots))
    if args.json:
        write_json({"slots": args.slots, "runs": rows}, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
