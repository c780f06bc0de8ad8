"""Table 1's question on real text (the ``bible`` experiment): the transformer and RFA at L = 1 and
4, RFA-sgate, RFA with 2 local cross heads and RFA with 2 local cross and 2 local causal heads at
L = 4, each trained until it stops improving, three seeds of every system at L = 4; each system
against the transformer of its L seed by seed, L = 4 against L = 1 for the transformer and RFA, the
local cross heads against RFA and the local causal heads against the local cross heads alone
(paired bootstrap: s-BLEU, d-BLEU and the contrastive pronoun accuracy), with verdicts over the
seeds, sample efficiency and cost."""

import os
from typing import Dict, List, Optional, Sequence, Tuple

from .context_length import direction, peak_training_mb, seconds_per_update, verdict
from .papers import row_seed
from .tables import (
    CONVERGENCE_HEADER,
    TABLE1_METRICS,
    compare_seeds,
    convergence_cells,
    convergence_json,
    fmt,
    fmt_comparison,
    fmt_spread,
    markdown,
    pooled,
    spread,
)

# labels of the families (the rows are FAMILY_L<window>)
BIBLE_FAMILIES = {"transformer": "Transformer", "rfa": "RFA", "rfa_sgate": "RFA-sgate",
                  "rfa_cross_local": "RFA + 2 local cross heads",
                  "rfa_local": "RFA + 2 local cross and causal heads"}
# what trains first: the transformer and the remedy at L = 4, then RFA at L = 4, then L = 1, then RFA-sgate,
# then the remedy with local causal heads too (where the remedy loses: its causal attention?)
BIBLE_ORDER = (("transformer_L4", "rfa_cross_local_L4"), ("rfa_L4",), ("transformer_L1", "rfa_L1"),
               ("rfa_sgate_L4",), ("rfa_local_L4",))
# the comparisons beside the one with the transformer of the same L: (name, row → its baseline row, title)
COMPARISONS = (
    ("against_transformer", lambda row: None if row.startswith("transformer_") else
     f"transformer_L{row.rsplit('_L', 1)[1]}", "against the transformer of the same L"),
    ("against_L1", lambda row: f"{row.rsplit('_L', 1)[0]}_L1" if row in ("transformer_L4", "rfa_L4") else None,
     "L = 4 against L = 1 of the same family"),
    ("against_rfa", lambda row: "rfa_L4" if row == "rfa_cross_local_L4" else None,
     "the local cross heads against RFA"),
    ("against_cross_local", lambda row: "rfa_cross_local_L4" if row == "rfa_local_L4" else None,
     "the local causal heads against the local cross heads alone"),
)
MEASURES = tuple(metric for metric, _ in TABLE1_METRICS)  # s_bleu, d_bleu, pooled_consistency
MEASURE_NAMES = {"s_bleu": "s-BLEU", "d_bleu": "d-BLEU", "pooled_consistency": "pronoun accuracy"}


def grouped_seeds(systems) -> Dict[str, List[Tuple[int, object]]]:
    """{row: [(seed, System)]} of the rows named ``ROW`` and ``ROW_seedN``, rows in order."""
    groups: Dict[str, List[Tuple[int, object]]] = {}
    for row_id, system in systems:
        base, seed = row_seed(row_id)
        groups.setdefault(base, []).append((seed, system))
    return groups


def window_of(row: str) -> str:
    return row.rsplit("_L", 1)[1]


def accuracy(result: dict, phenomenon: str) -> Optional[float]:
    return ((result.get("consistency") or {}).get(phenomenon) or {}).get("accuracy")


