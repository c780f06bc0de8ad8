"""The diagnosis of RFA's slow learning: a table of its learning curves, beside the transformer's,
with each attention of RFA alone, more random features, the other feature map and τ fixed; and
where each model's cross attention looks (the share of its weight on the current sentence's
source, :mod:`rfa_doc_mt.scoring.attention`), read from the checkpoint each row keeps."""

import os
from typing import List, Optional, Tuple

from .tables import fmt, markdown, read_json


def attention_share(run_dir: str, report: str = "attention.json") -> Optional[dict]:
    """The run's attention.json (scripts/run_system.sh's ``attention`` step): where the cross
    attention of its kept checkpoint looks, on the validation split (``attention.last.json``: of its
    last checkpoint); None without one."""
    path = os.path.join(run_dir, report)
    return read_json(path) if os.path.isfile(path) else None


def share_cells(share: Optional[dict]) -> List[str]:
    """The top decoder layer's share and the mean over layers, as two cells."""
    if share is None:
        return ["—", "—"]
    return [fmt(share["per_layer"][-1], 3), fmt(sum(share["per_layer"]) / len(share["per_layer"]), 3)]


def table_rfa_diagnosis(context) -> Tuple[str, list]:
    """One row per system: its validation s-BLEU at every validation, the update of its best and the
    updates to 95% and 99% of it, test s-BLEU, and its cross attention's share on the current
    source sentence (mean over layers and heads; per layer in the JSON)."""
    curves = {system.key: (context.results[system.key].get("convergence") or {}).get("curve") or []
              for _, system in context.systems}
    updates = sorted({u for curve in curves.values() for u, _ in curve})
    rows, json_rows, uniform, last_updates = [], [], None, set()
    for row_id, system in context.systems:
        result = context.results[system.key]
        summary = result.get("convergence")
        points = dict(curves[system.key])
        run_dir = os.path.join(context.runs, system.key) if context.runs else None
        share = attention_share(run_dir) if run_dir else None
        last = attention_share(run_dir, "attention.last.json") if run_dir else None
        if share is not None:
            uniform = share["uniform"]
        if last is not None:
            last_updates.add(last.get("updates"))
        cells = ["—"] * 4 if summary is None else \
            [fmt(summary["best_valid_bleu"]), fmt(summary["best_update"], 0), fmt(summary["updates_to_95"], 0),
             fmt(summary["updates_to_99"], 0)]
        rows.append([system.label] + [fmt(points.get(u)) for u in updates] + cells + [fmt(result["s_bleu"])] +
                    share_cells(share) + share_cells(last))
        json_rows.append({"row": row_id, "system": system.label, "config": system.config,
                          "options": list(system.overrides), "s_bleu": result["s_bleu"], "d_bleu": result["d_bleu"],
                          "valid_bleu_curve": curves[system.key],
                          "convergence": None if summary is None else {k: v for k, v in summary.items()
                                                                        if k != "curve"},
                          "cross_attention_on_current_sentence": share,
                          "cross_attention_on_current_sentence_last": last})
    header: List[str] = ["system"] + [f"valid {u}" for u in updates] + \
        ["best valid", "selected at", "to 95%", "to 99%", "test s-BLEU", "current sentence (top layer)",
         "current sentence (mean)", "last: current sentence (top layer)", "last: current sentence (mean)"]
    same_point = (f"at {last_updates.pop()} updates for every row, the same point of training"
                  if len(last_updates) == 1 and None not in last_updates else "at the update each run ended")
    context.notes.append(
        "valid N: validation s-BLEU after N updates; best valid, selected at: the best of the curve and its update "
        "(the checkpoint kept); to 95%, to 99%: the first update reaching 95% and 99% of the run's own best (within "
        "this budget); test s-BLEU: the checkpoint kept. Current sentence: the share of cross-attention weight "
        "that the current sentence's target tokens put on the current source sentence (teacher-forced, the "
        "first 200 validation windows of more than one sentence; `python -m rfa_doc_mt.scoring.attention`), "
        "in the top decoder layer and the mean over layers and heads, of the checkpoint kept and (last:) of the "
        f"last checkpoint, {same_point}"
        + (f"; an even spread over the window would give {uniform:.3f}." if uniform is not None else "."))
    return markdown(header, rows), json_rows
