#!/usr/bin/env bash
# Why RFA learns slowly, and remedies (docs/models.md): RFA with each of its attentions alone (the other one
# softmax), 4 x the cross projections, positive features, τ fixed, and the remedies (the delta rule,
# softmax heads over the current sentence), beside the transformer and RFA,
# at Table 1's L = 4 on the embedded corpus (RFA without a gate): learning curves of validation
# s-BLEU at a small fixed budget and where each model's cross attention looks.
# usage: scripts/reproduce_rfa_diagnosis.sh [--out DIR] [--jobs N] [--smoke] (--help for more)
# Prints its table and writes OUT/rfa_diagnosis.md, .json and its curves (.png); re-running resumes.
set -euo pipefail
source "$(dirname "$0")/common.sh"
exec "$PYTHON" -m rfa_doc_mt.reproduce rfa_diagnosis "$@"
