"""The context-length experiment's table and figure: contrastive accuracy per antecedent distance
bucket, BLEU, and what each system costs (training seconds per update, peak training memory,
decoding speed), per method and window size L, on the long-range corpus."""

import math
import os
import re
import statistics
from collections import Counter
from typing import Dict, List, Optional, Sequence, Tuple

from ..data.io import DataError
from ..data.synthetic import bucket_name, distance_buckets
from .papers import LONG_RANGE_CORPUS, row_seed
from .running import ALONE
from .tables import (
    CONVERGENCE_HEADER,
    convergence_cells,
    convergence_json,
    fmt,
    fmt_comparison,
    markdown,
    read_json,
    updates_cell,
    updates_json,
)

# the long-range corpus's largest antecedent distance
MAX_DISTANCE = int(LONG_RANGE_CORPUS[LONG_RANGE_CORPUS.index("--max-distance") + 1])
BUCKETS = distance_buckets(MAX_DISTANCE)  # (1, 1), (2, 3), (4, 7), (8, 14)
Z95 = 1.959964
CHANCE = 50.0  # two candidates per example


def wilson(correct: int, examples: int) -> Tuple[float, float]:
    """The 95% Wilson score interval of a proportion, in percent."""
    p = correct / examples
    centre = (p + Z95 ** 2 / (2 * examples)) / (1 + Z95 ** 2 / examples)
    half = Z95 * math.sqrt(p * (1 - p) / examples + Z95 ** 2 / (4 * examples ** 2)) / (1 + Z95 ** 2 / examples)
    return 100 * (centre - half), 100 * (centre + half)


def bucket_accuracy(consistency: dict, phenomena: Sequence[str], bucket: Tuple[int, int]) -> Optional[dict]:
    """Accuracy over the examples of ``phenomena`` whose antecedent lies ``bucket`` sentences
    back (consistency.json's per-distance counts), with its 95% interval; None without examples."""
    correct = examples = 0
    for phenomenon in phenomena:
        for distance, figures in consistency[phenomenon]["by_ctx_dist"].items():
            if bucket[0] <= int(distance) <= bucket[1]:
                examples += figures["examples"]
                correct += int(round(figures["accuracy"] * figures["examples"] / 100))
    if not examples:
        return None
    low, high = wilson(correct, examples)
    return {"accuracy": 100 * correct / examples, "examples": examples, "interval": [low, high]}


def fmt_accuracy(figures: Optional[dict]) -> str:
    if figures is None:
        return "—"
    low, high = figures["interval"]
    return f"{figures['accuracy']:.1f} ±{max(figures['accuracy'] - low, high - figures['accuracy']):.1f}"


# ---------------------------------------------------------------------------------------
# costs, read from a run's files

TRAIN_INNER = re.compile(r"\| train_inner \|.*?ups=(?P<ups>[0-9.]+).*?num_updates=(?P<updates>[0-9]+)"
                         r"(?:.*?train_wall=(?P<wall>[0-9.]+))?")
TRANSLATED = re.compile(r"Translated (?P<windows>[0-9,]+) sentences \((?P<tokens>[0-9,]+) tokens\) in "
                        r"(?P<seconds>[0-9.]+)s")


def seconds_per_update(run_dir: str) -> Optional[float]:
    """The median over the run's logged training intervals of the training steps' wall time per
    update (fairseq's train_wall, the time inside its train_step, over the log interval's updates):
    validations and checkpoint saves fall outside it, and a pause of the process in few intervals.
    Where every interval's train_wall rounds to 0 s (intervals of a few fast updates), 1 / the
    mean of fairseq's updates per second over the intervals instead."""
    path = os.path.join(run_dir, "train.log")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8", errors="replace") as handle:
        found = [m for m in map(TRAIN_INNER.search, handle) if m]
    steps = [int(m["updates"]) for m in found]
    gaps = [b - a for a, b in zip(steps, steps[1:]) if b > a]
    interval = max(set(gaps), key=gaps.count) if gaps else (steps[0] if steps else 0)
    walls = [float(m["wall"]) / interval for m in found if m["wall"] is not None and interval > 0]
    if walls and statistics.median(walls) > 0:
        return statistics.median(walls)
    rates = [float(m["ups"]) for m in found if float(m["ups"]) > 0]
    return 1 / (sum(rates) / len(rates)) if rates else None


