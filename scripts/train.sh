#!/usr/bin/env bash
# Train a model: scripts/train.sh CONFIG DATA_DIR SAVE_DIR [extra fairseq-train args]
# Re-running resumes from SAVE_DIR/checkpoint_last.pt (and does nothing once finished).
set -euo pipefail
source "$(dirname "$0")/common.sh"
[ $# -ge 3 ] || die "usage: $0 CONFIG DATA_DIR SAVE_DIR [fairseq-train args...]"
config=$1; data=$2; save_dir=$3; shift 3
load_config "$config"
read -r src tgt < <(data_languages "$data")
mkdir -p "$save_dir"
# shellcheck disable=SC2086
"${FAIRSEQ_BIN}fairseq-train" "$data" --user-dir "$USER_DIR" --task doc_translation \
  --source-lang "$src" --target-lang "$tgt" $TASK_ARGS $MODEL_ARGS $TRAIN_ARGS \
  --save-dir "$save_dir" --log-format simple "$@" 2>&1 | tee -a "$save_dir/train.log" \
  | { grep --line-buffered -E "train_inner|valid on|done training|Error|error" >&2 || true; }
[ -f "$save_dir/checkpoint_best.pt" ] || die "training wrote no checkpoint; see $save_dir/train.log"
