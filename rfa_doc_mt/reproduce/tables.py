"""Results of finished systems (scores, learning curves) and the tables and plots of every
experiment."""

import json
import os
import re
from typing import Dict, List, Optional, Sequence, Tuple

from ..data.io import DataError
from .papers import (
    LSH_ATTENTIONS,
    PAPER_LSH_TABLE2,
    PAPER_MEMORY_TABLE1,
    PAPER_MEMORY_TABLE3,
    PAPER_RFA_SPEEDUP,
    PAPER_RFA_TABLE1,
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
    was fine-tuned from, whose updates and curve come first)."""
    bleu = read_json(os.path.join(run_dir, "test.bleu.json"))
    result = {"s_bleu": bleu["s_bleu"]["score"], "d_bleu": bleu["d_bleu"]["score"],
              "bleu_signature": bleu["s_bleu"]["signature"], "updates": trained_updates(run_dir),
              "curve": learning_curve(run_dir)}
    if parent_dir is not None:
        result["stage1_updates"], result["stage1_curve"] = trained_updates(parent_dir), learning_curve(parent_dir)
    consistency_path = os.path.join(run_dir, "consistency.json")
    if os.path.isfile(consistency_path):
        result["consistency"] = {name: {"accuracy": value["accuracy"], "random": value["random"],
                                        "examples": value.get("examples")}
                                 for name, value in read_json(consistency_path).items()}
    return result


VALID_LINE = re.compile(r"valid on '(?P<subset>[^']+)' subset \| loss (?P<loss>[-0-9.]+) "
                        r".*?\| num_updates (?P<updates>\d+)")
UPDATES = re.compile(r"num_updates[ =](\d+)")


def learning_curve(run_dir: str) -> List[Tuple[int, float]]:
    """[(updates, validation loss)] from a run's train.log (fairseq's 'valid on' lines), in order;
    a resumed run's repeated points are kept once."""
    path = os.path.join(run_dir, "train.log")
    points: Dict[int, float] = {}
    if os.path.isfile(path):
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                match = VALID_LINE.search(line)
                if match and match["subset"] == "valid":
                    points[int(match["updates"])] = float(match["loss"])
    return sorted(points.items())


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
# tables


def table_rfa_table1(context) -> Tuple[str, list]:
    rows, json_rows = [], []
    for row_id, system in context.systems:
        result = context.results[system.key]
        iwslt, subtitles = PAPER_RFA_TABLE1[row_id]
        window = row_id.rsplit("_L", 1)[1]
        rows.append([system.label, window, updates_cell(result), fmt(result["s_bleu"]), fmt(result["d_bleu"]),
                     fmt(iwslt, 1), fmt(subtitles, 1)])
        json_rows.append({"row": row_id, "system": system.label, "config": system.config, "L": int(window),
                          "s_bleu": result["s_bleu"], "d_bleu": result["d_bleu"], **updates_json(result),
                          "paper_bleu": {"iwslt15_zh_en": iwslt, "opensubtitles_en_ru": subtitles}})
    table = markdown(["system", "L", "updates", "s-BLEU (ours)", "d-BLEU (ours)", "paper IWSLT",
                      "paper OpenSubtitles"], rows, right_from=1)
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
    import logging

    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..bench.common import save_figure

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


def curves_plot(systems, results, path: str, title: str) -> str:
    """Validation loss against updates for the systems of one table (from their train.log): so
    that a system slower to learn can be told from one that is worse. A fine-tuned model's curve
    follows its stage 1 (drawn once, dotted)."""
    import logging

    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..bench.common import save_figure

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
        if curve:  # labelled by config: a table's labels repeat across context sizes
            axis.plot(*zip(*curve), marker=".", label=os.path.splitext(os.path.basename(system.config))[0])
    axis.set_xlabel("updates")
    axis.set_ylabel("validation loss (label-smoothed cross-entropy)")
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
    context.notes.append("Paper 002's supplement gives translation examples, not scores: no paper column.")
    return markdown(["system", "updates", "s-BLEU", "d-BLEU", "consistency (pooled)"], rows), json_rows
