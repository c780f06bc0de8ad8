#!/usr/bin/env bash
# Wu et al. 2022, Figure 4: RFA's decoding speedup over the transformer for L=1..15 (random paper-size
# models; source text: the IWSLT15 test talks of ../shared/data when present). --corpus iwslt15 --data DIR
# for another prepared corpus; scripts/bench_decode_speed.sh for the larger batches.
# usage: scripts/reproduce_rfa_figure4.sh [--out DIR] [--jobs N] [--smoke] [--corpus NAME --data DIR] (--help for more)
# Prints its table(s) and writes OUT/<experiment>.md, .json (and .png); re-running resumes.
set -euo pipefail
source "$(dirname "$0")/common.sh"
exec "$PYTHON" -m rfa_doc_mt.reproduce rfa_figure4 "$@"