def training_minutes(result: dict, run_dir: str, parent_dir: Optional[str] = None) -> Optional[float]:
    """Minutes of training steps: the updates the run trained times its :func:`seconds_per_update`
    (a fine-tuned run: its first stage's too, at that run's own rate); validations left out."""
    stages = [(result.get("updates"), run_dir)]
    if parent_dir is not None:
        stages.append((result.get("stage1_updates"), parent_dir))
    seconds = 0.0
    for updates, directory in stages:
        per_update = seconds_per_update(directory)
        if updates is None or per_update is None:
            return None
        seconds += updates * per_update
    return seconds / 60


def peak_training_mb(run_dir: str) -> Optional[float]:
    """The training process's peak resident memory (fairseq_command's train.resources.json)."""
    path = os.path.join(run_dir, "train.resources.json")
    return read_json(path)["peak_resident_mb"] if os.path.isfile(path) else None


def decoding_speed(run_dir: str) -> Optional[dict]:
    """Tokens and sentences of the kept translations (each window's last sentence) per second of
    decoding the test split, from fairseq-generate's summary line and the hypotheses written: of
    the decoding alone on the machine (running.decode_alone) where there is one, else of the run's
    own. ``alone`` says which."""
    alone = os.path.join(run_dir, ALONE)
    decoded_alone = os.path.isfile(os.path.join(alone, "test.decode.json"))
    speed = speed_of(alone if decoded_alone else run_dir)
    return None if speed is None else {**speed, "alone": decoded_alone}


OWN_MARK = " †"


def own_mark(speed: Optional[dict]) -> str:
    """A mark for a speed that is not of the decoding timed alone."""
    return OWN_MARK if speed is not None and not speed["alone"] else ""


def speed_of(folder: str) -> Optional[dict]:
    path = os.path.join(folder, "test.generate.err")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8", errors="replace") as handle:
        found = [m for m in map(TRANSLATED.search, handle) if m]
    if not found:
        return None
    last = found[-1]
    seconds = float(last["seconds"])
    tokens = int(last["tokens"].replace(",", ""))
    sentences = None
    hypotheses = os.path.join(folder, "test.hyp")
    if os.path.isfile(hypotheses):
        with open(hypotheses, encoding="utf-8") as handle:
            sentences = sum(1 for _ in handle)
    return {"seconds": seconds, "tokens": tokens, "tokens_per_second": tokens / seconds if seconds else None,
            "sentences_per_second": sentences / seconds if sentences and seconds else None}


# ---------------------------------------------------------------------------------------
# the table


def learned_phenomena(results: Dict[str, dict], keys: Sequence[str], phenomena: Sequence[str]) -> List[str]:
    """The phenomena some system learned at distance 1: its 95% interval there lies above chance."""
    learned = []
    for phenomenon in phenomena:
        for key in keys:
            figures = bucket_accuracy(results[key]["consistency"], [phenomenon], BUCKETS[0])
            if figures is not None and figures["interval"][0] > CHANCE:
                learned.append(phenomenon)
                break
    return learned


