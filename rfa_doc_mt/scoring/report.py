"""Results table (markdown) and consistency bar plot (PNG) for several trained systems.

Each system is a directory holding ``test.bleu.json`` (scoring/bleu.py) and
``consistency.json`` (scoring/consistency.py)::

    python -m rfa_doc_mt.scoring.report --systems "Transformer L=1=runs/t1" ... \
        --markdown results.md --plot consistency.png
"""

import argparse
import json
import os
import sys
from typing import List, Tuple

from ..data.io import DataError, atomic_write


def load_system(directory: str) -> dict:
    result = {}
    for key, name in (("bleu", "test.bleu.json"), ("consistency", "consistency.json")):
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            raise DataError(f"{path}: not found (did the system finish decoding and scoring?)")
        with open(path, encoding="utf-8") as handle:
            result[key] = json.load(handle)
    return result


def markdown_table(systems: List[Tuple[str, dict]]) -> str:
    phenomena = [p for p in systems[0][1]["consistency"] if p != "pooled"]
    header = ["system", "s-BLEU", "d-BLEU"] + phenomena + ["pooled", "random"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" + " ---: |" * (len(header) - 1)]
    for name, result in systems:
        consistency = result["consistency"]
        cells = [name, f"{result['bleu']['s_bleu']['score']:.2f}", f"{result['bleu']['d_bleu']['score']:.2f}"]
        cells += [f"{consistency[p]['accuracy']:.1f}" for p in phenomena]
        cells += [f"{consistency['pooled']['accuracy']:.1f}", f"{consistency['pooled']['random']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    signature = systems[0][1]["bleu"]["s_bleu"]["signature"]
    lines.append("")
    lines.append(f"BLEU signature: `{signature}`. Consistency: accuracy (%) on the contrastive sets; "
                 "random = the expected accuracy of picking a candidate at random.")
    return "\n".join(lines)


def consistency_plot(systems: List[Tuple[str, dict]], path: str) -> None:
    from ..provenance import pyplot

    plt = pyplot()

    phenomena = [p for p in systems[0][1]["consistency"] if p != "pooled"] + ["pooled"]
    width = 0.8 / len(systems)
    figure, axes = plt.subplots(figsize=(3.6 + 1.4 * len(phenomena), 4))
    for k, (name, result) in enumerate(systems):
        values = [result["consistency"][p]["accuracy"] for p in phenomena]
        axes.bar([i + (k - (len(systems) - 1) / 2) * width for i in range(len(phenomena))], values, width, label=name)
    random_baseline = [systems[0][1]["consistency"][p]["random"] for p in phenomena]
    for i, value in enumerate(random_baseline):
        axes.hlines(value, i - 0.45, i + 0.45, colors="black", linestyles="dashed",
                    label="random" if i == 0 else None)
    axes.set_xticks(range(len(phenomena)), phenomena)
    axes.set_ylabel("contrastive accuracy (%)")
    axes.set_ylim(0, 100)
    axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    figure.tight_layout()
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, "." + os.path.basename(path) + ".tmp.png")
    figure.savefig(tmp, dpi=120)
    plt.close(figure)
    os.replace(tmp, path)


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description="Results table and consistency plot")
    parser.add_argument("--systems", nargs="+", required=True, help="NAME=DIRECTORY pairs, in table order")
    parser.add_argument("--markdown", required=True)
    parser.add_argument("--plot", required=True)
    parser.add_argument("--title", default="Results")
    args = parser.parse_args(argv)
    systems = []
    for pair in args.systems:
        if "=" not in pair:
            raise DataError(f"--systems expects NAME=DIRECTORY, got {pair!r}")
        name, directory = pair.rsplit("=", 1)
        systems.append((name, load_system(directory)))
    table = markdown_table(systems)
    with atomic_write(args.markdown) as handle:
        handle.write(f"# {args.title}\n\n{table}\n")
    consistency_plot(systems, args.plot)
    print(table)
    return table


if __name__ == "__main__":
    try:
        main()
    except DataError as error:
        sys.exit(f"error: {error}")
