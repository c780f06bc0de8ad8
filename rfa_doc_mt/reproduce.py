"""The papers' tables and figures, re-run: ``python -m rfa_doc_mt.reproduce EXPERIMENT [options]``.

``scripts/reproduce_<experiment>.sh`` call this. Experiments (``--list`` prints them):

* ``rfa_table1``: BLEU of the transformer and RFA at L = 1, and of the transformer, RFA,
  RFA-sgate-avg and RFA-sgate at L = 4 (paper 000, Table 1).
* ``rfa_figure3``: contrastive consistency per phenomenon of the transformer and RFA at
  L = 1..4 with the random baseline (paper 000, Figure 3).
* ``rfa_figure4``: RFA's decoding speedup over the transformer for L = 1..15 (paper 000,
  Figure 4), from ``rfa_doc_mt.bench.decode_speed``.
* ``lsh_table2``: BLEU and training peak memory against the context size for full attention,
  LSH in self-attention and LSH in self- and cross-attention (paper 003, Table 2).
* ``memory_table1``: the sentence-level baseline and the recurrent-memory model fine-tuned from
  it (paper 004, Table 1), and the memory side / layer ablation (paper 004, Table 3).
* ``lstm``: the 1-to-1 and 3-to-3 transformers and the 3-to-3 long-short term masking model
  (paper 002's systems).
* ``all``: every experiment above, each system trained once.

By default an experiment runs on the embedded synthetic corpus (generated into OUT/data on
first use) with the tiny configs of ``configs/demo``: CPU, minutes. ``--corpus NAME --data DIR``
runs the paper's configs on a corpus prepared with ``scripts/prepare_*.sh`` (``--list`` shows
which corpora each experiment knows).

Each system is trained, decoded (sliding windows) and scored by ``scripts/run_system.sh`` into
OUT/runs/<system>, ``--jobs`` at a time with one torch thread each; a system that two
experiments share is trained once. Inputs (data, configs, architectures) are checked before any
long work; re-running skips finished systems and resumes unfinished ones. Each experiment
prints its table and writes OUT/<experiment>.md and OUT/<experiment>.json (with the paper's
numbers beside ours, the machine and the command), plus a PNG where the paper has a figure.
"""

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .bench.common import commit_info, machine_info, write_json
from .data.io import DataError, atomic_write

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_WIT3 = os.path.join(ROOT, "..", "shared", "data", "iwslt15-zh-en")
EMBEDDED = "embedded"

# Updates per system on the embedded corpus: the same for every system of every table (the
# memory model's two stages together), enough for the transformer L=4's validation loss to have
# flattened: trained for 2000 updates, its validation loss was 1.379 at 600, 1.360 at 1000 and
# 1.345 at 2000 (README: its learning curve). --budget N runs shorter, and its tables say so.
FULL_BUDGET = 1000
# The memory model (paper 004) is fine-tuned from a sentence-level transformer: stage 1 gets
# 3/4 of the budget, the fine-tuning 1/4, so that both stages together match the other systems.
MEMORY_FINETUNE_SHARE = 0.25
# Validations per run, at the same updates for every system: learning curves, and checkpoint
# selection (checkpoint_best.pt) among the same points.
VALIDATIONS_PER_RUN = 16
# --smoke: a tiny corpus and a few updates, to test the machinery end to end
SMOKE_CORPUS = ["--train-documents", "40", "--valid-documents", "4", "--test-documents", "3",
                "--contrastive-pairs", "10", "--workers", "1"]
SMOKE_TRAIN_ARGS = ["--max-update", "3", "--max-tokens", "1024", "--log-interval", "1"]


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------
# systems and experiments


@dataclass(frozen=True)
class System:
    """One trained model: ``config`` (relative to the project root) run by run_system.sh.

    ``starts_from``: the key of the system it is fine-tuned from. ``share``: its part of the
    embedded budget (the memory model's stage 1 and 2 together make one budget). ``name``: its
    run directory when the config alone does not tell it (a stage-1 run of a shared config)."""

    label: str
    config: str
    starts_from: Optional[str] = None
    share: float = 1.0
    name: Optional[str] = None

    @property
    def key(self) -> str:
        """Its run directory under OUT/runs: the config path without configs/ and .sh."""
        if self.name:
            return self.name
        path = self.config[len("configs/"):] if self.config.startswith("configs/") else self.config
        return path[:-3].replace("/", "-") if path.endswith(".sh") else path.replace("/", "-")

    def updates(self, budget: int) -> int:
        return max(1, int(round(budget * self.share)))


