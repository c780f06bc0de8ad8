#!/usr/bin/env bash
# Zhang et al. 2020: the 1-to-1 and 3-to-3 transformers and the 3-to-3 long-short term masking model.
# Real corpus: --corpus paper --data DIR (configs/lstm).
# usage: scripts/reproduce_lstm.sh [--out DIR] [--jobs N] [--smoke] [--corpus NAME --data DIR] (--help for more)
# Prints its table(s) and writes OUT/<experiment>.md, .json (and .png); re-running resumes.
set -euo pipefail
source "$(dirname "$0")/common.sh"
exec "$PYTHON" -m rfa_doc_mt.reproduce lstm "$@"
