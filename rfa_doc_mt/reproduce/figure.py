"""Learning curves of chosen rows from finished experiments, one panel per report:
``python -m rfa_doc_mt.reproduce.figure --panel REPORT.json:ROW,ROW --panel ... --out PNG``.

A report is the JSON an experiment writes beside its table (``rfa_diagnosis.json``,
``rfa_table1.json``, ``context_length.json``...). Each row is drawn as the mean validation s-BLEU
over its seeds with a band from the lowest to the highest seed; a row keeps its colour in every
panel, so that the same system can be followed from a short window to a long one. Rows of one
panel come from one report, so they share its corpus and training budget.
"""

import argparse
import os
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from ..data.io import DataError
from .papers import row_seed
from .tables import draw_seed_band, line_style, read_json

Curve = List[Tuple[int, float]]


def row_curves(report: dict, row: str) -> Tuple[str, List[Curve]]:
    """(label, [curve of each seed]) of ``row`` in an experiment's report: a row with its seeds
    listed (a table searched over seeds), a row of one run, or one report row per seed
    (``ROW_seedN``)."""
    curves_by_run = report.get("valid_bleu_curves", {})
    label, curves = None, []
    for entry in report.get("rows", []):
        if entry.get("row") != row and row_seed(entry.get("row", ""))[0] != row:
            continue
        label = label or entry.get("system", row).rsplit(" L=", 1)[0]
        if entry.get("seeds"):
            curves += [curves_by_run.get(seed["run"], []) for seed in entry["seeds"]]
        elif "valid_bleu_curve" in entry:
            curves.append(entry["valid_bleu_curve"])
        elif entry.get("run") in curves_by_run:
            curves.append(curves_by_run[entry["run"]])
    if label is None:
        known = sorted({row_seed(entry.get("row", ""))[0] for entry in report.get("rows", [])})
        raise DataError(f"no row {row!r} in the report {report.get('title', '')!r}; its rows: {', '.join(known)}")
    if not any(curves):
        raise DataError(f"row {row!r} of {report.get('title', '')!r} has no validation s-BLEU curve "
                        "(the experiment validates on s-BLEU only under --converge or a fixed budget)")
    return label, [[(int(updates), float(score)) for updates, score in curve] for curve in curves]


def parse_panel(text: str) -> Tuple[str, List[str]]:
    path, colon, rows = text.rpartition(":")
    rows_list = [row for row in rows.split(",") if row]
    if not colon or not path or not rows_list:
        raise argparse.ArgumentTypeError(f"expected REPORT.json:ROW[,ROW...], got {text!r}")
    return path, rows_list


def curves_figure(panels: Sequence[Tuple[str, dict, Sequence[str]]], labels: Optional[Dict[str, str]] = None):
    """A matplotlib figure with a panel (title, report, rows) side by side; the same row label
    has the same colour and line style in every panel. ``labels``: row → the label to draw it
    under, in place of the report's (so that one system named two ways in two reports is one
    line style)."""
    from ..provenance import pyplot

    plt = pyplot()

    columns = len(panels) if len(panels) <= 3 else 2  # four or more panels: two a row
    lines = -(-len(panels) // columns)
    figure, axes = plt.subplots(lines, columns, figsize=(5.2 * columns, 4.2 * lines), squeeze=False)
    for axis in axes.flat[len(panels):]:
        axis.remove()
    styles: Dict[str, Dict[str, str]] = {}
    for axis, (title, report, rows) in zip(axes.flat, panels):
        for row in rows:
            label, curves = row_curves(report, row)
            label = (labels or {}).get(row, label)
            draw_seed_band(axis, curves, label, styles.setdefault(label, line_style(len(styles))))
        axis.set_xlabel("updates")
        axis.set_title(title, fontsize=9)
        axis.legend(fontsize="x-small")
        axis.grid(alpha=0.3)
    for line in axes:
        line[0].set_ylabel("validation s-BLEU")
    figure.tight_layout()
    return figure


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rfa_doc_mt.reproduce.figure", description=__doc__.split("\n\n")[0])
    parser.add_argument("--panel", action="append", type=parse_panel, required=True, metavar="REPORT.json:ROW[,ROW]",
                        help="a panel: an experiment's report and the rows to draw from it (repeat for more panels)")
    parser.add_argument("--title", action="append", default=[],
                        help="a panel's title, in the order of --panel (default: the report's title)")
    parser.add_argument("--label", action="append", default=[], metavar="ROW=LABEL",
                        help="draw ROW (in any panel) under LABEL instead of the report's name for it")
    parser.add_argument("--out", required=True, help="the PNG to write")
    args = parser.parse_args(argv)
    if len(args.title) > len(args.panel):
        parser.error(f"{len(args.title)} titles for {len(args.panel)} panels")
    labels = {}
    for text in args.label:
        row, equals, label = text.partition("=")
        if not equals or not row or not label:
            parser.error(f"--label expects ROW=LABEL, got {text!r}")
        labels[row] = label
    panels = []
    for index, (path, rows) in enumerate(args.panel):
        if not os.path.isfile(path):
            raise DataError(f"no report at {path} (an experiment writes it beside its table)")
        report = read_json(path)
        title = args.title[index] if index < len(args.title) else report.get("title", path)
        panels.append((title, report, rows))
    figure = curves_figure(panels, labels)
    from ..provenance import save_figure

    save_figure(figure, args.out)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except DataError as error:
        sys.exit(f"error: {error}")