def demo(name: str, label: str, starts_from: Optional[System] = None, share: float = 1.0,
         run_name: Optional[str] = None) -> System:
    return System(label, f"configs/demo/{name}.sh", starts_from.key if starts_from else None, share, run_name)


# stage 1 of the embedded memory model: the L=1 transformer, trained for its share of the budget
MEMORY_STAGE1 = demo("transformer_L1", "sentence-level transformer, stage 1 of the memory model",
                     share=1 - MEMORY_FINETUNE_SHARE, run_name="demo-transformer_L1-memory_stage1")


@dataclass
class Experiment:
    name: str
    title: str
    paper: str
    corpora: Dict[str, List[Tuple[str, System]]]  # corpus → [(row id, system)]
    needs_consistency: bool
    table: Callable  # (experiment, context) → (markdown, json rows)
    benchmark: Optional[str] = None  # "decode_speed" or "training_memory"
    script: str = ""

    def systems(self, corpus: str) -> List[Tuple[str, System]]:
        if corpus not in self.corpora:
            raise DataError(f"{self.name}: unknown corpus {corpus!r}; it knows {', '.join(self.corpora)}")
        return self.corpora[corpus]


# Paper numbers (the papers' text): shown beside ours, never compared as if comparable.
PAPER_RFA_TABLE1 = {  # paper 000, Table 1: BLEU, IWSLT15 zh-en and OpenSubtitles2018 en-ru
    "transformer_L1": (31.7, 32.6), "rfa_L1": (31.0, 32.9), "transformer_L4": (30.4, 33.1),
    "rfa_L4": (30.7, 33.2), "rfa_sgate_avg_L4": (30.8, 33.0), "rfa_sgate_L4": (31.2, 33.2)}
PAPER_RFA_SPEEDUP = {  # paper 000 §5 (text of Figure 4): RFA/transformer tokens per second
    "cpu": {1: 1.58, 15: 19.2}, "gpu": {15: 2.09}}
PAPER_LSH_TABLE2 = {  # paper 003, Table 2: IWSLT EN→DE BLEU, ContraPro accuracy, WMT peak memory (GB)
    ("full", 0): (23.3, 42.4, 5.5), ("full", 3): (23.6, 69.2, 7.8), ("full", 9): ("OOM", "OOM", 9.6),
    ("full", 12): ("OOM", "OOM", "OOM"),
    ("self", 0): (22.6, 38.4, 5.1), ("self", 3): (23.0, 50.1, 5.7), ("self", 9): (23.2, 50.4, 6.8),
    ("self", 12): (23.6, 46.3, 7.0),
    ("self-cross", 0): (22.5, 40.3, 9.6), ("self-cross", 3): (22.7, 59.8, 9.3),
    ("self-cross", 9): (22.1, 51.7, 9.0), ("self-cross", 12): (19.8, 51.8, 9.4)}
PAPER_MEMORY_TABLE1 = {"baseline": (24.73, None), "memory": (25.62, 29.47)}  # paper 004, TED s-/d-BLEU
PAPER_MEMORY_TABLE3 = {  # paper 004, Table 3 (TED, 6 layers): side, layers → s-BLEU, d-BLEU
    "both 0-1": (25.31, 29.13), "both 2-3": (25.30, 29.23), "both 4-5": (25.43, 29.22),
    "both 5": (25.62, 29.47), "source 5": (25.42, 29.33), "target 5": (25.43, 29.25)}


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

    from .bench.common import save_figure

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

    from .bench.common import save_figure

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
                     fmt(PAPER_RFA_SPEEDUP["cpu"].get(L)), fmt(PAPER_RFA_SPEEDUP["gpu"].get(L))])
        json_rows.append({"L": L, "batch_size": summary["batch_size"], "tokens_per_second": speeds,
                          "speedup": summary["speedup"], "ceiling_speedup": summary.get("ceiling_speedup"),
                          "paper_speedup_cpu": PAPER_RFA_SPEEDUP["cpu"].get(L),
                          "paper_speedup_gpu": PAPER_RFA_SPEEDUP["gpu"].get(L)})
    table = markdown(["L", "batch", "transformer tokens/s", "RFA tokens/s", "RFA/transformer",
                      "no-attention bound", "paper CPU", "paper GPU"], rows)
    machine = bench["machine"]
    context.notes.append(f"Decoding speed: random paper-size models, beam 4, lengths forced to the reference, "
                         f"{machine.get('cpu', '?')}, {machine.get('torch_threads')} torch thread(s); "
                         f"source text: {bench['settings'].get('corpus')} "
                         f"({os.path.basename(bench['settings']['data'])}). The paper's figure gives no "
                         "number per L beyond the three in its text.")
    return table, json_rows


