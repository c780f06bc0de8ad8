#!/usr/bin/env bash
# s-BLEU and d-BLEU of decoded output: scripts/score.sh OUT_PREFIX [--checkpoint CKPT] [--tokenize zh]
# Reads OUT_PREFIX.hyp/.ref/.docs (written by decode.sh), writes OUT_PREFIX.bleu.json.
# Refuses hypotheses that are not the finished result of OUT_PREFIX.generate.log and of the
# checkpoint recorded in OUT_PREFIX.decode.json as it is now (or of CKPT when given).
# Other options: those of `python -m rfa_doc_mt.scoring.bleu` (after OUT_PREFIX).
set -euo pipefail
source "$(dirname "$0")/common.sh"
help_requested "$@"
[ $# -ge 1 ] || die "usage: $0 OUT_PREFIX [--checkpoint CKPT] [bleu args...]"
out=$1; shift
"$PYTHON" -m rfa_doc_mt.scoring.bleu --decoded "$out" --json "$out.bleu.json" "$@"