def table_context_length(context) -> Tuple[str, list]:
    keys = [system.key for _, system in context.systems]
    missing = [key for key in keys if "consistency" not in context.results[key]]
    if missing:
        raise DataError(f"context_length needs contrastive sets; no consistency results for {', '.join(missing)}")
    phenomena = [p for p in context.results[keys[0]]["consistency"] if p != "pooled"]
    learned = learned_phenomena(context.results, keys, phenomena)
    names = [bucket_name(b) for b in BUCKETS]
    rows, detail_rows, json_rows = [], [], []
    for row_id, system in context.systems:
        result = context.results[system.key]
        run_dir = os.path.join(context.runs, system.key)
        base_row, seed = row_seed(row_id)
        window = base_row.rsplit("_L", 1)[1] if "_L" in base_row else "document"
        pooled = {bucket_name(b): bucket_accuracy(result["consistency"], learned, b) if learned else None
                  for b in BUCKETS}
        per_phenomenon = {p: {bucket_name(b): bucket_accuracy(result["consistency"], [p], b) for b in BUCKETS}
                          for p in phenomena}
        speed = decoding_speed(run_dir)
        parent_dir = os.path.join(context.runs, system.starts_from) if system.starts_from else None
        cost = {"seconds_per_update": seconds_per_update(run_dir),
                "training_minutes": training_minutes(result, run_dir, parent_dir),
                "peak_training_mb": peak_training_mb(run_dir), "decoding": speed}
        trained = convergence_cells([result.get("convergence")]) if context.converged else [updates_cell(result)]
        rows.append([system.label.rsplit(" L=", 1)[0], window, str(seed), *trained, fmt(result["s_bleu"]),
                     fmt(result["d_bleu"])] + [fmt_accuracy(pooled[n]) for n in names]
                    + [fmt(cost["seconds_per_update"], 2), fmt(cost["training_minutes"], 0),
                       fmt(cost["peak_training_mb"], 0),
                       fmt(speed["tokens_per_second"] if speed else None, 0) + own_mark(speed),
                       fmt(speed["sentences_per_second"] if speed else None, 1) + own_mark(speed)])
        detail_rows.append([system.label.rsplit(" L=", 1)[0], window, str(seed)] + [
            " / ".join(fmt(per_phenomenon[p][n]["accuracy"] if per_phenomenon[p][n] else None, 0) for n in names)
            for p in phenomena])
        if context.converged:
            cost["convergence"] = convergence_json([result.get("convergence")])
        json_rows.append({"row": row_id, "run": system.key, "system": system.label, "config": system.config,
                          "L": window, "seed": seed,
                          "s_bleu": result["s_bleu"], "d_bleu": result["d_bleu"], **updates_json(result),
                          "accuracy_by_distance": pooled, "accuracy_by_phenomenon": per_phenomenon, **cost})
    against = against_transformer(context, learned)
    longer = against_short_window(context, learned)
    json_by_row = {row["row"]: row for row in json_rows}
    for name, comparisons in (("against_transformer", against), (f"against_L{SHORT_WINDOW}", longer)):
        for row_id, compared in comparisons.items():
            json_by_row[row_id][name] = compared
    bucket_headers = [f"acc. {n}" for n in names]
    trained_header = CONVERGENCE_HEADER if context.converged else ["updates"]
    table = markdown(["system", "L", "seed", *trained_header, "s-BLEU", "d-BLEU"] + bucket_headers
                     + ["s / update", "train min", "peak train MB", "decode tok/s", "decode sent/s"], rows)
    detail = markdown(["system", "L", "seed"] + [f"{p} ({' / '.join(names)})" for p in phenomena], detail_rows)
    examples = {n: (pooled_examples(context.results[keys[0]]["consistency"], learned, b)) for n, b in
                zip(names, BUCKETS)}
    context.notes.append(
        "Accuracy (%): contrastive pairs whose antecedent lies that many sentences back, pooled over the "
        f"phenomena some system learned at distance 1 (its 95% interval above {CHANCE:.0f}): "
        f"{', '.join(learned) or 'none'}; examples per bucket: "
        + ", ".join(f"{n}: {e}" for n, e in examples.items())
        + "; ± is the larger side of the 95% Wilson interval over examples (the two examples of a mirrored pair "
        "are counted as independent). Chance is 50. A window of L sentences sees antecedents up to L - 1 back; "
        "the memory model reads every earlier sentence of the example (14).")
    context.notes.append(
        "Cost: s / update is the median over the logged training intervals of the training steps' wall time per "
        "update (fairseq's train_wall: validations and checkpoint saves excluded; two runs shared the machine's two"
        " cores, one torch thread each); train min is the updates trained times s / update (the memory model: both "
        "stages, each at its own rate), validations left out; peak train MB is the training process's peak resident"
        " memory (model, optimiser, Python and torch included); decode tok/s and sent/s are the tokens and "
        "sentences of the kept translations per second of fairseq-generate's decoding of the test split (beam 4, 64"
        " windows a batch), decoded once more after the training, one run at a time alone on the machine with one "
        "torch thread: a window of L sentences generates all L to keep its last, so both fall with L. BLEU: the "
        "long-range test split, 12 documents (466 sentences), the same for every system.")
    if any(row[-1].endswith(OWN_MARK) for row in rows):
        context.notes.append(
            f"{OWN_MARK.strip()} the speed of the run's own decoding, beside another run's training: the run was "
            "restored from what was kept of it (--keep) without the checkpoint to time it alone.")
    context.notes.append("Per phenomenon (accuracy per distance bucket):\n\n" + detail)
    if against:
        labels = {row_id: system.label.rsplit(" L=", 1)[0] for row_id, system in context.systems}
        rows_against = [[labels[row_id], compared["L"], str(compared["seed"]),
                         *fmt_comparison(compared["s_bleu"]), *fmt_comparison(compared["far"], 1)]
                        for row_id, compared in against.items()]
        far = next(iter(against.values()))["far"]
        context.notes.append(
            f"Against the transformer of the same L and seed (the memory model: against the transformer at L = 15 "
            f"of its seed; difference = system − transformer, its 95% interval, p): s-BLEU on the test split "
            f"(sacrebleu's paired bootstrap), and accuracy {FAR_BUCKET[0]}-{FAR_BUCKET[1]} sentences back over the "
            f"learned phenomena ({far['units']} {far['unit_name']}, a paired bootstrap; `python -m "
            f"rfa_doc_mt.scoring.compare --distances {FAR_BUCKET[0]}-{FAR_BUCKET[1]} --phenomena ...`):\n\n" +
            markdown(["system", "L", "seed", "Δ s-BLEU [95% interval]", "p",
                      f"Δ acc. {FAR_BUCKET[0]}-{FAR_BUCKET[1]} [95% interval]", "p"], rows_against))
    if longer:
        labels = {row_id: system.label.rsplit(" L=", 1)[0] for row_id, system in context.systems}
        rows_longer = [[labels[row_id], compared["L"], str(compared["seed"]), *fmt_comparison(compared["s_bleu"])]
                       for row_id, compared in longer.items()]
        context.notes.append(
            f"Longer windows against L = {SHORT_WINDOW}, each family against its own row at L = {SHORT_WINDOW} (its "
            f"first seed; difference = longer − L = {SHORT_WINDOW}, its 95% interval, p): s-BLEU on the test split "
            f"(sacrebleu's paired bootstrap). At {FAR_BUCKET[0]}-{FAR_BUCKET[1]} sentences back a window of "
            f"{SHORT_WINDOW} is at chance by construction: the accuracy columns say what the longer windows add "
            "there.\n\n" + markdown(["system", "L", "seed", "Δ s-BLEU [95% interval]", "p"], rows_longer))
    found = verdicts(context, against, longer)
    if found:
        context.extra["verdicts"] = found
        context.notes.append(verdicts_note(context, found))
    context.plot = context_length_plot(context.systems, json_rows, names, context.png_path)
    context.extra["learned_phenomena"] = learned
    return table, json_rows