def table_bible(context) -> Tuple[str, list]:
    groups = grouped_seeds(context.systems)
    results = context.results
    first = results[groups[next(iter(groups))][0][1].key]
    phenomena = [name for name in (first.get("consistency") or {}) if name != "pooled"]
    summary_rows, run_rows, json_rows = [], [], []
    for row, seeded in groups.items():
        label, window = BIBLE_FAMILIES[row.rsplit("_L", 1)[0]], window_of(row)
        runs = []
        for seed, system in seeded:
            result = results[system.key]
            run_dir = os.path.join(context.runs, system.key) if context.runs else ""
            figures = {"seed": seed, "run": system.key, "s_bleu": result["s_bleu"], "d_bleu": result["d_bleu"],
                       "pooled_consistency": pooled(result),
                       "accuracy_by_phenomenon": {p: accuracy(result, p) for p in phenomena},
                       "seconds_per_update": seconds_per_update(run_dir) if run_dir else None,
                       "peak_training_mb": peak_training_mb(run_dir) if run_dir else None,
                       "convergence": result.get("convergence")}
            runs.append(figures)
            trained = convergence_cells([figures["convergence"]]) if context.converged else ["—"] * len(
                CONVERGENCE_HEADER)
            run_rows.append([label, window, str(seed), *trained, fmt(figures["s_bleu"]), fmt(figures["d_bleu"]),
                             fmt(figures["pooled_consistency"], 1)]
                            + [fmt(figures["accuracy_by_phenomenon"][p], 1) for p in phenomena]
                            + [fmt(figures["seconds_per_update"], 2), fmt(figures["peak_training_mb"], 0)])
        summary = {metric: spread([run[metric] for run in runs]) for metric in MEASURES}
        entry = {"row": row, "system": label, "config": seeded[0][1].config, "L": int(window),
                 "seeds": [{k: v for k, v in run.items() if k != "convergence"} for run in runs], **summary,
                 "seconds_per_update": spread([run["seconds_per_update"] for run in runs]),
                 "peak_training_mb": spread([run["peak_training_mb"] for run in runs])}
        if context.converged:
            entry["convergence"] = convergence_json([run["convergence"] for run in runs])
        for name, baseline_of, _ in COMPARISONS:
            baseline = baseline_of(row)
            if baseline in groups and context.runs:
                entry[name] = {"baseline_row": baseline,
                               "per_seed": compare_seeds(context.runs, groups[baseline], seeded)}
        json_rows.append(entry)
        summary_rows.append([label, window, str(len(runs))] + [fmt_spread(summary[m], d) for m, d in TABLE1_METRICS]
                            + against_cells(entry.get("against_transformer")))
    found = verdicts(json_rows, results, groups)
    context.extra["verdicts"] = found
    table = markdown(["system", "L", "seeds", "s-BLEU", "d-BLEU", "pronoun accuracy",
                      "Δ s-BLEU against the transformer, each seed [95% interval]"], summary_rows, right_from=1)
    trained_header = CONVERGENCE_HEADER if context.converged else ["—"] * len(CONVERGENCE_HEADER)
    context.notes.append("Every run:\n\n" + markdown(
        ["system", "L", "seed", *trained_header, "s-BLEU", "d-BLEU", "pronoun acc."] + [f"acc. {p}" for p in phenomena]
        + ["s / update", "peak train MB"], run_rows))
    for name, _, title in COMPARISONS:
        lines = [[entry["system"], str(entry["L"]), str(compared["seed"])]
                 + [cell for metric, digits in TABLE1_METRICS for cell in fmt_comparison(compared.get(metric), digits)]
                 for entry in json_rows for compared in (entry.get(name) or {}).get("per_seed", [])]
        if lines:
            context.notes.append(f"{title[0].upper()}{title[1:]}, seed by seed (difference = system − baseline, its "
                                 "95% interval, p):\n\n" + markdown(
                                     ["system", "L", "seed", "Δ s-BLEU [95% interval]", "p", "Δ d-BLEU [95% interval]",
                                      "p", "Δ pronoun accuracy [95% interval]", "p"], lines, right_from=1))
    if found:
        context.notes.append(verdicts_note(json_rows, found))
    context.notes.append(
        "Pronoun accuracy (%): the contrastive pronoun set of the held-out (valid and test) chapters (docs/data.md), "
        "the reference against the same verse with the pronoun's gender flipped, pooled and per phenomenon; "
        "chance is 50. "
        "Cost: s / update is the median over the logged training intervals of the training steps' wall time per "
        "update (validations and checkpoint saves excluded; two runs shared the machine's two cores, one torch "
        "thread each); peak train MB is the training process's peak resident memory.")
    context.plot = bible_plot(json_rows, context.png_path)
    return table, json_rows


def against_cells(against: Optional[dict]) -> List[str]:
    if not against or not against["per_seed"]:
        return ["—"]
    return ["; ".join(fmt_comparison(compared["s_bleu"])[0] for compared in against["per_seed"])]


def capped(result: Optional[dict]) -> bool:
    return bool(result and (result.get("convergence") or {}).get("reached_cap"))


def last_update(result: Optional[dict]) -> Optional[int]:
    return ((result or {}).get("convergence") or {}).get("last_update")


