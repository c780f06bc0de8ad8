#!/usr/bin/env bash
# One system end to end: scripts/run_system.sh CONFIG DATA_DIR OUT_DIR [fairseq-train args...]
# train (resumes) -> decode the test split with sliding windows -> s-BLEU/d-BLEU ->
# consistency accuracy when DATA_DIR has contrastive sets. Finished steps are skipped: a finished
# training run (train.sh), a decode that is the finished result of the current checkpoint_best.pt,
# scores newer than what they score.
# Leaves OUT_DIR/{checkpoint_best.pt, test.hyp, test.bleu.json, consistency.json}.
# EVALUATE (environment; default "test consistency"): what follows the training, any of
#   valid        decode and score the validation split (OUT_DIR/valid.hyp, valid.bleu.json, ...)
#   test         decode and score the test split
#   consistency  contrastive consistency (when DATA_DIR has contrastive sets)
#   attention    where the cross attention looks (rfa_doc_mt.scoring.attention): OUT_DIR/attention.json
#                of checkpoint_best.pt, OUT_DIR/attention.last.json of checkpoint_last.pt
# Other options: those of `fairseq-train --user-dir rfa_doc_mt --task doc_translation` (after OUT_DIR),
# for the training.
set -euo pipefail
source "$(dirname "$0")/common.sh"
help_requested "$@"
[ $# -ge 3 ] || die "usage: $0 CONFIG DATA_DIR OUT_DIR [fairseq-train args...]"
config=$1; data=$2; out=$3; shift 3
load_config "$config"
name=$(basename "$config" .sh)
log "$name: train"
"$ROOT/scripts/train.sh" "$config" "$data" "$out" "$@"
evaluate=${EVALUATE-test consistency}
for step in $evaluate; do
  case "$step" in valid|test|consistency|attention) ;;
    *) die "EVALUATE: valid, test, consistency and/or attention, got '$evaluate'" ;; esac
done
for split in valid test; do
  [[ " $evaluate " == *" $split "* ]] || continue
  if [ ! -f "$out/$split.hyp" ] \
      || ! "$PYTHON" -m rfa_doc_mt.generation.collect --verify "$out/$split" --checkpoint "$out/checkpoint_best.pt" \
      > /dev/null 2>&1; then
    log "$name: decode the $split documents (sliding windows, beam 4)"
    SPLIT=$split "$ROOT/scripts/decode.sh" "$config" "$data" "$out/checkpoint_best.pt" "$out/$split" >&2
  fi
  if [ ! -f "$out/$split.bleu.json" ] || [ "$out/$split.hyp" -nt "$out/$split.bleu.json" ]; then
    "$ROOT/scripts/score.sh" "$out/$split" --checkpoint "$out/checkpoint_best.pt" >&2
  fi
done
if [[ " $evaluate " == *" consistency "* ]] && [ -d "$data/consistency" ] && { [ ! -f "$out/consistency.json" ] \
    || [ "$out/checkpoint_best.pt" -nt "$out/consistency.json" ]; }; then
  log "$name: contrastive consistency"
  "$PYTHON" -m rfa_doc_mt.scoring.consistency --path "$out/checkpoint_best.pt" --data "$data" \
    --sets "$data/consistency" --json "$out/consistency.json" > "$out/consistency.log" 2>&1 \
    || { tail -20 "$out/consistency.log" >&2; die "consistency scoring failed; see $out/consistency.log"; }
fi
if [[ " $evaluate " == *" attention "* ]]; then
  # the checkpoint kept (attention.json) and the last one (attention.last.json: for runs of one
  # fixed budget, every run at the same point of training)
  for which in best last; do
    report="$out/attention.json"; [ "$which" = last ] && report="$out/attention.last.json"
    if [ ! -f "$report" ] || [ "$out/checkpoint_$which.pt" -nt "$report" ]; then
      log "$name: where the cross attention of checkpoint_$which.pt looks"
      "$PYTHON" -m rfa_doc_mt.scoring.attention --path "$out/checkpoint_$which.pt" --data "$data" \
        --json "$report" > "${report%.json}.log" 2>&1 \
        || { tail -20 "${report%.json}.log" >&2; die "reading the cross attention failed; see ${report%.json}.log"; }
    fi
  done
fi
