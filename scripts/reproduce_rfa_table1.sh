#!/usr/bin/env bash
# Wu et al. 2022, Table 1: s-BLEU and d-BLEU of the transformer and RFA at L=1, and of the transformer,
# RFA, RFA-sgate-avg and RFA-sgate at L=4. Real corpora: --corpus iwslt15|opensub-bleu --data DIR.
# On the embedded corpus each system's hyper-parameters are searched as the paper did (seed 1,
# chosen on validation BLEU), the chosen setting trains --seeds seeds (default 3), and each system
# is compared with the transformer of its L, seed by seed (docs/significance.md); --budget N and
# --seeds N trade time for certainty (`python -m rfa_doc_mt.reproduce --list` shows the runs).
# usage: scripts/reproduce_rfa_table1.sh [--out DIR] [--jobs N] [--smoke] [--budget N] [--seeds N]
#        [--corpus NAME --data DIR] (--help for more)
# Prints its table(s) and writes OUT/<experiment>.md, .json (and .png); re-running resumes.
set -euo pipefail
source "$(dirname "$0")/common.sh"
exec "$PYTHON" -m rfa_doc_mt.reproduce rfa_table1 "$@"