def verdicts(json_rows: Sequence[dict], results: Dict[str, dict], groups) -> Dict[str, dict]:
    """Per row and comparison, what its seeds say together on each measure (context_length.verdict:
    every seed, or most of three or more); a seed whose run or baseline run the cap stopped is left
    out (``capped``): a run still learning says nothing about where it ends. Where both runs of a
    seed reached the same cap, the two had the same budget, and what those seeds say together is
    kept apart (``at_cap``): a comparison at that budget, not of converged models."""
    keys = {row: dict(seeded) for row, seeded in groups.items()}
    found: Dict[str, dict] = {}
    for entry in json_rows:
        for name, _, _ in COMPARISONS:
            against = entry.get(name)
            if not against or not against["per_seed"]:
                continue
            seeds, left_out, directions = [], [], {measure: [] for measure in MEASURES}
            both_capped, at_cap = [], {measure: [] for measure in MEASURES}
            for compared in against["per_seed"]:
                seed = compared["seed"]
                run = results[keys[entry["row"]][seed].key]
                baseline = results[keys[against["baseline_row"]][seed].key]
                if capped(run) or capped(baseline):
                    left_out.append(seed)
                    if capped(run) and capped(baseline) and last_update(run) == last_update(baseline):
                        both_capped.append(seed)
                        for measure in MEASURES:
                            if compared.get(measure):
                                at_cap[measure].append(direction(compared[measure]))
                    continue
                seeds.append(seed)
                for measure in MEASURES:
                    if compared.get(measure):
                        directions[measure].append(direction(compared[measure]))
            said = {"baseline_row": against["baseline_row"], "seeds": seeds, "capped": left_out,
                    **{measure: verdict(found_directions) for measure, found_directions in directions.items()}}
            if both_capped:
                said["at_cap"] = {"seeds": both_capped,
                                  "updates": last_update(results[keys[entry["row"]][both_capped[0]].key]),
                                  **{measure: verdict(capped_directions)
                                     for measure, capped_directions in at_cap.items()}}
            found.setdefault(entry["row"], {"system": entry["system"], "L": entry["L"]})[name] = said
    return found


def verdicts_note(json_rows: Sequence[dict], found: Dict[str, dict]) -> str:
    def cell(figures: dict) -> str:
        said = figures["verdict"]
        if said == "disagree":
            return f"seeds disagree ({', '.join(figures['seeds'])}): {figures['seeds_to_decide']} seeds decide"
        if said == "none":
            return "—"
        return f"{said} ({figures['seeds'].count(said)} of {len(figures['seeds'])})"

    lines = []
    for row in found.values():
        for name, _, title in COMPARISONS:
            if name in row:
                lines.append([row["system"], str(row["L"]), title,
                              *[cell(row[name][measure]) for measure in MEASURES]])
                at_cap = row[name].get("at_cap")
                if at_cap:
                    lines.append([row["system"], str(row["L"]), f"{title}, both at the cap ({at_cap['updates']} "
                                  "updates: an equal budget, not converged)",
                                  *[cell(at_cap[measure]) for measure in MEASURES]])
    return ("Verdicts, each row's seeds together: above or below where a seed's 95% interval excludes zero on that "
            "side, level where it contains zero; the verdict every seed gives, or with three seeds or more the one "
            "most give (how many: in brackets); where they disagree, one more seed decides. A seed stopped by the "
            "cap, or compared with a run stopped by it, is left out; where both runs of a seed reached the same "
            "cap, what those seeds say is on a line of its own, a comparison at that budget.\n\n"
            + markdown(["system", "L", "comparison", *[MEASURE_NAMES[m] for m in MEASURES]], lines))


def bible_plot(json_rows: Sequence[dict], path: str) -> str:
    """One panel per measure (s-BLEU, d-BLEU, pronoun accuracy): each system's seeds as dots and
    their mean as a horizontal line, the systems in the table's order. The axis starts near the
    lowest value, not at zero, so no bar is drawn: its height would overstate the differences."""
    from ..provenance import pyplot, save_figure

    plt = pyplot()
    figure, axes = plt.subplots(1, len(MEASURES), figsize=(12, 4.2))
    names = [f"{row['system']}\nL={row['L']}" for row in json_rows]
    for axis, measure in zip(axes, MEASURES):
        for index, row in enumerate(json_rows):
            values = [seed[measure] for seed in row["seeds"] if seed[measure] is not None]
            if not values:
                continue
            colour = "C0" if row["system"] == BIBLE_FAMILIES["transformer"] else f"C{1 + index % 9}"
            axis.hlines(sum(values) / len(values), index - 0.3, index + 0.3, color=colour, linewidth=2)
            axis.scatter([index] * len(values), values, color=colour, s=12, zorder=3)
        if measure == "pooled_consistency":
            axis.axhline(50, color="grey", linewidth=0.8, linestyle="--")
        axis.set_xticks(range(len(names)), names, fontsize=7, rotation=30, ha="right")
        axis.set_title(MEASURE_NAMES[measure], fontsize=10)
        values = [seed[measure] for row in json_rows for seed in row["seeds"] if seed[measure] is not None]
        if values:  # the differences are tenths: the axis starts near the lowest value
            low, high = min(values), max(values)
            margin = max(0.5, 0.15 * (high - low))
            axis.set_ylim(low - margin, high + margin)
    figure.suptitle("The Bible en-es: each seed (dots) and the mean (line)", fontsize=10)
    figure.tight_layout()
    save_figure(figure, path)
    return path
