#!/usr/bin/env bash
# Wu et al. 2022, Figure 3: contrastive consistency per phenomenon of the transformer and RFA at
# L=1..4, with the random baseline. Real corpus: --corpus opensub-consistency --data DIR (with consistency/).
# usage: scripts/reproduce_rfa_figure3.sh [--out DIR] [--jobs N] [--smoke] [--corpus NAME --data DIR] (--help for more)
# Prints its table(s) and writes OUT/<experiment>.md, .json (and .png); re-running resumes.
set -euo pipefail
source "$(dirname "$0")/common.sh"
exec "$PYTHON" -m rfa_doc_mt.reproduce rfa_figure3 "$@"
