#!/usr/bin/env bash
# Context beyond four sentences (the question Wu et al. 2022 left open): the transformer, RFA-sgate,
# LSH (self + cross) and long-short masking at L = 1, 4, 8 and 15, and the recurrent memory
# model, on the long-range synthetic corpus (antecedents 1-14 sentences back, written to
# OUT/data-long-range): accuracy per antecedent distance, BLEU and cost in one table and figure.
# usage: scripts/reproduce_context_length.sh [--out DIR] [--jobs N] [--budget N] [--smoke] (--help for more)
# Prints its table(s) and writes OUT/<experiment>.md, .json (and .png); re-running resumes.
set -euo pipefail
source "$(dirname "$0")/common.sh"
exec "$PYTHON" -m rfa_doc_mt.reproduce context_length "$@"
