#!/usr/bin/env bash
# Every reproduce_*.sh experiment on the embedded corpus, each system trained once, the
# benchmarks last (alone on the machine); 93 minutes on a 2-core AMD EPYC (README) before Table 1
# searched its settings and trained three seeds of each, which adds most of the 130 minutes
# docs/significance.md estimates for Table 1 alone (--seeds 1: the search alone); longer on slower
# machines: `python -m rfa_doc_mt.bench.update_cost` estimates it first. Progress on stderr.
# usage: scripts/reproduce_all.sh [--out DIR] [--jobs N] [--smoke] [--budget N] [--seeds N]
#        [--corpus NAME --data DIR] (--help for more)
# Prints its table(s) and writes OUT/<experiment>.md, .json (and .png); re-running resumes.
set -euo pipefail
source "$(dirname "$0")/common.sh"
exec "$PYTHON" -m rfa_doc_mt.reproduce all "$@"