LSH_ATTENTIONS = {"full": "full attention", "self": "LSH self-attention", "self-cross": "LSH self- & cross-attention"}


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


# ---------------------------------------------------------------------------------------
# the experiments


def _rfa_family(prefix: str) -> Dict[str, str]:
    return {"transformer": f"{prefix}_transformer", "rfa": f"{prefix}_rfa", "rfa_sgate": f"{prefix}_sgate",
            "rfa_sgate_avg": f"{prefix}_sgate_avg"}


def rfa_table1_systems(prefix: Optional[str]) -> List[Tuple[str, System]]:
    labels = {"transformer": "Transformer", "rfa": "RFA", "rfa_sgate_avg": "RFA-sgate-avg", "rfa_sgate": "RFA-sgate"}
    rows = []
    for row_id in PAPER_RFA_TABLE1:
        family, window = row_id.rsplit("_L", 1)
        if prefix is None:
            system = demo(row_id, labels[family])
        else:
            system = System(labels[family], f"configs/rfa/{_rfa_family(prefix)[family]}_L{window}.sh")
        rows.append((row_id, system))
    return rows


def rfa_figure3_systems(prefix: Optional[str]) -> List[Tuple[str, System]]:
    rows = []
    for family, label in (("transformer", "Transformer"), ("rfa", "RFA")):
        for window in (1, 2, 3, 4):
            row_id = f"{family}_L{window}"
            system = demo(row_id, f"{label} L={window}") if prefix is None else \
                System(f"{label} L={window}", f"configs/rfa/{_rfa_family(prefix)[family]}_L{window}.sh")
            rows.append((row_id, system))
    return rows


def lsh_systems(embedded: bool) -> List[Tuple[str, System]]:
    if embedded:  # full attention with k context sentences is the concatenation transformer at L = k + 1
        return [("full_k0", demo("transformer_L1", "full attention, k=0")),
                ("full_k3", demo("transformer_L4", "full attention, k=3")),
                ("self_k0", demo("lsh_self_k0", "LSH self, k=0")), ("self_k3", demo("lsh_self_k3", "LSH self, k=3")),
                ("self-cross_k0", demo("lsh_self_cross_k0", "LSH self+cross, k=0")),
                ("self-cross_k3", demo("lsh_L4", "LSH self+cross, k=3"))]
    return [(f"{attention}_k{k}", System(f"{LSH_ATTENTIONS[attention]}, k={k}",
                                         f"configs/lsh/{attention.replace('-', '_')}_k{k}.sh"))
            for attention in LSH_ATTENTIONS for k in (0, 3, 9, 12)]


def memory_systems(embedded: bool) -> List[Tuple[str, System]]:
    if embedded:
        def fine_tuned(name, label):
            return demo(name, label, MEMORY_STAGE1, MEMORY_FINETUNE_SHARE)
        return [("baseline", demo("transformer_L1", "sentence-level transformer (L=1)")),
                ("memory", fine_tuned("memory_L1", "memory, fine-tuned from it")),
                ("both_lower", fine_tuned("memory_both_0", "memory, lower layer")),
                ("both_all", fine_tuned("memory_both_01", "memory, every layer")),
                ("both_top", fine_tuned("memory_L1", "memory, fine-tuned from it")),
                ("source_top", fine_tuned("memory_source_1", "memory, source side")),
                ("target_top", fine_tuned("memory_target_1", "memory, target side"))]
    base = System("sentence-level transformer", "configs/memory/baseline.sh")
    rows = [("baseline", base),
            ("memory", System("memory, fine-tuned from it", "configs/memory/both_5.sh", base.key))]
    for row_id, name in (("both_lower", "both_0-1"), ("both_middle", "both_2-3"), ("both_upper", "both_4-5"),
                         ("both_top", "both_5"), ("source_top", "source_5"), ("target_top", "target_5")):
        rows.append((row_id, System(name, f"configs/memory/{name}.sh", base.key)))
    return rows


def lstm_systems(embedded: bool) -> List[Tuple[str, System]]:
    if embedded:
        return [("1to1", demo("transformer_L1", "1-to-1 transformer")),
                ("3to3", demo("transformer_L3", "3-to-3 transformer")),
                ("3to3_lstm", demo("lstm_L3", "3-to-3 long-short term masking"))]
    return [("1to1", System("1-to-1 transformer", "configs/lstm/lstm_L1.sh")),
            ("3to3", System("3-to-3 transformer", "configs/lstm/transformer_3to3.sh")),
            ("3to3_lstm", System("3-to-3 long-short term masking", "configs/lstm/lstm_3to3.sh"))]