FAR_BUCKET = BUCKETS[-1]  # 8-14 sentences back: what only the longest windows and the memory can see


def against_transformer(context, learned: Sequence[str]) -> Dict[str, dict]:
    """Each row against the transformer of its L and seed (the memory model against the transformer
    at L = 15 of its seed), as the compare command compares two runs: s-BLEU and the accuracy
    FAR_BUCKET sentences back over the ``learned`` phenomena. {row id: comparisons as JSON};
    empty where the transformer's rows or the runs are not there."""
    def baseline(base_row: str, seed: int) -> Optional[str]:
        if base_row.startswith("transformer_"):
            return None
        window = base_row.rsplit("_L", 1)[1] if "_L" in base_row else "15"
        return f"transformer_L{window}" + (f"_seed{seed}" if seed > 1 else "")

    return paired_comparisons(context, learned, baseline)


SHORT_WINDOW = 4  # the paper's L: what a longer window is compared with


def against_short_window(context, learned: Sequence[str]) -> Dict[str, dict]:
    """Each window row longer than SHORT_WINDOW sentences against its family's row at SHORT_WINDOW
    (its first seed: the shorter windows train one): does the longer window help the family? The
    same comparisons as :func:`against_transformer`."""
    def baseline(base_row: str, seed: int) -> Optional[str]:
        family, _, window = base_row.rpartition("_L")
        if not family or not window.isdigit() or int(window) <= SHORT_WINDOW:
            return None
        return f"{family}_L{SHORT_WINDOW}"

    return paired_comparisons(context, learned, baseline)


