"""The convergence budget: each run trains until its validation s-BLEU has stopped improving.

A fixed number of updates answers "which system learns faster"; the papers compare trained
models. Under ``--converge`` every run validates every ``interval`` updates (fairseq's
``--eval-bleu``: s-BLEU of the windowed decoding of the validation split, beam 4, the length
bounds of ``scripts/decode.sh``), keeps the checkpoint of the highest validation s-BLEU (the
metric Wu et al. 2022 select and stop on, appendix A.2), and stops once ``patience``
validations in a row have not improved on it (fairseq's ``--patience``), or at ``cap`` updates,
which the tables flag. fairseq-train's early-stopping counter is saved in every checkpoint
(``DocTranslationTask.get_checkpoint_dict``), so a run resumed after an interruption stops
where an uninterrupted one does.

What each row reports beside its test scores (:func:`convergence_summary`): the update of the
selected checkpoint, where the run stopped and why, and the updates it took to reach 95% and
99% of its own best validation score (sample efficiency: what tells "slower" from "worse").
:func:`stopping_rules` replays other intervals and patiences on the recorded curves: what a
coarser interval or a shorter patience would have selected, and where it would have stopped.
"""

import os
from typing import Dict, List, Optional, Sequence, Tuple

from ..fairseq_command import option_value
from ..training_state import MAX_UPDATE, ended_on_patience, finished_settings
from .papers import Convergence, System

# the validation decoding: beam 4 and scripts/decode.sh's length bounds, as the test split is decoded
VALIDATION_DECODING = '{"beam":4,"max_len_a":1.2,"max_len_b":10}'
# an epoch interval no run reaches: validations and saves at the update intervals only (fairseq
# also validates and saves at every epoch's end, and epochs of windows of L sentences differ in
# length between systems: that would offer each system other checkpoints to pick from)
NO_EPOCH_END = 1_000_000


def convergence_train_args(system: System, convergence: Convergence) -> List[str]:
    """fairseq-train arguments of a run under the convergence budget."""
    cap = system.updates(convergence.cap)
    interval = min(convergence.interval, cap)
    never = str(NO_EPOCH_END)
    return ["--max-update", str(cap), "--validate-interval-updates", str(interval),
            "--save-interval-updates", str(interval), "--keep-interval-updates", "1",
            "--validate-interval", never, "--save-interval", never, "--patience", str(convergence.patience),
            "--eval-bleu", "--eval-bleu-args", VALIDATION_DECODING,
            "--best-checkpoint-metric", "bleu", "--maximize-best-checkpoint-metric"] + \
        (["--patience-min-gain", f"{convergence.min_gain:g}"] if convergence.min_gain else [])


# ---------------------------------------------------------------------------------------
# reading a run

def validation_bleu_curve(run_dir: str) -> List[Tuple[int, float]]:
    """[(updates, validation s-BLEU)] from a run's train.log (:func:`.tables.learning_curve`)."""
    from .tables import learning_curve

    return learning_curve(run_dir, "bleu")


def stopped_early(run_dir: str) -> bool:
    """Whether fairseq-train stopped the run on its patience (the log of its last start says so:
    a run stopped on a shorter patience and resumed under a longer one stopped where that says)."""
    return ended_on_patience(os.path.join(run_dir, "train.log"))


def run_cap(run_dir: str, system: System, convergence: Convergence) -> int:
    """The cap a finished run trained under: its own ``--max-update`` (train.done; a run trained on
    under a raised cap has the raised one), else the budget's."""
    done = finished_settings(run_dir)
    value = option_value(done, MAX_UPDATE) if done else None
    return int(value) if value is not None else system.updates(convergence.cap)


def first_reaching(curve: Sequence[Tuple[int, float]], level: float) -> Optional[int]:
    """The first update whose validation score reaches ``level`` (None: none does)."""
    return next((updates for updates, score in curve if score >= level), None)