EXPERIMENTS: Dict[str, Experiment] = {e.name: e for e in [
    Experiment("rfa_table1", "Paper 000, Table 1: BLEU at L = 1 and L = 4", "000",
               {EMBEDDED: rfa_table1_systems(None), "iwslt15": rfa_table1_systems("iwslt"),
                "opensub-bleu": rfa_table1_systems("opensub_bleu")}, False, table_rfa_table1),
    Experiment("rfa_figure3", "Paper 000, Figure 3: contrastive consistency per phenomenon, L = 1..4", "000",
               {EMBEDDED: rfa_figure3_systems(None), "opensub-consistency": rfa_figure3_systems("opensub_consistency")},
               True, table_rfa_figure3),
    Experiment("rfa_figure4", "Paper 000, Figure 4: RFA's decoding speedup over the transformer", "000",
               {EMBEDDED: [], "iwslt15": []}, False, table_rfa_figure4, benchmark="decode_speed"),
    Experiment("lsh_table2", "Paper 003, Table 2: LSH attention against the context size", "003",
               {EMBEDDED: lsh_systems(True), "paper": lsh_systems(False)}, False, table_lsh_table2,
               benchmark="training_memory"),
    Experiment("memory_table1", "Paper 004, Tables 1 and 3: recurrent memory fine-tuned from the sentence model",
               "004", {EMBEDDED: memory_systems(True), "paper": memory_systems(False)}, False, table_memory_table1),
    Experiment("lstm", "Paper 002: 1-to-1, 3-to-3 and 3-to-3 long-short term masking", "002",
               {EMBEDDED: lstm_systems(True), "paper": lstm_systems(False)}, False, table_lstm),
]}
for _experiment in EXPERIMENTS.values():
    _experiment.script = f"scripts/reproduce_{_experiment.name}.sh"


# systems that no table shows but others start from (looked up by key)
STAGE1_SYSTEMS = {MEMORY_STAGE1.key: MEMORY_STAGE1}


def systems_to_train(rows) -> List[System]:
    """The distinct systems behind (row id, system) pairs, with the systems they start from
    (which run first)."""
    systems: List[System] = []
    for _, system in rows:
        if system.key not in [s.key for s in systems]:
            systems.append(system)
    known = {s.key: s for s in systems}
    for system in list(systems):
        if system.starts_from and system.starts_from not in known:
            parent = STAGE1_SYSTEMS.get(system.starts_from)
            if parent is None:
                raise DataError(f"{system.config} starts from {system.starts_from}, which no experiment trains")
            systems.insert(0, parent)
            known[parent.key] = parent
    return systems