def paired_comparisons(context, learned: Sequence[str], baseline_of) -> Dict[str, dict]:
    """Each row against the row ``baseline_of(base row, seed)`` names (None: not compared), as the
    compare command compares two runs: s-BLEU and the accuracy FAR_BUCKET sentences back over the
    ``learned`` phenomena. {row id: comparisons as JSON}; empty without learned phenomena or runs."""
    from ..scoring.compare import compare_runs

    rows = dict(context.systems)
    compared = {}
    if not learned or not getattr(context, "runs", None):
        return compared
    for row_id, system in context.systems:
        base_row, seed = row_seed(row_id)
        baseline = baseline_of(base_row, seed)
        if baseline is None or baseline not in rows:
            continue
        comparisons = compare_runs(os.path.join(context.runs, rows[baseline].key),
                                   os.path.join(context.runs, system.key), phenomena=learned, distances=FAR_BUCKET)
        window = base_row.rsplit("_L", 1)[1] if "_L" in base_row else "document"
        compared[row_id] = {"baseline_row": baseline, "L": window, "seed": seed,
                            "s_bleu": comparisons[0].as_dict(), "far": comparisons[-1].as_dict()}
    return compared


# ---------------------------------------------------------------------------------------
# verdicts: what the seeds of a row say together


def direction(comparison: dict) -> str:
    """A paired comparison's verdict: "above" or "below" where its 95% interval excludes zero on
    that side, else "level"."""
    low, high = comparison["interval"]
    return "above" if low > 0 else "below" if high < 0 else "level"


def verdict(directions: Sequence[str]) -> dict:
    """What a row's seeds say together: the direction every seed gives, or (three seeds or more)
    the one most of them give; else that they disagree, and how many seeds would decide it (one
    more). {"verdict": direction or "disagree" (or "none": no seed), "seeds": [each seed's direction]}."""
    if not directions:
        return {"verdict": "none", "seeds": []}
    top, count = Counter(directions).most_common(1)[0]
    if count == len(directions) or (len(directions) >= 3 and count > len(directions) / 2):
        return {"verdict": top, "seeds": list(directions)}
    return {"verdict": "disagree", "seeds": list(directions), "seeds_to_decide": len(directions) + 1}


def reached_cap(result: Optional[dict]) -> bool:
    return bool(result and (result.get("convergence") or {}).get("reached_cap"))


def verdicts(context, against: Dict[str, dict], longer: Dict[str, dict]) -> Dict[str, dict]:
    """Per row (its seeds together): the verdict against the transformer of the same L on s-BLEU and
    on accuracy FAR_BUCKET sentences back, and (windows longer than SHORT_WINDOW) against the
    family's SHORT_WINDOW on s-BLEU. A seed whose run, or the run it is compared with, was stopped
    by the cap is left out of that comparison (its ``capped`` seeds): a run still learning says
    nothing about where it ends. A window that cannot see FAR_BUCKET sentences back gets no accuracy
    verdict there (both sides are at chance by construction). Rows with no comparison are left out."""
    rows = dict(context.systems)
    grouped: Dict[str, dict] = {}
    for name, comparisons, measures in (("against_transformer", against, ("s_bleu", "far")),
                                        (f"against_L{SHORT_WINDOW}", longer, ("s_bleu",))):
        for row_id, compared in comparisons.items():
            base_row, seed = row_seed(row_id)
            measured = [measure for measure in measures if measure != "far" or sees_far(compared["L"])]
            entry = grouped.setdefault(base_row, {"L": compared["L"]}).setdefault(
                name, {"seeds": [], "capped": [], "directions": {measure: {} for measure in measured}})
            if reached_cap(context.results[rows[row_id].key]) or \
                    reached_cap(context.results[rows[compared["baseline_row"]].key]):
                entry["capped"].append(seed)
                continue
            entry["seeds"].append(seed)
            for measure in measured:
                entry["directions"][measure][seed] = direction(compared[measure])
    for row in grouped.values():
        for name in ("against_transformer", f"against_L{SHORT_WINDOW}"):
            if name in row:
                entry = row[name]
                entry["seeds"].sort()
                entry["capped"].sort()
                for measure, directions in entry.pop("directions").items():
                    entry[measure] = verdict([directions[seed] for seed in entry["seeds"]])
                    if "seeds_to_decide" in entry[measure]:  # the capped seeds are trained too: one past them
                        entry[measure]["seeds_to_decide"] += len(entry["capped"])
    return grouped


def sees_far(window) -> bool:
    """Whether a window of ``window`` sentences reaches antecedents FAR_BUCKET sentences back (it sees
    window - 1 back); the memory model (L = "document") reads every earlier sentence."""
    try:
        return int(window) - 1 >= FAR_BUCKET[0]
    except (TypeError, ValueError):
        return True


