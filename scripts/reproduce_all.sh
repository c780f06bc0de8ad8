#!/usr/bin/env bash
# Every reproduce_*.sh experiment on the embedded corpus, each system trained once, the
# benchmarks last (alone on the machine). The tables other than Table 1 took 93 minutes on a 2-core
# AMD EPYC (docs/reproduction.md); Table 1's search and three seeds add about three and a half hours
# there at this script's 1000 updates (an estimate: docs/significance.md); longer on slower
# machines: `python -m rfa_doc_mt.reproduce.cost` estimates it first. Progress on stderr.
# usage: scripts/reproduce_all.sh [--out DIR] [--jobs N] [--smoke] [--budget N] [--seeds N]
#        [--corpus NAME --data DIR] (--help for more)
# Prints its table(s) and writes OUT/<experiment>.md, .json (and .png); re-running resumes.
set -euo pipefail
source "$(dirname "$0")/common.sh"
exec "$PYTHON" -m rfa_doc_mt.reproduce all "$@"
