"""Results of finished systems (scores, learning curves) and the tables and plots of every
experiment."""

import json
import os
import re
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..data.io import DataError
from .papers import (
    LSH_ATTENTIONS,
    PAPER_LSH_TABLE2,
    PAPER_MEMORY_TABLE1,
    PAPER_MEMORY_TABLE3,
    PAPER_RFA_SPEEDUP,
    PAPER_RFA_TABLE1,
    RFA_COMPARED_ROWS,
    SGATE_COMPARED_ROWS,
)


def fmt(value, digits: int = 2) -> str:
    if value is None:
        return "—"
    return value if isinstance(value, str) else f"{value:.{digits}f}"


def markdown(header: Sequence[str], rows: Sequence[Sequence[str]], right_from: int = 1) -> str:
    lines = ["| " + " | ".join(header) + " |",
             "|" + "".join(" --- |" if i < right_from else " ---: |" for i in range(len(header)))]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# results of finished systems


def read_json(path: str) -> dict:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def system_results(run_dir: str, parent_dir: Optional[str] = None) -> dict:
    """Scores, updates trained and learning curve of a finished run (``parent_dir``: the run it
    was fine-tuned from, whose updates and curve come first). BLEU is None for a run whose test
    split was not decoded (a system only Figure 3 shows)."""
    bleu_path = os.path.join(run_dir, "test.bleu.json")
    bleu = read_json(bleu_path) if os.path.isfile(bleu_path) else None
    result = {"s_bleu": bleu["s_bleu"]["score"] if bleu else None, "d_bleu": bleu["d_bleu"]["score"] if bleu else None,
              "bleu_signature": bleu["s_bleu"]["signature"] if bleu else None, "updates": trained_updates(run_dir),
              "curve": learning_curve(run_dir)}
    if parent_dir is not None:
        result["stage1_updates"], result["stage1_curve"] = trained_updates(parent_dir), learning_curve(parent_dir)
    consistency_path = os.path.join(run_dir, "consistency.json")
    if os.path.isfile(consistency_path):
        result["consistency"] = {name: {"accuracy": value["accuracy"], "random": value["random"],
                                        "examples": value.get("examples"), "by_ctx_dist": value.get("by_ctx_dist")}
                                 for name, value in read_json(consistency_path).items()}
    return result


VALID_LINE = re.compile(r"valid on '(?P<subset>[^']+)' subset \|.*?\| num_updates (?P<updates>\d+)")
UPDATES = re.compile(r"num_updates[ =](\d+)")
EPOCH_LENGTH = re.compile(r"train_inner \| epoch \d+: +\d+ / (\d+) ")


def learning_curve(run_dir: str, metric: str = "loss") -> List[Tuple[int, float]]:
    """[(updates, validation ``metric``)] from a run's train.log (fairseq's 'valid on' lines of the
    valid subset: ``loss``, or ``bleu`` with --eval-bleu), in order; a resumed run's repeated
    points are kept once."""
    path = os.path.join(run_dir, "train.log")
    value = re.compile(rf"\| {re.escape(metric)} (?P<value>[-0-9.]+) ")
    points: Dict[int, float] = {}
    if os.path.isfile(path):
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                match = VALID_LINE.search(line)
                found = value.search(line) if match and match["subset"] == "valid" else None
                if found:
                    points[int(match["updates"])] = float(found["value"])
    return sorted(points.items())


def updates_per_epoch(run_dir: str) -> Optional[int]:
    """Updates an epoch takes, from the first progress line of the run's train.log that says
    (fairseq's ``epoch 003:    262 / 1048``); None before the first one."""
    path = os.path.join(run_dir, "train.log")
    if os.path.isfile(path):
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                found = EPOCH_LENGTH.search(line)
                if found:
                    return int(found.group(1))
    return None


def trained_updates(run_dir: str) -> Optional[int]:
    """The number of updates the run trained (the last num_updates its train.log shows)."""
    path = os.path.join(run_dir, "train.log")
    last = None
    if os.path.isfile(path):
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                found = UPDATES.findall(line)
                if found:
                    last = int(found[-1])
    return last


def pooled(result: dict) -> Optional[float]:
    return result.get("consistency", {}).get("pooled", {}).get("accuracy")