def verdicts_note(context, found: Dict[str, dict]) -> str:
    labels = {row_seed(row_id)[0]: system.label.rsplit(" L=", 1)[0] for row_id, system in context.systems}

    def cell(row: dict, name: str, measure: str) -> str:
        entry = row.get(name)
        if entry is None:
            return "—"
        if measure not in entry:
            return "— (both at chance: out of the window's reach)" if measure == "far" else "—"
        figures = entry[measure]
        said = figures["verdict"]
        capped = f"; seed {', '.join(map(str, entry['capped']))} capped" if entry["capped"] else ""
        if said == "disagree":
            return (f"seeds disagree ({', '.join(figures['seeds'])}{capped}): {figures['seeds_to_decide']} seeds "
                    "decide")
        if said == "none":
            return f"none (seed {', '.join(map(str, entry['capped']))} capped)"
        return f"{said} ({figures['seeds'].count(said)} of {len(figures['seeds'])}{capped})"

    far = f"{FAR_BUCKET[0]}-{FAR_BUCKET[1]}"
    rows = [[labels[row_id], row["L"], cell(row, "against_transformer", "s_bleu"),
             cell(row, "against_transformer", "far"), cell(row, f"against_L{SHORT_WINDOW}", "s_bleu")]
            for row_id, row in found.items()]
    return ("Verdicts, each row's seeds together: above or below where a seed's 95% interval (the comparisons "
            "above) excludes zero on that side, level where it contains zero; the verdict every seed gives, or "
            "with three seeds or more the one most give (how many of them: in brackets); where they disagree, one "
            "more seed decides (`--row-seeds ROW=N`, with the transformer's row at the same N). A seed stopped by "
            "the cap, or compared with a run stopped by it, is left out (capped).\n\n"
            + markdown(["system", "L", "s-BLEU against the transformer", f"acc. {far} against the transformer",
                        f"s-BLEU against L = {SHORT_WINDOW}"], rows))


def pooled_examples(consistency: dict, phenomena: Sequence[str], bucket: Tuple[int, int]) -> int:
    figures = bucket_accuracy(consistency, phenomena, bucket) if phenomena else None
    return figures["examples"] if figures else 0


def context_length_plot(systems, json_rows: List[dict], names: Sequence[str], path: str) -> str:
    """Left: pooled accuracy against the antecedent's distance, a line per system and L. Right:
    accuracy at the farthest bucket against decoding speed."""
    from ..provenance import pyplot, save_figure

    plt = pyplot()  # before any other matplotlib import: it quiets matplotlib's logger
    import matplotlib.ticker

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    colours: Dict[str, str] = {}
    styles = {"1": ":", "4": "-.", "8": "--", "15": "-", "document": "-"}
    for row in json_rows:
        family = row["system"].rsplit(" L=", 1)[0]
        colour = colours.setdefault(family, f"C{len(colours)}")
        values = [row["accuracy_by_distance"][n]["accuracy"] if row["accuracy_by_distance"][n] else float("nan")
                  for n in names]
        label = (family if row["L"] == "document" else f"{family} L={row['L']}") + \
            (f" seed {row['seed']}" if row.get("seed", 1) > 1 else "")
        left.plot(range(len(names)), values, styles.get(row["L"], "-"), color=colour, marker="o", markersize=3,
                  label=label)
        far = row["accuracy_by_distance"][names[-1]]
        speed = row["decoding"]["sentences_per_second"] if row["decoding"] else None
        if far and speed:
            right.scatter(speed, far["accuracy"], color=colour)
            right.annotate(f"L={row['L']}" if row["L"] != "document" else "memory", (speed, far["accuracy"]),
                           fontsize=7, xytext=(3, 3), textcoords="offset points")
    for axis in (left, right):
        axis.axhline(CHANCE, color="grey", linewidth=0.8, linestyle="--")
    left.set_xticks(range(len(names)), names)
    left.set_xlabel("antecedent distance (sentences back)")
    left.set_ylabel("contrastive accuracy (%)")
    left.legend(fontsize="xx-small", ncol=2)
    right.set_xscale("log")
    right.xaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    right.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    right.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    right.set_xlabel("decoding speed (test sentences per second, log scale)")
    right.set_ylabel(f"accuracy at distance {names[-1]} (%)")
    for family, colour in colours.items():
        right.scatter([], [], color=colour, label=family)
    right.legend(fontsize="x-small")
    figure.tight_layout()
    save_figure(figure, path)
    return path
