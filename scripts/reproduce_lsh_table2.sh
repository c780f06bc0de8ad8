#!/usr/bin/env bash
# Petrick et al. 2022, Table 2: BLEU and training memory against the context size k for full attention,
# LSH self-attention and LSH self- and cross-attention. Real corpus: --corpus paper --data DIR
# (configs/lsh, k in {0,3,9,12}).
# usage: scripts/reproduce_lsh_table2.sh [--out DIR] [--jobs N] [--smoke] [--corpus NAME --data DIR] (--help for more)
# Prints its table(s) and writes OUT/<experiment>.md, .json (and .png); re-running resumes.
set -euo pipefail
source "$(dirname "$0")/common.sh"
exec "$PYTHON" -m rfa_doc_mt.reproduce lsh_table2 "$@"
