#!/usr/bin/env bash
# s-BLEU and d-BLEU of decoded output: scripts/score.sh OUT_PREFIX [--tokenize zh]
# Reads OUT_PREFIX.hyp/.ref/.docs (written by decode.sh), writes OUT_PREFIX.bleu.json.
set -euo pipefail
source "$(dirname "$0")/common.sh"
[ $# -ge 1 ] || die "usage: $0 OUT_PREFIX [bleu args...]"
out=$1; shift
"$PYTHON" -m rfa_doc_mt.scoring.bleu --hyp "$out.hyp" --ref "$out.ref" --docs "$out.docs" \
  --json "$out.bleu.json" "$@"