def updates_cell(result: dict) -> str:
    """Updates the row's model trained: "K + F" for a model fine-tuned (F) from a K-update model."""
    own = fmt(result.get("updates"), 0) if result.get("updates") is not None else "?"
    if "stage1_updates" in result:
        stage1 = result["stage1_updates"]
        return f"{stage1 if stage1 is not None else '?'} + {own}"
    return own


def updates_json(result: dict) -> dict:
    return {"updates": result.get("updates"), "stage1_updates": result.get("stage1_updates")}


# ---------------------------------------------------------------------------------------
# the convergence budget's columns (convergence.py)

CONVERGENCE_HEADER = ["selected at", "stopped at", "to 95%", "to 99%", "cap"]


def convergence_cells(summaries: Sequence[Optional[dict]]) -> List[str]:
    """A row's convergence over its seeds (:func:`.convergence.convergence_summary` of each): the
    update of the checkpoint kept, the last update validated, the updates to 95% and 99% of each
    run's own best validation s-BLEU (mean ± standard deviation over seeds), and how many runs
    the cap stopped ("2/3": two of three seeds still improving when stopped)."""
    if not summaries or any(summary is None for summary in summaries):
        return ["—"] * len(CONVERGENCE_HEADER)
    cells = [fmt_spread(spread([s[key] for s in summaries]), 0)
             for key in ("best_update", "last_update", "updates_to_95", "updates_to_99")]
    capped = sum(s["reached_cap"] for s in summaries)
    return cells + [f"{capped}/{len(summaries)}" if capped else "—"]


def convergence_json(summaries: Sequence[Optional[dict]]) -> dict:
    """The figures of :func:`convergence_cells`, per seed and summarised (JSON)."""
    keys = ("best_update", "last_update", "updates_to_95", "updates_to_99", "best_valid_bleu")
    known = [s for s in summaries if s is not None]
    return {"per_seed": [None if s is None else {k: v for k, v in s.items() if k != "curve"} for s in summaries],
            **{key: spread([s[key] for s in known]) if len(known) == len(summaries) else None for key in keys},
            "reached_cap": sum(s["reached_cap"] for s in known)}


# ---------------------------------------------------------------------------------------
# tables


def spread(values: Sequence[Optional[float]]) -> Optional[dict]:
    """Mean and sample standard deviation (n - 1) over seeds; None where a value is missing."""
    if not values or any(value is None for value in values):
        return None
    mean = sum(values) / len(values)
    std = (sum((value - mean) ** 2 for value in values) / (len(values) - 1)) ** 0.5 if len(values) > 1 else None
    return {"mean": mean, "std": std, "n": len(values)}


def fmt_spread(summary: Optional[dict], digits: int = 2) -> str:
    if summary is None:
        return "—"
    if summary["std"] is None:
        return fmt(summary["mean"], digits)
    return f"{summary['mean']:.{digits}f} ± {summary['std']:.{digits}f}"


def fmt_comparison(comparison: Optional[dict], digits: int = 2) -> List[str]:
    """A comparison (scoring.compare.Comparison as JSON) as two cells: the difference with its
    95% interval, "+0.12 [-0.30, +0.55]", and p; dashes for none."""
    if comparison is None:
        return ["—", "—"]
    low, high = comparison["interval"]
    return [f"{comparison['difference']:+.{digits}f} [{low:+.{digits}f}, {high:+.{digits}f}]",
            f"{comparison['p_value']:.3f}"]


TABLE1_METRICS = (("s_bleu", 2), ("d_bleu", 2), ("pooled_consistency", 1))  # and the digits shown


def seed_figures(system, result: dict, seed: int) -> dict:
    return {"seed": seed, "run": system.key, "s_bleu": result["s_bleu"], "d_bleu": result["d_bleu"],
            "pooled_consistency": pooled(result), **updates_json(result)}


