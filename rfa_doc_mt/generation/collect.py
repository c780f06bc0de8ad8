"""Turn ``fairseq-generate`` output into translations ready to score.

fairseq-generate prints one ``H-<window id>`` line per window (already cut to the window's
last sentence by the task) in batch order. This puts them back in document order, undoes the
preprocessing recorded in the data directory's ``prep.json`` (sentencepiece, truecasing,
Moses tokenization) and writes, atomically::

    PREFIX.hyp   one translation per current sentence, in document order
    PREFIX.docs  their document boundaries
    PREFIX.ref   the matching references, when the data directory has {split}.ref.{lang}

and, given the checkpoint (``--checkpoint``, as scripts/decode.sh does), last of all::

    PREFIX.decode.json  where PREFIX.hyp came from: the checkpoint (path, size, time), the
                        generate log and the hypotheses (SHA-256)

which ``--verify PREFIX`` (and scripts/score.sh) checks before scoring, so that hypotheses left
by an earlier run, or made from another checkpoint, are never scored as new.
"""

import argparse
import json
import os
import re
import sys
from typing import Dict, List, Optional

from ..data.io import (
    DataError,
    Document,
    atomic_write,
    read_docs,
    read_lines,
    read_text,
    sha256,
    text_lines,
    write_docs,
    write_lines,
)
from ..data.processing import corpus_postprocessor

HYPOTHESIS_LINE = re.compile(r"^H-(\d+)\t(\S+)\t?(.*)$")


def read_hypotheses(path: str) -> Dict[int, str]:
    """{window id: hypothesis tokens} from a fairseq-generate log (first H line per id)."""
    hypotheses: Dict[int, str] = {}
    for _, line in text_lines(path):
        match = HYPOTHESIS_LINE.match(line)
        if match:
            hypotheses.setdefault(int(match.group(1)), match.group(3).strip())
    if not hypotheses:
        raise DataError(f"{path}: no hypothesis lines (H-<id>); is it fairseq-generate's output?")
    return hypotheses


def collect(generate_output: str, data_dir: str, split: str, target_lang: str, out_prefix: str,
            fixed_window: bool = False) -> int:
    hypotheses = read_hypotheses(generate_output)
    documents = read_docs(os.path.join(data_dir, f"{split}.docs"))
    windows = len(documents) if fixed_window else sum(d.num_sentences for d in documents)
    missing = [i for i in range(windows) if i not in hypotheses]
    if missing or len(hypotheses) != windows:
        raise DataError(f"{generate_output}: expected translations of windows 0..{windows - 1}, "
                        f"{len(missing)} missing (first: {missing[:5]}), {len(hypotheses)} found")
    postprocess = corpus_postprocessor(data_dir, target_lang)
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


def checkpoint_identity(path: str) -> dict:
    """What tells one checkpoint file from a later one written to the same path."""
    status = os.stat(path)
    return {"checkpoint": os.path.abspath(path), "checkpoint_size": status.st_size,
            "checkpoint_mtime_ns": status.st_mtime_ns}


def write_provenance(out_prefix: str, checkpoint: str, generate_output: str, data_dir: str, split: str) -> None:
    """``PREFIX.decode.json``: which checkpoint and generate log ``PREFIX.hyp`` came from."""
    # the log relative to the outputs, so that the folder may be moved
    generate_log = os.path.relpath(os.path.abspath(generate_output), os.path.dirname(os.path.abspath(out_prefix)))
    record = dict(checkpoint_identity(checkpoint), generate_log=generate_log,
                  generate_log_sha256=sha256(generate_output), hyp_sha256=sha256(out_prefix + ".hyp"),
                  data=os.path.abspath(data_dir), split=split)
    with atomic_write(out_prefix + ".decode.json") as handle:
        json.dump(record, handle, indent=2)
        handle.write("\n")


def verify_decoded(out_prefix: str, checkpoint: Optional[str] = None) -> dict:
    """Stop unless ``PREFIX.hyp`` is the finished result of its generate log and checkpoint
    (``checkpoint`` when given: that one). Returns ``PREFIX.decode.json``'s record."""
    record_path, hyp = out_prefix + ".decode.json", out_prefix + ".hyp"
    again = "decode again (scripts/decode.sh)"
    if not os.path.isfile(record_path):
        raise DataError(f"{record_path}: not found, so {hyp} is not the result of a decode that finished "
                        f"(scripts/decode.sh writes it last); {again}")
    record = json.loads(read_text(record_path))
    generate_log = os.path.join(os.path.dirname(os.path.abspath(out_prefix)), record["generate_log"])
    for path in (hyp, generate_log):
        if not os.path.isfile(path):
            raise DataError(f"{path}: not found (named by {record_path}); {again}")
    if os.path.getmtime(hyp) < os.path.getmtime(generate_log):
        raise DataError(f"{hyp} is older than {generate_log}, so it was not made from it; {again}")
    if sha256(generate_log) != record["generate_log_sha256"]:
        raise DataError(f"{generate_log} is not the generate log {hyp} was made from ({record_path}); {again}")
    if sha256(hyp) != record["hyp_sha256"]:
        raise DataError(f"{hyp} was changed after decoding ({record_path}); {again}")
    decoded_with = record["checkpoint"]
    if checkpoint is not None and not (os.path.exists(checkpoint) and os.path.exists(decoded_with)
                                       and os.path.samefile(checkpoint, decoded_with)):
        raise DataError(f"{hyp} was decoded with {decoded_with}, not with {checkpoint}; {again}")
    if os.path.isfile(decoded_with):
        now = checkpoint_identity(decoded_with)
        if (now["checkpoint_size"], now["checkpoint_mtime_ns"]) != (record["checkpoint_size"],
                                                                    record["checkpoint_mtime_ns"]):
            raise DataError(f"{decoded_with} has been written again since {hyp} was decoded with it "
                            f"(training went on?): the hypotheses are from the checkpoint before; {again}")
    return record


def main(argv: List[str] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("generate_output", nargs="?", help="fairseq-generate's stdout")
    parser.add_argument("--data", help="the binarized data directory")
    parser.add_argument("--split", default="test")
    parser.add_argument("--target-lang")
    parser.add_argument("--fixed-window", action="store_true", help="the task ran with --fixed-window")
    parser.add_argument("--out", help="output prefix")
    parser.add_argument("--checkpoint", help="the checkpoint decoded: recorded in PREFIX.decode.json (with --out), "
                                             "or required to be the one recorded (with --verify)")
    parser.add_argument("--verify", metavar="PREFIX",
                        help="only check that PREFIX.hyp is the finished result of its generate log and checkpoint")
    args = parser.parse_args(argv)
    if args.verify:
        record = verify_decoded(args.verify, args.checkpoint)
        print(f"{args.verify}.hyp: decoded from {record['checkpoint']}")
        return
    missing = [option for option, value in (("generate_output", args.generate_output), ("--data", args.data),
                                            ("--target-lang", args.target_lang), ("--out", args.out)) if not value]
    if missing:
        parser.error(f"missing {', '.join(missing)}")
    count = collect(args.generate_output, args.data, args.split, args.target_lang, args.out, args.fixed_window)
    if args.checkpoint:
        write_provenance(args.out, args.checkpoint, args.generate_output, args.data, args.split)
    print(f"wrote {count} translations to {args.out}.hyp")


if __name__ == "__main__":
    try:
        main()
    except DataError as error:
        sys.exit(f"error: {error}")
