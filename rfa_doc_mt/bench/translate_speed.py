"""Throughput of translating raw documents against decoding the same prepared split.

    python -m rfa_doc_mt.bench.translate_speed --config CONFIG --checkpoint CKPT --data DIR --input RAW
        [--split test] [--repeats 2] [--out JSON] [--keep DIR]

Runs, one after the other and ``--repeats`` times each (alternating), as a user runs them:
``scripts/decode.sh CONFIG DIR CKPT PREFIX`` (fairseq-generate on the binarized split, then
collect: post-processing) and ``scripts/translate.sh --checkpoint CKPT --data DIR --input RAW``
(pre-processing from raw text, the same decoding, post-processing). Each is timed from the
start of its process to its end, start-up included, and reported in sentences per second;
the JSON holds every run, the machine and the commit, and whether the two gave the same lines.
Both use decode.sh's defaults (beam 4, 64 windows a batch, 1.2 x source + 10 tokens).
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import List, Optional, Sequence

from ..data.io import DataError, read_lines
from ..data.plain_text import read_documents
from ..provenance import commit_info, machine_info, record_load_at_end, write_json

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def timed(command: List[str], env: dict) -> float:
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        raise RuntimeError(f"{command[0]} failed:\n{result.stderr[-3000:]}")
    return seconds


def main(argv: Optional[Sequence[str]] = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m rfa_doc_mt.bench.translate_speed",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="the model's config (decode.sh reads its TASK_ARGS)")
    parser.add_argument("--checkpoint", required=True, help="the trained model")
    parser.add_argument("--data", required=True, help="the prepared corpus, with the split binarized")
    parser.add_argument("--input", required=True, help="the split's raw source documents (what translate.sh reads)")
    parser.add_argument("--split", default="test", help="the binarized split decode.sh decodes (default test)")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each command, alternating (default 2)")
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--keep", metavar="DIR",
                        help="keep the last run's outputs in DIR: SPLIT.* of decode.sh and translate.sh's translations "
                             "(translated.txt), to score")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        raise DataError("--repeats must be at least 1")
    sentences = len(read_documents(args.input).sentences)
    result = {"benchmark": "translate_speed", "machine": machine_info("cpu"), **commit_info(),
              "settings": {"config": args.config, "checkpoint": os.path.abspath(args.checkpoint),
                           "data": os.path.abspath(args.data), "input": os.path.abspath(args.input),
                           "split": args.split, "sentences": sentences},
              "runs": {"decode.sh": [], "translate.sh": []}}
    with tempfile.TemporaryDirectory(prefix="translate-speed-") as work:
        prefix, output = os.path.join(work, args.split), os.path.join(work, "translated.txt")
        decode = [os.path.join(ROOT, "scripts", "decode.sh"), args.config, args.data, args.checkpoint, prefix]
        translate = [os.path.join(ROOT, "scripts", "translate.sh"), "--checkpoint", args.checkpoint, "--data",
                     args.data, "--input", args.input, "--output", output, "--boundaries", "auto"]
        env = dict(os.environ, SPLIT=args.split)  # the split decode.sh decodes
        for repeat in range(args.repeats):
            for name, command in (("decode.sh", decode), ("translate.sh", translate)):
                seconds = timed(command, env)
                result["runs"][name].append(seconds)
                print(f"{name} run {repeat + 1}: {seconds:.1f} s ({sentences / seconds:.2f} sentences/s)", flush=True)
        hypotheses = read_lines(prefix + ".hyp")
        translated = read_documents(output, empty_sentences=True).sentences
        result["same_translations"] = hypotheses == translated
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
            for name in sorted(os.listdir(work)):
                shutil.copy2(os.path.join(work, name), os.path.join(args.keep, name))
    best = {name: min(runs) for name, runs in result["runs"].items()}
    result["sentences_per_second"] = {name: sentences / seconds for name, seconds in best.items()}
    result["median_seconds"] = {name: statistics.median(runs) for name, runs in result["runs"].items()}
    result["translate_over_decode"] = result["sentences_per_second"]["translate.sh"] / \
        result["sentences_per_second"]["decode.sh"]
    record_load_at_end(result)
    print(f"{sentences} sentences; best of {args.repeats}: decode.sh {result['sentences_per_second']['decode.sh']:.2f} "
          f"sentences/s, translate.sh {result['sentences_per_second']['translate.sh']:.2f} sentences/s; "
          f"translate / decode = {result['translate_over_decode']:.3f}; same translations: "
          f"{result['same_translations']}")
    if args.out:
        write_json(result, args.out)
        print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    try:
        main()
    except DataError as error:
        sys.exit(f"error: {error}")