def compare_seeds(runs: str, baseline: Sequence, system: Sequence) -> List[dict]:
    """Each seed of ``system`` against the same seed of ``baseline`` ([(seed, System)] each; a
    seed the baseline lacks is not compared): s-BLEU, d-BLEU and pooled consistency
    (scoring.compare), as JSON."""
    from ..scoring.compare import compare_runs

    baseline_seeds = dict(baseline)
    compared = []
    for seed, other in system:
        if seed not in baseline_seeds:
            continue
        base = baseline_seeds[seed]
        comparisons = compare_runs(os.path.join(runs, base.key), os.path.join(runs, other.key))
        compared.append({"seed": seed, "baseline_run": base.key, "run": other.key,
                         **{metric: c.as_dict() for (metric, _), c in zip(TABLE1_METRICS, comparisons)}})
    return compared


def table_rfa_table1(context) -> Tuple[str, list]:
    """Table 1 with each row's seeds (mean ± standard deviation), each system compared with the
    transformer of its L seed by seed, and the search that chose the settings (embedded corpus)."""
    rows, json_rows, against, compared_any = [], [], [], None
    against_sgate = []  # the gates at every token against RFA-sgate (SGATE_COMPARED_ROWS)
    against_rfa = []  # the local cross heads against RFA (RFA_COMPARED_ROWS)
    chosen = context.search.chosen() if context.search else {}
    for row_id, system in context.systems:
        seeded = context.seeds[row_id]
        figures = [seed_figures(s, context.results[s.key], seed) for seed, s in seeded]
        summary = {metric: spread([f[metric] for f in figures]) for metric, _ in TABLE1_METRICS}
        iwslt, subtitles = PAPER_RFA_TABLE1[row_id]
        window = row_id.rsplit("_L", 1)[1]
        setting = chosen.get(row_id)
        result = context.results[system.key]
        converged = [context.results[s.key].get("convergence") for _, s in seeded] if context.converged else None
        trained = convergence_cells(converged) if converged is not None else [updates_cell(result)]
        rows.append([system.label, window, setting.label if setting else "config", *trained,
                     str(len(seeded))] + [fmt_spread(summary[m], d) for m, d in TABLE1_METRICS] +
                    [fmt(iwslt, 1), fmt(subtitles, 1)])
        entry = {"row": row_id, "system": system.label, "config": system.config, "L": int(window),
                 "setting": setting.as_dict() if setting else None, "seeds": figures, **summary,
                 **updates_json(result), "paper_bleu": {"iwslt15_zh_en": iwslt, "opensubtitles_en_ru": subtitles}}
        if converged is not None:
            entry["convergence"] = convergence_json(converged)
        baseline_row = f"transformer_L{window}"
        if row_id != baseline_row and baseline_row in context.seeds and context.runs:
            compared = compare_seeds(context.runs, context.seeds[baseline_row], seeded)
            entry["against"] = {"baseline_row": baseline_row, "per_seed": compared}
            for seed_comparison in compared:
                compared_any = compared_any or seed_comparison
                cells = [cell for metric, digits in TABLE1_METRICS
                         for cell in fmt_comparison(seed_comparison.get(metric), digits)]
                against.append([system.label, window, str(seed_comparison["seed"])] + cells)
        for rows_compared, base_row, key, lines in ((SGATE_COMPARED_ROWS, f"rfa_sgate_L{window}", "against_sgate",
                                                     against_sgate),
                                                    (RFA_COMPARED_ROWS, f"rfa_L{window}", "against_rfa", against_rfa)):
            if row_id in rows_compared and base_row in context.seeds and context.runs:
                compared = compare_seeds(context.runs, context.seeds[base_row], seeded)
                entry[key] = {"baseline_row": base_row, "per_seed": compared}
                for seed_comparison in compared:
                    cells = [cell for metric, digits in TABLE1_METRICS
                             for cell in fmt_comparison(seed_comparison.get(metric), digits)]
                    lines.append([system.label, window, str(seed_comparison["seed"])] + cells)
        json_rows.append(entry)
    trained_header = CONVERGENCE_HEADER if context.converged else ["updates"]
    table = markdown(["system", "L", "setting", *trained_header, "seeds", "s-BLEU", "d-BLEU", "consistency (pooled)",
                      "paper IWSLT", "paper OpenSubtitles"], rows, right_from=1)
    if against:
        table += ("\n\nAgainst the transformer of the same L and seed (difference = system − transformer, "
                  "its 95% interval, p):\n\n" +
                  markdown(["system", "L", "seed", "Δ s-BLEU [95% interval]", "p", "Δ d-BLEU [95% interval]", "p",
                            "Δ consistency [95% interval]", "p"], against, right_from=1))
        bleu, consistency = compared_any["s_bleu"], compared_any.get("pooled_consistency")
        context.notes.append(
            f"Tests: s-BLEU over the {bleu['units']} test sentences and d-BLEU over the test documents with "
            f"sacrebleu's {bleu['test'].replace(' (sacrebleu)', '')} ({bleu['samples']} resamples, seed "
            f"{bleu['seed']}; its p-value)" + (
                f"; consistency with a paired bootstrap over the {consistency['units']} {consistency['unit_name']} (as "
                "many resamples, the same seed; p of the shifted bootstrap)" if consistency else "") +
            ". Intervals: the 2.5% and 97.5% order statistics of the paired resamples' differences; two identical "
            "outputs: p = 1. The same figures for any two outputs: `python -m rfa_doc_mt.scoring.compare`.")
    if against_sgate:
        table += ("\n\nThe gates at every token against RFA-sgate of the same L and seed (difference = "
                  "system − RFA-sgate, its 95% interval, p):\n\n" +
                  markdown(["system", "L", "seed", "Δ s-BLEU [95% interval]", "p", "Δ d-BLEU [95% interval]", "p",
                            "Δ consistency [95% interval]", "p"], against_sgate, right_from=1))
    if against_rfa:
        table += ("\n\nThe local cross heads against RFA of the same L and seed (difference = system − RFA, its 95% "
                  "interval, p):\n\n" +
                  markdown(["system", "L", "seed", "Δ s-BLEU [95% interval]", "p", "Δ d-BLEU [95% interval]", "p",
                            "Δ consistency [95% interval]", "p"], against_rfa, right_from=1))
    if context.search and context.search.searches:
        search_rows = context.search.search_rows()
        context.extra["search"] = search_rows
        context.extra["seeds"] = context.search.seeds
        labels = {row_id: (system.label, row_id.rsplit("_L", 1)[1]) for row_id, system in context.systems}
        table += ("\n\nSearch (seed 1, s-BLEU of the validation split; the chosen setting of each system "
                  "marked; — where a system had one setting, nothing to choose):\n\n" +
                  markdown(["system", "L", "setting", "validation s-BLEU", "chosen"],
                           [[*labels[r["row"]], r["setting"]["label"], fmt(r["valid_s_bleu"]),
                             "**chosen**" if r["chosen"] else ""] for r in search_rows], right_from=3))
        context.notes.append(context.search.note())
    elif context.search:
        context.extra["seeds"] = context.search.seeds
        context.notes.append(context.search.note())
    return table, json_rows


