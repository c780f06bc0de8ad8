#!/usr/bin/env bash
# Feng et al. 2022, Tables 1 and 3: the sentence-level baseline and the recurrent-memory model fine-tuned
# from it, and the memory side/layer ablation. Real corpus: --corpus paper --data DIR (configs/memory).
# usage: scripts/reproduce_memory_table1.sh [--out DIR] [--jobs N] [--smoke] [--corpus NAME --data DIR] (--help for more)
# Prints its table(s) and writes OUT/<experiment>.md, .json (and .png); re-running resumes.
set -euo pipefail
source "$(dirname "$0")/common.sh"
exec "$PYTHON" -m rfa_doc_mt.reproduce memory_table1 "$@"