def convergence_summary(curve: Sequence[Tuple[int, float]], cap: int, early: bool) -> Optional[dict]:
    """What a row reports of a run's training under the convergence budget: the update and score
    of its best validation (the checkpoint kept; of equal scores fairseq keeps the later, and so
    does this), the last validated update, whether it reached the cap without stopping on its
    patience, and the updates to reach 95% and 99% of its own best score. None without a curve."""
    if not curve:
        return None
    best_score = max(score for _, score in curve)
    best_update = max(updates for updates, score in curve if score == best_score)
    last = curve[-1][0]
    return {"best_update": best_update, "best_valid_bleu": best_score, "last_update": last,
            "reached_cap": not early and last >= cap, "stopped_early": early,
            "updates_to_95": first_reaching(curve, 0.95 * best_score),
            "updates_to_99": first_reaching(curve, 0.99 * best_score)}


def run_convergence(run_dir: str, system: System, convergence: Convergence) -> Optional[dict]:
    """:func:`convergence_summary` of a finished run, with its curve."""
    curve = validation_bleu_curve(run_dir)
    summary = convergence_summary(curve, run_cap(run_dir, system, convergence), stopped_early(run_dir))
    return None if summary is None else {**summary, "curve": curve}


# ---------------------------------------------------------------------------------------
# other stopping rules, replayed on the recorded curves


def replay(curve: Sequence[Tuple[int, float]], every: int, patience: int,
           min_gain: float = 0.0) -> Tuple[int, int, float]:
    """A stopping rule replayed on a recorded curve: validate at every ``every``-th recorded point
    only, stop after ``patience`` of them without a score higher by more than ``min_gain`` than
    the reference (the last one that reset the patience). (stop update, selected update, selected
    score), as fairseq-train decides them (with the task's ``should_stop_early``): a score equal
    to the best keeps its checkpoint as the best (``>=``) but does not count as a gain for the
    patience (``>``). A rule that does not stop within the curve stops at its end."""
    points = list(curve)[every - 1::every] or list(curve)[-1:]
    kept_update, kept_score, reference, since = None, None, None, 0
    for updates, score in points:
        if kept_score is None or score >= kept_score:
            kept_update, kept_score = updates, score
        if reference is None or score - reference > min_gain:
            reference, since = score, 0
        else:
            since += 1
            if since >= patience:
                return updates, kept_update, kept_score
    return points[-1][0], kept_update, kept_score


def stopping_rules(curves: Dict[str, Sequence[Tuple[int, float]]], interval: int,
                   rules: Sequence[Tuple[int, int]], min_gain: float = 0.0) -> List[dict]:
    """Each rule (validate every ``every`` recorded points, ``patience``) replayed on every curve
    (recorded every ``interval`` updates): mean updates trained, mean updates trained past the
    selected checkpoint, the mean and largest validation s-BLEU lost against the curve's best, how
    many runs it stops before the curve's best, and how many before the curve's end."""
    table = []
    for every, patience in rules:
        stops, overshoots, losses, premature, stopped = [], [], [], 0, 0
        for curve in curves.values():
            if not curve:
                continue
            best = max(score for _, score in curve)
            best_update = min(updates for updates, score in curve if score == best)
            stop, selected, score = replay(curve, every, patience, min_gain)
            stops.append(stop)
            overshoots.append(stop - selected)
            losses.append(best - score)
            premature += stop < best_update
            stopped += stop < curve[-1][0]
        if stops:
            table.append({"interval": every * interval, "patience": patience, "runs": len(stops),
                          "mean_updates": sum(stops) / len(stops), "mean_past_selected": sum(overshoots) / len(stops),
                          "mean_bleu_lost": sum(losses) / len(stops), "largest_bleu_lost": max(losses),
                          "stopped_before_best": premature, "stopped_before_end": stopped})
    return table


