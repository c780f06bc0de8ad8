"""Turn ``fairseq-generate`` output into translations ready to score.

fairseq-generate prints one ``H-<window id>`` line per window (already cut to the window's
last sentence by the task) in batch order. This puts them back in document order, undoes the
preprocessing recorded in the data directory's ``prep.json`` (sentencepiece, truecasing,
Moses tokenization) and writes, atomically::

    PREFIX.hyp   one translation per current sentence, in document order
    PREFIX.docs  their document boundaries
    PREFIX.ref   the matching references, when the data directory has {split}.ref.{lang}
"""

import argparse
import os
import re
import sys
from typing import Dict, List

from ..data.io import DataError, Document, read_docs, read_lines, write_docs, write_lines

HYPOTHESIS_LINE = re.compile(r"^H-(\d+)\t(\S+)\t?(.*)$")


def read_hypotheses(path: str) -> Dict[int, str]:
    """{window id: hypothesis tokens} from a fairseq-generate log (first H line per id)."""
    hypotheses: Dict[int, str] = {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            match = HYPOTHESIS_LINE.match(line.rstrip("\n"))
            if match:
                hypotheses.setdefault(int(match.group(1)), match.group(3).strip())
    if not hypotheses:
        raise DataError(f"{path}: no hypothesis lines (H-<id>); is it fairseq-generate's output?")
    return hypotheses


def load_postprocessor(data_dir: str, target_lang: str):
    """The inverse of the data directory's preprocessing (identity when it has no prep.json)."""
    if not os.path.isfile(os.path.join(data_dir, "prep.json")):
        return lambda text: text
    from ..data.text import Postprocessor

    return Postprocessor.from_prep(data_dir, target_lang)


def collect(generate_output: str, data_dir: str, split: str, target_lang: str, out_prefix: str,
            fixed_window: bool = False) -> int:
    hypotheses = read_hypotheses(generate_output)
    documents = read_docs(os.path.join(data_dir, f"{split}.docs"))
    windows = len(documents) if fixed_window else sum(d.num_sentences for d in documents)
    missing = [i for i in range(windows) if i not in hypotheses]
    if missing or len(hypotheses) != windows:
        raise DataError(f"{generate_output}: expected translations of windows 0..{windows - 1}, "
                        f"{len(missing)} missing (first: {missing[:5]}), {len(hypotheses)} found")
    postprocess = load_postprocessor(data_dir, target_lang)
    translations = [postprocess(hypotheses[i]) for i in range(windows)]
    reference_path = os.path.join(data_dir, f"{split}.ref.{target_lang}")
    references = read_lines(reference_path) if os.path.isfile(reference_path) else None
    if fixed_window:
        # one window per document: its last sentence is the one translated
        if references is not None:
            ends, total = [], 0
            for document in documents:
                total += document.num_sentences
                ends.append(total - 1)
            references = [references[i] for i in ends]
        documents = [Document(d.name, 1) for d in documents]
    if references is not None and len(references) != len(translations):
        raise DataError(f"{reference_path} has {len(references)} lines for {len(translations)} translations")
    write_lines(out_prefix + ".hyp", translations)
    write_docs(out_prefix + ".docs", documents)
    if references is not None:
        write_lines(out_prefix + ".ref", references)
    return len(translations)


def main(argv: List[str] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("generate_output", help="fairseq-generate's stdout")
    parser.add_argument("--data", required=True, help="the binarized data directory")
    parser.add_argument("--split", default="test")
    parser.add_argument("--target-lang", required=True)
    parser.add_argument("--fixed-window", action="store_true", help="the task ran with --fixed-window")
    parser.add_argument("--out", required=True, help="output prefix")
    args = parser.parse_args(argv)
    count = collect(args.generate_output, args.data, args.split, args.target_lang, args.out, args.fixed_window)
    print(f"wrote {count} translations to {args.out}.hyp")


if __name__ == "__main__":
    try:
        main()
    except DataError as error:
        sys.exit(f"error: {error}")