def validation_interval(budget: int) -> int:
    return max(1, budget // VALIDATIONS_PER_RUN)


def embedded_train_args(system: System, budget: int) -> List[str]:
    """fairseq-train arguments that give a system its share of the budget, validated (and
    offered as checkpoint_best.pt) at the same updates as every other system."""
    interval = validation_interval(budget)
    return ["--max-update", str(system.updates(budget)), "--validate-interval-updates", str(interval),
            "--save-interval-updates", str(interval), "--keep-interval-updates", "1"]


def budget_note(args, results: dict) -> str:
    if args.smoke:
        return "Smoke run: 3 updates per system, a tiny corpus; the numbers test the machinery only."
    if args.corpus != EMBEDDED:
        return ("Updates: as the paper configs train (until early stopping), shown per row; the learning "
                "curves are in the PNG beside this table.")
    short = "" if args.budget >= FULL_BUDGET else \
        f" **A short run**: the full reproduction trains {FULL_BUDGET} updates per system."
    return (f"Every system trained {args.budget} updates of up to 4096 tokens (a fine-tuned memory model: "
            f"{MEMORY_STAGE1.updates(args.budget)} sentence-level + {int(round(args.budget * MEMORY_FINETUNE_SHARE))} "
            f"fine-tuning, of up to 1400 tokens a sentence step, about 4k tokens an update), validated every "
            f"{validation_interval(args.budget)} updates; each row's model is its checkpoint with the lowest "
            f"validation loss.{short} Learning curves: the PNG beside this table.")


def print_list(budget: int) -> None:
    """Every experiment, corpus and system with its config and its number of updates."""
    for experiment in EXPERIMENTS.values():
        print(f"{experiment.name}: {experiment.title}  [{experiment.script}]")
        for corpus, rows in experiment.corpora.items():
            if not rows:
                print(f"  --corpus {corpus}: benchmark only")
                continue
            print(f"  --corpus {corpus}:")
            for system in systems_to_train(rows):
                if corpus == EMBEDDED:
                    updates = f"{system.updates(budget)} updates"
                    if system.starts_from:
                        updates += f", fine-tuned from {system.starts_from}"
                else:
                    updates = "updates: the config's (early stopping)" + \
                        (f", fine-tuned from {system.starts_from}" if system.starts_from else "")
                print(f"    {system.key:40s} {system.config:40s} {updates}")


# ---------------------------------------------------------------------------------------
# input checks


def data_problems(data: str, needs_consistency: bool, selects_on_consistency: bool = False) -> List[str]:
    """What is missing from a prepared corpus (empty: nothing). ``selects_on_consistency``: the
    configs validate on DATA/valid_consistency (paper 000's consistency models, appendix A.2)."""
    if not os.path.isdir(data):
        return [f"{data}: data directory not found (prepare one with scripts/prepare_*.sh)"]
    prep_path = os.path.join(data, "prep.json")
    if not os.path.isfile(prep_path):
        return [f"{data}: no prep.json: not a corpus prepared by scripts/prepare_*.sh"]
    prep = read_json(prep_path)
    source, target = prep["source_lang"], prep["target_lang"]
    problems = []
    for split in ("train", "valid", "test"):
        for lang in (source, target):
            path = os.path.join(data, f"{split}.{source}-{target}.{lang}.idx")
            if not os.path.isfile(path):
                problems.append(f"{path}: missing (the {split} split is needed)")
    if needs_consistency and not os.path.isdir(os.path.join(data, "consistency")):
        problems.append(f"{data}/consistency: missing: this experiment scores contrastive sets "
                        "(scripts/prepare_consistency.sh writes them)")
    if selects_on_consistency and not os.path.isfile(os.path.join(data, "valid_consistency", "consistency.json")):
        problems.append(f"{data}/valid_consistency: missing: these configs select checkpoints on the consistency of "
                        "contrastive dev sets "
                        "(scripts/prepare_consistency.sh --out DATA/valid_consistency DEV.json ...)")
    return problems


def config_problems(systems: Sequence[System]) -> List[str]:
    """Missing configs, configs that fail to load, architectures fairseq does not know."""
    problems, archs = [], {}
    for system in systems:
        path = os.path.join(ROOT, system.config)
        if not os.path.isfile(path):
            problems.append(f"{system.config}: config file not found")
            continue
        command = f'source "{ROOT}/scripts/common.sh"; load_config "{path}"; echo "$MODEL_ARGS"'
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True)
        if done.returncode != 0:
            problems.append(f"{system.config}: does not load: {done.stderr.strip()[-300:]}")
            continue
        words = done.stdout.split()
        if "--arch" not in words or words.index("--arch") + 1 >= len(words):
            problems.append(f"{system.config}: MODEL_ARGS has no --arch")
            continue
        archs[system.config] = words[words.index("--arch") + 1]
    if archs:
        import logging

        # fairseq's import announces an optional package it lacks; not this script's business
        logging.getLogger("fairseq.tasks.text_to_speech").setLevel(logging.WARNING)
        from fairseq.models import ARCH_MODEL_REGISTRY

        from . import models  # noqa: F401  (registers this project's architectures)

        for config, arch in archs.items():
            if arch not in ARCH_MODEL_REGISTRY:
                problems.append(f"{config}: unknown architecture {arch!r}")
    return problems


# ---------------------------------------------------------------------------------------
# running systems


def finished(run_dir: str, needs_consistency: bool) -> bool:
    if not os.path.isfile(os.path.join(run_dir, "test.bleu.json")):
        return False
    return not needs_consistency or os.path.isfile(os.path.join(run_dir, "consistency.json"))