def table_rfa_figure3(context) -> Tuple[str, list]:
    first = context.results[context.systems[0][1].key]
    if "consistency" not in first:
        raise DataError("rfa_figure3 needs contrastive sets: the data directory has no consistency/ folder")
    phenomena = [p for p in first["consistency"] if p != "pooled"] + ["pooled"]
    rows, json_rows = [], []
    for row_id, system in context.systems:
        result = context.results[system.key]
        consistency = result["consistency"]
        rows.append([system.label, updates_cell(result)] + [fmt(consistency[p]["accuracy"], 1) for p in phenomena])
        json_rows.append({"row": row_id, "system": system.label, "config": system.config, **updates_json(result),
                          "accuracy": {p: consistency[p]["accuracy"] for p in phenomena}})
    rows.append(["random", "—"] + [fmt(first["consistency"][p]["random"], 1) for p in phenomena])
    table = markdown(["system", "updates"] + phenomena, rows)
    context.plot = figure3_plot(context.systems, context.results, phenomena, context.png_path)
    return table, json_rows


def figure3_plot(systems, results, phenomena, path) -> str:
    from ..provenance import pyplot, save_figure

    plt = pyplot()

    figure, axes = plt.subplots(1, len(phenomena), figsize=(2.6 * len(phenomena), 2.8), sharey=True)
    families: Dict[str, List[Tuple[int, str]]] = {}
    for row_id, system in systems:
        family, window = row_id.rsplit("_L", 1)
        families.setdefault(family, []).append((int(window), system.key))
    for axis, phenomenon in zip(axes, phenomena):
        for family, members in families.items():
            members.sort()
            axis.plot([w for w, _ in members], [results[k]["consistency"][phenomenon]["accuracy"] for _, k in members],
                      marker="o", label={"transformer": "Transformer", "rfa": "RFA"}.get(family, family))
        random_value = results[systems[0][1].key]["consistency"][phenomenon]["random"]
        axis.axhline(random_value, color="grey", linestyle="--", linewidth=0.8, label="random")
        axis.set_title(phenomenon, fontsize=9)
        axis.set_xlabel("L")
        axis.set_xticks(sorted({w for m in families.values() for w, _ in m}))
    axes[0].set_ylabel("contrastive accuracy (%)")
    axes[-1].legend(fontsize="small")
    figure.tight_layout()
    save_figure(figure, path)
    return path


