#!/usr/bin/env bash
# Sliding-window decoding: scripts/decode.sh CONFIG DATA_DIR CHECKPOINT OUT_PREFIX [fairseq-generate args]
# Writes OUT_PREFIX.hyp (one detokenized translation per sentence, document order),
# OUT_PREFIX.docs, OUT_PREFIX.ref (when the data has references) and OUT_PREFIX.generate.log.
set -euo pipefail
source "$(dirname "$0")/common.sh"
[ $# -ge 4 ] || die "usage: $0 CONFIG DATA_DIR CHECKPOINT OUT_PREFIX [fairseq-generate args...]"
config=$1; data=$2; checkpoint=$3; out=$4; shift 4
load_config "$config"
[ -f "$checkpoint" ] || die "$checkpoint: checkpoint not found"
read -r src tgt < <(data_languages "$data")
split=${SPLIT:-test}
mkdir -p "$(dirname "$out")"
# shellcheck disable=SC2086
"${FAIRSEQ_BIN}fairseq-generate" "$data" --user-dir "$USER_DIR" --task doc_translation \
  --source-lang "$src" --target-lang "$tgt" $TASK_ARGS --path "$checkpoint" --gen-subset "$split" \
  --beam 4 --batch-size 64 $DECODE_ARGS "$@" > "$out.generate.log.tmp" 2> "$out.generate.err" \
  || { tail -20 "$out.generate.err" >&2; die "fairseq-generate failed; see $out.generate.err"; }
mv "$out.generate.log.tmp" "$out.generate.log"
fixed=""; [[ " $TASK_ARGS " == *" --fixed-window "* ]] && fixed="--fixed-window"
"$PYTHON" -m rfa_doc_mt.generation.collect "$out.generate.log" --data "$data" --split "$split" \
  --target-lang "$tgt" --out "$out" $fixed