def run_systems(systems: Sequence[System], data: str, runs: str, jobs: int,
                train_args: Dict[str, Sequence[str]]) -> None:
    """Train, decode and score each system (scripts/run_system.sh), ``jobs`` at a time, with
    its extra fairseq-train arguments ``train_args[system.key]``.

    A fine-tuned system starts once the system it starts from has finished. Prints a line per
    start and finish; raises DataError listing the failures at the end."""
    scoring_consistency = os.path.isdir(os.path.join(data, "consistency"))
    by_key = {s.key: s for s in systems}
    pending = [s for s in systems if not finished(os.path.join(runs, s.key), scoring_consistency)]
    for system in systems:
        if system not in pending:
            log(f"{system.key}: finished earlier (OUT/runs/{system.key}), skipped")
    total, started = len(pending), 0
    running: Dict[str, Tuple[subprocess.Popen, float, object]] = {}
    failed: Dict[str, str] = {}
    os.makedirs(runs, exist_ok=True)
    begun = time.monotonic()
    while pending or running:
        for key, (process, start, handle) in list(running.items()):
            if process.poll() is None:
                continue
            handle.close()
            del running[key]
            log_path = os.path.join(runs, f"{key}.log")
            if process.returncode == 0:
                log(f"finished {key} in {time.monotonic() - start:.0f} s "
                    f"({total - len(pending) - len(running)}/{total} done, {time.monotonic() - begun:.0f} s so far)")
            else:
                with open(log_path, encoding="utf-8", errors="replace") as f:
                    tail = "".join(f.readlines()[-12:])
                failed[key] = log_path
                log(f"FAILED {key} (exit {process.returncode}); the end of {log_path}:\n{tail}")
        for system in list(pending):
            if len(running) >= jobs:
                break
            parent = by_key.get(system.starts_from) if system.starts_from else None
            if parent is not None:
                if parent.key in failed:
                    failed[system.key] = f"starts from {parent.key}, which failed"
                    pending.remove(system)
                    log(f"skipped {system.key}: it starts from {parent.key}, which failed")
                    continue
                if parent in pending or parent.key in running:
                    continue
            pending.remove(system)
            started += 1
            run_dir = os.path.join(runs, system.key)
            system_env = dict(os.environ, OMP_NUM_THREADS="1")
            if parent is not None:  # main() checked that every starts_from is in the plan
                system_env["MEMORY_PRETRAINED"] = os.path.join(runs, parent.key, "checkpoint_best.pt")
            command = [os.path.join(ROOT, "scripts", "run_system.sh"), os.path.join(ROOT, system.config), data,
                       run_dir, *train_args.get(system.key, ())]
            handle = open(os.path.join(runs, f"{system.key}.log"), "a", encoding="utf-8")
            handle.write(f"\n# {time.strftime('%Y-%m-%d %H:%M:%S')} {shlex.join(command)}\n")
            handle.flush()
            process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=system_env)
            running[system.key] = (process, time.monotonic(), handle)
            log(f"started {system.key} [{started}/{total}] (progress: tail -f {runs}/{system.key}.log)")
        if running:
            time.sleep(1.0)
    if failed:
        raise DataError("systems failed: " + "; ".join(f"{k} ({v})" for k, v in failed.items()))


# ---------------------------------------------------------------------------------------
# benchmarks


