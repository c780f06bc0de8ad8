#!/usr/bin/env bash
# Every reproduce_*.sh experiment on the embedded corpus, each system trained once, the
# benchmarks last (alone on the machine); within an hour on a 2-core CPU. Progress on stderr.
# usage: scripts/reproduce_all.sh [--out DIR] [--jobs N] [--smoke] [--corpus NAME --data DIR] (--help for more)
# Prints its table(s) and writes OUT/<experiment>.md, .json (and .png); re-running resumes.
set -euo pipefail
source "$(dirname "$0")/common.sh"
exec "$PYTHON" -m rfa_doc_mt.reproduce all "$@"