LINE_STYLES = ("-", "--", "-.", ":")


def line_style(index: int) -> Dict[str, str]:
    """The colour and line style of a plot's ``index``-th curve: matplotlib's ten colours, then
    the same colours dashed, and so on, so that no two of up to 40 curves look alike."""
    return {"color": f"C{index % 10}", "linestyle": LINE_STYLES[(index // 10) % len(LINE_STYLES)]}


def curves_plot(systems, results, path: str, title: str) -> str:
    """Validation loss against updates for the systems of one table (from their train.log): so
    that a system slower to learn can be told from one that is worse. A fine-tuned model's curve
    follows its stage 1 (drawn once, dotted)."""
    from ..provenance import pyplot

    plt = pyplot()

    figure, axis = plt.subplots(figsize=(7, 4.2))
    drawn, stage1_drawn = set(), False
    for _, system in systems:
        if system.key in drawn:
            continue
        drawn.add(system.key)
        result = results[system.key]
        curve = result["curve"]
        if "stage1_curve" in result:
            offset = result["stage1_updates"] or 0
            if not stage1_drawn and result["stage1_curve"]:
                axis.plot(*zip(*result["stage1_curve"]), ":", color="grey", label="stage 1 (sentence-level)")
                stage1_drawn = True
            curve = [(updates + offset, loss) for updates, loss in curve]
        if curve:  # labelled by config (a table's labels repeat across context sizes), or run for a variant
            label = system.key if system.overrides else os.path.splitext(os.path.basename(system.config))[0]
            axis.plot(*zip(*curve), marker=".", label=label, **line_style(len(drawn) - 1))
    return finish_curves(figure, axis, "validation loss (label-smoothed cross-entropy)", title, path)


def seed_groups(systems, seed_systems=None) -> Dict[str, list]:
    """{row: [System of each seed]}: a searched table's seeds (``seed_systems``, row → [(seed,
    System)]), else the rows named ``ROW_seedN`` gathered under ROW."""
    from .papers import row_seed

    groups: Dict[str, list] = {}
    for row_id, system in systems:
        if seed_systems and row_id in seed_systems:
            groups[row_id] = [seeded for _, seeded in seed_systems[row_id]]
        else:
            groups.setdefault(row_seed(row_id)[0], []).append(system)
    return groups


def bleu_curves_plot(systems, seed_systems, results, path: str, title: str,
                     panel_of: Optional[Callable[[str], str]] = None) -> str:
    """Validation s-BLEU against updates under the convergence budget: a line per row, the mean over
    its seeds at each validation, and a band from the lowest to the highest seed (where a run has
    stopped, the others continue the line). A fine-tuned model's curve follows its stage 1
    (dotted, once). ``panel_of`` (row id → a panel's title) draws the rows in panels, two a line in
    the order their first row comes, on shared axes; None: one panel."""
    from ..provenance import pyplot, save_figure

    plt = pyplot()
    panels = curve_panels(seed_groups(systems, seed_systems), panel_of)
    columns = min(2, len(panels))
    lines_of_panels = -(-len(panels) // columns)
    figure, axes = plt.subplots(lines_of_panels, columns, squeeze=False, sharex=True, sharey=True,
                                figsize=(7.5 if columns == 1 else 11, 4.5 * lines_of_panels))
    for axis, rows in zip(axes.flat, panels.values()):
        draw_bleu_curves(axis, rows, results)
    if len(panels) == 1:
        return finish_curves(figure, axes[0][0], "validation s-BLEU", title, path)
    for index, (axis, panel) in enumerate(zip(axes.flat, panels)):
        axis.set_title(panel, fontsize=9)
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize="x-small")
        if index % columns == 0:
            axis.set_ylabel("validation s-BLEU")
        if index >= len(panels) - columns:
            axis.set_xlabel("updates")
            axis.xaxis.set_tick_params(labelbottom=True)
    for axis in axes.flat[len(panels):]:
        axis.set_visible(False)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    save_figure(figure, path)
    return path


def curve_panels(groups: Dict[str, list], panel_of: Optional[Callable[[str], str]]
                 ) -> Dict[str, List[Tuple[str, list]]]:
    """{panel title: [(row, its seeds' systems)]}, the panels in the order of their first row and
    each panel's rows in theirs; without ``panel_of``, one panel titled ""."""
    panels: Dict[str, List[Tuple[str, list]]] = {}
    for row, members in groups.items():
        panels.setdefault(panel_of(row) if panel_of else "", []).append((row, members))
    return panels


def draw_bleu_curves(axis, rows: Sequence[Tuple[str, list]], results) -> None:
    """The validation s-BLEU of ``rows`` ([(row, [System of each seed])]) on one axis."""
    stage1_drawn, lines = False, 0
    for row, members in rows:
        curves = []
        for system in members:
            result = results[system.key]
            summary = result.get("convergence") or {}
            offset = 0
            stage1 = result.get("stage1_convergence")
            if stage1:
                offset = stage1["last_update"]
                if not stage1_drawn:
                    axis.plot(*zip(*stage1["curve"]), ":", color="grey", label="stage 1 (sentence-level)")
                    stage1_drawn = True
            curves.append([(updates + offset, score) for updates, score in summary.get("curve", [])])
        if draw_seed_band(axis, curves, row, line_style(lines)):
            lines += 1


def seed_band(curves: Sequence[Sequence[Tuple[int, float]]]) -> Tuple[List[int], List[float], List[float],
                                                                       List[float]]:
    """(updates, mean, lowest, highest) over the seeds' curves at each validation: where a seed has
    stopped, the others continue the line."""
    by_update: Dict[int, List[float]] = {}
    for curve in curves:
        for updates, score in curve:
            by_update.setdefault(updates, []).append(score)
    steps = sorted(by_update)
    return (steps, [sum(by_update[s]) / len(by_update[s]) for s in steps],
            [min(by_update[s]) for s in steps], [max(by_update[s]) for s in steps])


def draw_seed_band(axis, curves, name: str, style: Dict[str, str]) -> bool:
    """A row's line (the mean over its seeds), labelled ``name (N seeds)``, and, with more than one
    seed, the band from the lowest to the highest seed; False when no seed has a curve."""
    steps, mean, low, high = seed_band(curves)
    if not steps:
        return False
    seeds = sum(1 for curve in curves if curve)
    line, = axis.plot(steps, mean, marker=".", markersize=3, linewidth=1,
                      label=f"{name} ({seeds} seed{'s' if seeds > 1 else ''})", **style)
    if seeds > 1:
        axis.fill_between(steps, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    return True


def finish_curves(figure, axis, ylabel: str, title: str, path: str) -> str:
    """Label a plot of curves against updates and save it to ``path``."""
    from ..provenance import save_figure

    axis.set_xlabel("updates")
    axis.set_ylabel(ylabel)
    axis.set_title(title, fontsize=9)
    axis.legend(fontsize="x-small")
    figure.tight_layout()
    save_figure(figure, path)
    return path


def table_rfa_figure4(context) -> Tuple[str, list]:
    bench = context.bench
    rows, json_rows = [], []
    for summary in sorted(bench["summary"], key=lambda s: s["window_size"]):
        L = summary["window_size"]
        speeds = summary["tokens_per_second"]
        rows.append([str(L), str(summary["batch_size"]), fmt(speeds["transformer"], 1), fmt(speeds["rfa"], 1),
                     fmt(summary["speedup"]), fmt(summary.get("ceiling_speedup")),
                     fmt(summary.get("rfa_share_of_ceiling")),
                     fmt(PAPER_RFA_SPEEDUP["cpu"].get(L)), fmt(PAPER_RFA_SPEEDUP["gpu"].get(L))])
        json_rows.append({"L": L, "batch_size": summary["batch_size"], "tokens_per_second": speeds,
                          "speedup": summary["speedup"], "ceiling_speedup": summary.get("ceiling_speedup"),
                          "rfa_share_of_ceiling": summary.get("rfa_share_of_ceiling"),
                          "paper_speedup_cpu": PAPER_RFA_SPEEDUP["cpu"].get(L),
                          "paper_speedup_gpu": PAPER_RFA_SPEEDUP["gpu"].get(L)})
    table = markdown(["L", "batch", "transformer tokens/s", "RFA tokens/s", "RFA/transformer",
                      "ceiling/transformer", "RFA/ceiling", "paper CPU", "paper GPU"], rows)
    machine = bench["machine"]
    context.notes.append("Ceiling: the transformer whose decoder attentions keep their projections (every "
                         "token's, and each source's keys and values once per sentence) and attend to "
                         "nothing, the most any attention with these projections can decode; "
                         "RFA/ceiling is the share of it that RFA realises.")
    context.notes.append(f"Decoding speed: random paper-size models, beam 4, lengths forced to the reference, "
                         f"{machine.get('cpu', '?')}, {machine.get('torch_threads')} torch thread(s); "
                         f"source text: {bench['settings'].get('corpus')} "
                         f"({os.path.basename(bench['settings']['data'])}). The paper's figure gives no "
                         "number per L beyond the three in its text.")
    return table, json_rows


def table_lsh_table2(context) -> Tuple[str, list]:
    memory = {}
    if context.bench is not None:
        for attention, by_context in context.bench["summary"].items():
            for k, figures in by_context.items():
                memory[(attention, int(k))] = figures["step_mb"]
    rows, json_rows = [], []
    for row_id, system in context.systems:
        attention, k = row_id.rsplit("_k", 1)
        k = int(k)
        result = context.results[system.key]
        paper_bleu, paper_contrapro, paper_memory = PAPER_LSH_TABLE2[(attention, k)]
        rows.append([LSH_ATTENTIONS[attention], str(k), updates_cell(result), fmt(result["s_bleu"]),
                     fmt(result["d_bleu"]), fmt(pooled(result), 1), fmt(memory.get((attention, k)), 0),
                     fmt(paper_bleu, 1), fmt(paper_contrapro, 1), fmt(paper_memory, 1)])
        json_rows.append({"row": row_id, "attention": attention, "context_size": k, "config": system.config,
                          **updates_json(result),
                          "s_bleu": result["s_bleu"], "d_bleu": result["d_bleu"],
                          "pooled_consistency": pooled(result), "step_memory_mb": memory.get((attention, k)),
                          "paper": {"iwslt_en_de_bleu": paper_bleu, "contrapro": paper_contrapro,
                                    "wmt_peak_memory_gb": paper_memory}})
    trained = {(r["attention"], r["context_size"]) for r in json_rows}
    for (attention, k), mb in sorted(memory.items(), key=lambda item: (list(LSH_ATTENTIONS).index(item[0][0]),
                                                                        item[0][1])):
        if (attention, k) in trained:
            continue
        paper_bleu, paper_contrapro, paper_memory = PAPER_LSH_TABLE2.get((attention, k), (None, None, None))
        rows.append([LSH_ATTENTIONS[attention], str(k), "—", "—", "—", "—", fmt(mb, 0), fmt(paper_bleu, 1),
                     fmt(paper_contrapro, 1), fmt(paper_memory, 1)])
        json_rows.append({"attention": attention, "context_size": k, "step_memory_mb": mb, "trained": False})
    table = markdown(["attention", "context k", "updates", "s-BLEU", "d-BLEU", "consistency (pooled)",
                      "step memory MB", "paper BLEU", "paper ContraPro", "paper peak GB"], rows, right_from=1)
    if context.bench is not None:
        settings = context.bench["settings"]
        size = "the tiny model (smoke run)" if settings["arch"].endswith("_tiny") else "the paper-size model"
        context.notes.append(f"Step memory: one training step (forward + backward) of {size} "
                             f"({settings['arch']}), {settings['tokens']} tokens a batch, "
                             f"{settings['sentence_length']}-token sentences, MB above a process holding only "
                             "the model and batch (rfa_doc_mt.bench.training_memory); the paper's column is the "
                             "peak GPU memory of its WMT system. Rows with — were measured but not trained on "
                             "the embedded corpus.")
    return table, json_rows


MEMORY_ROWS = {  # our row → (label, the paper's Table 3 row it stands for)
    "both_top": ("memory, both sides, top layer", "both 5"),
    "both_lower": ("memory, both sides, lower layer", "both 0-1"),
    "both_all": ("memory, both sides, every layer", None),
    "source_top": ("memory, source side only, top layer", "source 5"),
    "target_top": ("memory, target side only, top layer", "target 5"),
    "both_middle": ("memory, both sides, layers 2-3", "both 2-3"),  # the paper's 6 layers only
    "both_upper": ("memory, both sides, layers 4-5", "both 4-5"),
}


def table_memory_table1(context) -> Tuple[str, list]:
    rows, json_rows = [], []
    for row_id, system in context.systems:
        result = context.results[system.key]
        if row_id in ("baseline", "memory"):
            paper = PAPER_MEMORY_TABLE1[row_id]
            rows.append([system.label, updates_cell(result), fmt(result["s_bleu"]), fmt(result["d_bleu"]),
                         fmt(pooled(result), 1), fmt(paper[0]), fmt(paper[1])])
            json_rows.append({"table": 1, "row": row_id, "system": system.label, "config": system.config,
                              "s_bleu": result["s_bleu"], "d_bleu": result["d_bleu"], **updates_json(result),
                              "pooled_consistency": pooled(result), "paper_ted": paper})
    table1 = markdown(["system", "updates", "s-BLEU", "d-BLEU", "consistency (pooled)", "paper TED s-BLEU",
                       "paper TED d-BLEU"], rows)
    rows3 = []
    for row_id, system in context.systems:
        if row_id not in MEMORY_ROWS:
            continue
        result = context.results[system.key]
        label, paper_row = MEMORY_ROWS[row_id]
        paper = PAPER_MEMORY_TABLE3.get(paper_row, (None, None))
        rows3.append([label, updates_cell(result), fmt(result["s_bleu"]), fmt(result["d_bleu"]),
                      fmt(pooled(result), 1), paper_row or "—", fmt(paper[0]), fmt(paper[1])])
        json_rows.append({"table": 3, "row": row_id, "system": label, "config": system.config,
                          "s_bleu": result["s_bleu"], "d_bleu": result["d_bleu"], **updates_json(result),
                          "pooled_consistency": pooled(result), "paper_row": paper_row, "paper_ted": paper})
    table3 = markdown(["memory", "updates", "s-BLEU", "d-BLEU", "consistency (pooled)", "paper row", "paper s-BLEU",
                       "paper d-BLEU"], rows3)
    return f"Table 1\n\n{table1}\n\nTable 3 (memory side and layers)\n\n{table3}", json_rows


def table_lstm(context) -> Tuple[str, list]:
    rows, json_rows = [], []
    for row_id, system in context.systems:
        result = context.results[system.key]
        rows.append([system.label, updates_cell(result), fmt(result["s_bleu"]), fmt(result["d_bleu"]),
                     fmt(pooled(result), 1)])
        json_rows.append({"row": row_id, "system": system.label, "config": system.config,
                          "s_bleu": result["s_bleu"], "d_bleu": result["d_bleu"], **updates_json(result),
                          "pooled_consistency": pooled(result)})
    context.notes.append("Zhang et al. 2020's supplement gives translation examples, not scores: no paper column.")
    return markdown(["system", "updates", "s-BLEU", "d-BLEU", "consistency (pooled)"], rows), json_rows