def _up_to_the_first_that_stops_none(table: List[dict]) -> List[dict]:
    """The rows of :func:`stopping_rules` to print: at each interval, its patiences up to the first
    that stops no run before the end of its curve (a longer patience stops no earlier: the count of
    validations without a gain does not depend on it, only where it stops)."""
    rows, done = [], set()
    for row in table:
        if row["interval"] in done:
            continue
        rows.append(row)
        if not row["stopped_before_end"]:
            done.add(row["interval"])
    return rows


def replayable_rules(convergence) -> List[Tuple[int, int]]:
    """The rules :func:`stopping_rules` can replay on curves recorded under ``convergence``: each
    coarser interval (2x, 4x) and shorter patience whose window of updates without a gain is at
    most the recorded one (a run stopped after ``patience`` validations holds no points beyond)."""
    return [(every, patience) for every in (1, 2, 4) for patience in range(1, convergence.patience + 1)
            if every * patience <= convergence.patience]


def stopping_rules_note(curves: Dict[str, Sequence[Tuple[int, float]]], convergence) -> Tuple[str, List[dict]]:
    """The table of :func:`stopping_rules` over an experiment's runs, as a note (markdown) and JSON."""
    from .tables import fmt, markdown

    table = stopping_rules(curves, convergence.interval, replayable_rules(convergence), convergence.min_gain)
    shown = _up_to_the_first_that_stops_none(table)
    rows = [[str(r["interval"]), str(r["patience"]) + (" (run)" if (r["interval"], r["patience"]) == (
        convergence.interval, convergence.patience) else ""), fmt(r["mean_updates"], 0),
             fmt(r["mean_past_selected"], 0), fmt(r["mean_bleu_lost"]), fmt(r["largest_bleu_lost"]),
             f"{r['stopped_before_best']}/{r['runs']}"] for r in shown]
    gain = f" (a gain: more than {convergence.min_gain:g}, as the runs counted it)" if convergence.min_gain else ""
    omitted = (" Each interval's longer patiences, which stop no run before the end of its curve either, are left "
               "out." if len(shown) < len(table) else "")
    text = ("Other stopping rules replayed on these runs' recorded validation curves (every run's curve; a rule "
            f"validates at every k-th recorded point and stops after its patience{gain}; BLEU lost: the run's best "
            f"validation s-BLEU minus the one the rule would keep).{omitted}\n\n" +
            markdown(["interval", "patience", "mean updates", "mean updates past the kept one", "mean BLEU lost",
                      "largest BLEU lost", "runs stopped before their best"], rows))
    return text, table


def capped_runs_note(runs: Dict[str, Optional[dict]], convergence, last: int = 4) -> Optional[str]:
    """A note on the runs the cap stopped ({name: :func:`run_convergence`}): each one's last
    validations, and where the budget's own rule, replayed on its curve, stops it (a run trained
    under an earlier rule, such as no minimum gain, can have passed that point), with the score it
    keeps there against its best. None when the cap stopped no run."""
    from .tables import fmt

    lines = []
    for name, summary in runs.items():
        if not summary or not summary["reached_cap"]:
            continue
        curve = summary["curve"]
        stop, kept_update, kept_score = replay(curve, 1, convergence.patience, convergence.min_gain)
        tail = ", ".join(f"{updates}: {fmt(score)}" for updates, score in curve[-last:])
        best = f"its best {fmt(summary['best_valid_bleu'])} at {summary['best_update']}"
        if stop < curve[-1][0]:
            rule = (f"the budget's rule replayed on its curve stops it at {stop}, keeping {fmt(kept_score)} (at "
                    f"{kept_update}), {fmt(summary['best_valid_bleu'] - kept_score)} below {best}")
        else:
            rule = f"the budget's rule replayed on its curve does not stop it: still improving at the cap ({best})"
        lines.append(f"* {name}: validation s-BLEU {tail}; {rule}.")
    if not lines:
        return None
    return ("Trained to the cap (the run's row reports where the cap left it; read its curve, and leave it out of "
            "verdicts the rest of its curve could change):\n\n" + "\n".join(lines))