def run_benchmark(kind: str, out: str, corpus_data: str, smoke: bool) -> dict:
    """The experiment's benchmark (skipped when its JSON exists): decode_speed or training_memory."""
    bench_dir = os.path.join(out, "bench")
    os.makedirs(bench_dir, exist_ok=True)
    path = os.path.join(bench_dir, f"{kind}.json")
    if os.path.isfile(path):
        log(f"{kind}: measured earlier ({path}), not re-run")
        return read_json(path)
    python = sys.executable
    if kind == "decode_speed":
        settings = ["--window-sizes", "1,2", "--batch-scale", "0.004", "--batches", "1"] if smoke else \
            ["--batch-scale", str(1 / 32), "--batches", "1"]
        command = [python, "-m", "rfa_doc_mt.bench.decode_speed", "run", "--data", corpus_data, "--out", path,
                   "--threads", "1", *settings]
        plot = [python, "-m", "rfa_doc_mt.bench.decode_speed", "plot", path, "--out",
                os.path.join(out, "rfa_figure4.png")]
    else:
        settings = ["--quick", "--context-sizes", "0,3"] if smoke else ["--tokens", "3133"]
        command = [python, "-m", "rfa_doc_mt.bench.training_memory", "run", "--out", path, "--threads", "1",
                   *settings]
        plot = [python, "-m", "rfa_doc_mt.bench.training_memory", "plot", path, "--out",
                os.path.join(out, "lsh_table2_memory.png")]
    log(f"{kind}: {shlex.join(command)} (log: {bench_dir}/{kind}.log)")
    with open(os.path.join(bench_dir, f"{kind}.log"), "w", encoding="utf-8") as handle:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                                   env=dict(os.environ, PYTHONPATH=ROOT))
        for line in process.stdout:  # progress: the benchmark's own per-setting lines, not fairseq's logging
            handle.write(line)
            handle.flush()
            if line.strip() and not line.startswith(("INFO:", "WARNING:", "  warnings.warn", "/")):
                log(f"{kind}: {line.strip()}")
        if process.wait() != 0:
            raise DataError(f"{kind} benchmark failed; see {bench_dir}/{kind}.log")
    subprocess.run(plot, check=True, capture_output=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    return read_json(path)


def speed_corpus(out: str, corpus: str, data: Optional[str], smoke: bool, embedded_data: str) -> str:
    """Source text for the decode-speed benchmark: the given corpus; on the embedded setting the
    IWSLT15 test talks of ../shared/data when present (long documents, as the paper's L = 15
    needs), else the synthetic corpus (whose documents are shorter: the JSON says so)."""
    if corpus != EMBEDDED:
        return data
    if os.path.isdir(SHARED_WIT3) and not smoke:
        target = os.path.join(out, "iwslt15")
        if not os.path.isfile(os.path.join(target, "prep.json")):
            log(f"preparing the IWSLT15 test talks -> {target}")
            subprocess.run([os.path.join(ROOT, "scripts", "prepare_iwslt15.sh"), "--wit3-dir", SHARED_WIT3,
                            "--out", target], check=True, stdout=subprocess.DEVNULL)
        return target
    return embedded_data


# ---------------------------------------------------------------------------------------
# main


class Context:
    """What a table function reads: the systems (row id, System), their results, the benchmark."""

    def __init__(self, systems, results, bench, png_path):
        self.systems, self.results, self.bench, self.png_path = systems, results, bench, png_path
        self.notes: List[str] = []
        self.plot: Optional[str] = None
        self.curves: Optional[str] = None


def prepare_embedded(out: str, smoke: bool) -> str:
    data = os.path.join(out, "data")
    marker = os.path.join(out, "reproduce.json")
    mode = "smoke" if smoke else "full"
    if os.path.isfile(marker):
        earlier = read_json(marker).get("mode")
        if earlier != mode:
            raise DataError(f"{out} holds a {earlier} run; a {mode} run needs another --out")
    else:
        os.makedirs(out, exist_ok=True)
        with atomic_write(marker) as handle:
            json.dump({"mode": mode}, handle)
    if not os.path.isfile(os.path.join(data, "prep.json")):
        log(f"embedded synthetic corpus -> {data}")
        subprocess.run([os.path.join(ROOT, "scripts", "prepare_synthetic.sh"), "--out", data,
                        *(SMOKE_CORPUS if smoke else [])], check=True, stdout=subprocess.DEVNULL)
    return data


def write_outputs(experiment: Experiment, out: str, corpus: str, context: Context, table: str, rows: list,
                  command: str, bleu_signature: Optional[str]) -> str:
    if experiment.benchmark == "decode_speed":
        corpus_label = "randomly initialised paper-size models (speed only: nothing is trained; the source text " \
            "is named below)"
    elif corpus == EMBEDDED:
        corpus_label = "the embedded synthetic corpus (not the paper's data: compare trends, not values)"
    else:
        corpus_label = f"corpus {corpus}"
    machine = machine_info("cpu")
    notes = list(context.notes)
    if bleu_signature:
        notes.append(f"BLEU: sacrebleu `{bleu_signature}`; s-BLEU over sentences, d-BLEU over documents.")
    header = (f"## {experiment.title}\n\nOurs: {corpus_label}. Command: `{command}`. "
              f"Machine: {machine.get('cpu', '?')}, {machine['cpu_count']} cores, torch {machine['torch']}.\n")
    text = header + "\n" + table + "\n" + "".join(f"\n{note}\n" for note in notes)
    with atomic_write(os.path.join(out, f"{experiment.name}.md")) as handle:
        handle.write(text)
    write_json({"experiment": experiment.name, "title": experiment.title, "paper": experiment.paper,
                "corpus": corpus, "command": command, "machine": machine, "commit": commit_info(),
                "rows": rows, "notes": notes, "plot": context.plot, "curves_plot": context.curves,
                "curves": {system.key: context.results[system.key]["curve"] for _, system in context.systems},
                "stage1_curves": {system.starts_from: context.results[system.key]["stage1_curve"]
                                  for _, system in context.systems if system.starts_from}},
               os.path.join(out, f"{experiment.name}.json"))
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("experiment", nargs="?", help="one of: " + ", ".join(list(EXPERIMENTS) + ["all"]))
    parser.add_argument("--out", default=os.path.join(ROOT, "work", "reproduce"),
                        help="results directory (default: work/reproduce; re-running resumes there)")
    parser.add_argument("--corpus", default=EMBEDDED, help="embedded (default) or a real corpus (see --list)")
    parser.add_argument("--data", help="prepared corpus directory (required with a real --corpus)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="systems trained at once, one torch thread each (default: the number of cores)")
    parser.add_argument("--smoke", action="store_true", help="tiny corpus, 3 updates, tiny benchmarks: a test run")
    parser.add_argument("--budget", type=int, default=FULL_BUDGET,
                        help=f"updates per system on the embedded corpus (default {FULL_BUDGET}, the full run; "
                             "fewer make a shorter run whose tables say so)")
    parser.add_argument("--list", action="store_true", help="list experiments, corpora and systems, then exit")
    args = parser.parse_args(argv)
    if args.budget < 1:
        parser.error("--budget must be at least 1")
    if args.list:
        print_list(args.budget)
        return 0
    if args.experiment not in list(EXPERIMENTS) + ["all"]:
        parser.error(f"experiment must be one of {', '.join(list(EXPERIMENTS) + ['all'])}, got {args.experiment!r}")
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    experiments = list(EXPERIMENTS.values()) if args.experiment == "all" else [EXPERIMENTS[args.experiment]]
    if args.experiment == "all" and args.corpus != EMBEDDED:
        parser.error("`all` runs on the embedded corpus; run each experiment with its own --corpus and --data")
    if args.corpus != EMBEDDED and not args.data:
        parser.error(f"--corpus {args.corpus} needs --data DIR (a corpus prepared by scripts/prepare_*.sh)")
    if args.corpus == EMBEDDED and args.data:
        parser.error("--data goes with a real --corpus; the embedded corpus is generated into OUT/data")
    out = os.path.abspath(args.out)
    command = "scripts/" + ("reproduce_all.sh" if args.experiment == "all" else f"reproduce_{args.experiment}.sh") \
        + "".join(f" {shlex.quote(a)}" for a in (argv if argv is not None else sys.argv[1:])[1:])
    start = time.monotonic()

    # 1. check everything before any long work
    plan = [(experiment, experiment.systems(args.corpus)) for experiment in experiments]
    systems = systems_to_train(row for _, rows in plan for row in rows)
    problems = config_problems(systems)
    data = os.path.abspath(args.data) if args.data else None
    if data is not None:
        problems += data_problems(data, any(e.needs_consistency for e in experiments if e.systems(args.corpus)),
                                  selects_on_consistency=args.corpus == "opensub-consistency")
    if problems:
        raise DataError("cannot start:\n  " + "\n  ".join(problems))
    if data is None:
        data = prepare_embedded(out, args.smoke)
        problems = data_problems(data, any(e.needs_consistency for e in experiments))
        if problems:
            raise DataError("the embedded corpus is incomplete (delete it to regenerate):\n  " + "\n  ".join(problems))

    # 2. train, decode and score every system once; longest first (LSH), fine-tuned ones last
    def priority(system: System) -> int:
        return 0 if "lsh" in system.key else 2 if system.starts_from else 1
    runs = os.path.join(out, "runs")
    train_args = {system.key: SMOKE_TRAIN_ARGS if args.smoke else
                  embedded_train_args(system, args.budget) if args.corpus == EMBEDDED else []
                  for system in systems}
    if systems:
        log(f"{len(systems)} systems -> {runs} ({args.jobs} at a time"
            + (f"; {args.budget} updates each" if args.corpus == EMBEDDED and not args.smoke else "") + ")")
        run_systems(sorted(systems, key=priority), data, runs, args.jobs, train_args)

    # 3. benchmarks, alone on the machine, then the tables
    for experiment, rows in plan:
        bench = None
        if experiment.benchmark == "decode_speed":
            bench = run_benchmark("decode_speed", out, speed_corpus(out, args.corpus, args.data, args.smoke, data),
                                  args.smoke)
        elif experiment.benchmark == "training_memory":
            bench = run_benchmark("training_memory", out, data, args.smoke)
        results = {system.key: system_results(os.path.join(runs, system.key), os.path.join(
            runs, system.starts_from) if system.starts_from else None) for _, system in rows}
        context = Context(rows, results, bench, os.path.join(out, f"{experiment.name}.png"))
        table, json_rows = experiment.table(context)
        if rows:
            context.curves = curves_plot(rows, results, os.path.join(out, f"{experiment.name}_curves.png"),
                                         f"{experiment.title}: validation loss")
            context.notes.append(budget_note(args, results))
        signature = next(iter(results.values()))["bleu_signature"] if results and experiment.name != "rfa_figure3" \
            else None
        text = write_outputs(experiment, out, args.corpus, context, table, json_rows, command, signature)
        print(text, flush=True)
    log(f"done in {time.monotonic() - start:.0f} s; tables: " +
        ", ".join(os.path.join(out, f"{e.name}.md") for e, _ in plan))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except DataError as error:
        sys.exit(f"error: {error}")
