#!/usr/bin/env bash
# Train a model: scripts/train.sh CONFIG DATA_DIR SAVE_DIR [extra fairseq-train args]
# Re-running resumes from SAVE_DIR/checkpoint_last.pt. A finished run is left untouched: one
# that ended with these same settings (SAVE_DIR/train.done, written when fairseq-train
# succeeds: this also covers early stopping), one that stopped on its patience when only
# --max-update is raised, or one whose checkpoint_last.pt has reached --max-update
# (fairseq-train, started again on it, would train one more update and rewrite the checkpoints).
# A run that stopped at its --max-update trains on when it is raised.
# Other options: those of `fairseq-train --user-dir rfa_doc_mt --task doc_translation` (after SAVE_DIR),
# e.g. --distributed-world-size N, --max-update N.
set -euo pipefail
source "$(dirname "$0")/common.sh"
help_requested "$@"
[ $# -ge 3 ] || die "usage: $0 CONFIG DATA_DIR SAVE_DIR [fairseq-train args...]"
config=$1; data=$2; save_dir=$3; shift 3
load_config "$config"
languages=$(data_languages "$data") || exit 2
read -r src tgt <<< "$languages"
# shellcheck disable=SC2206
settings=(--source-lang "$src" --target-lang "$tgt" $TASK_ARGS $MODEL_ARGS $TRAIN_ARGS "$@")

# The splits fairseq-train loads must exist: say so in one line (fairseq would end in a traceback).
binarized() { [ -f "$data/$1.$src-$tgt.$src.idx" ] || [ -f "$data/$1.$tgt-$src.$src.idx" ]; }
contrastive() { [ -f "$data/$1/consistency.json" ]; }  # contrastive sets validated on (tasks/validation.py)
present=$(shopt -s nullglob; for f in "$data"/*."$src-$tgt.$src".idx "$data"/*."$tgt-$src.$src".idx; do
            f=${f##*/}; echo "${f%%.*}"; done | sort -u | paste -sd, -)
train_subset=$(option_value --train-subset train "${settings[@]}")
if ! binarized "$train_subset"; then
  hint="prepare the corpus with its training text (for IWSLT, train.tags.$src-$tgt.* in --wit3-dir)"
  [ "$train_subset" = train ] && binarized valid && hint="$hint, or pass --train-subset valid for a smoke run"
  die "$data has no binarized '$train_subset' split to train on (its splits: ${present:-none}): $hint"
fi
if ! has_option --disable-validation "${settings[@]}"; then
  for subset in $(option_value --valid-subset valid "${settings[@]}" | tr , ' '); do
    binarized "$subset" || contrastive "$subset" || die "$data has no binarized '$subset' split and no contrastive sets $data/$subset/consistency.json to validate on (its splits: ${present:-none}): pass --valid-subset with one of them, prepare the sets (scripts/prepare_consistency.sh --out $data/$subset ...), or --disable-validation"
  done
fi

# SAVE_DIR/train.done holds the settings (one a line) of the run that finished there; a run that
# stopped on its patience stays finished when only --max-update is raised (rfa_doc_mt.training_state)
finished=$("$PYTHON" -m rfa_doc_mt.training_state "$save_dir" "${settings[@]}") \
  || die "could not read where the run in $save_dir stands (see above)"
if [ -n "$finished" ]; then
  log "train: $save_dir holds a finished run: $finished; left untouched. To train a run that stopped at its --max-update further, raise it (training resumes from checkpoint_last.pt); to train anew use another SAVE_DIR."
  exit 0
fi

mkdir -p "$save_dir"
rm -f "$save_dir/train.done"
# shellcheck disable=SC2086
fairseq_command fairseq-train "$data" --user-dir "$USER_DIR" --task doc_translation \
  "${settings[@]}" --save-dir "$save_dir" --log-format simple 2>&1 | tee -a "$save_dir/train.log" \
  | { grep --line-buffered -E "train_inner|valid on|done training|Error|error" >&2 || true; }
if has_option --disable-validation "${settings[@]}"; then
  # no validation, no best checkpoint: fairseq writes checkpoint_last.pt only
  [ -f "$save_dir/checkpoint_last.pt" ] || die "training wrote no checkpoint; see $save_dir/train.log"
  log "train: no validation (--disable-validation): the model is $save_dir/checkpoint_last.pt"
else
  [ -f "$save_dir/checkpoint_best.pt" ] || die "training wrote no checkpoint; see $save_dir/train.log"
fi
printf '%s\n' "${settings[@]}" > "$save_dir/.train.done.partial"
mv "$save_dir/.train.done.partial" "$save_dir/train.done"
