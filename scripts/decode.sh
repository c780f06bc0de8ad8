#!/usr/bin/env bash
# Sliding-window decoding: scripts/decode.sh CONFIG DATA_DIR CHECKPOINT OUT_PREFIX [fairseq-generate args]
# Writes OUT_PREFIX.hyp (one detokenized translation per sentence, document order),
# OUT_PREFIX.docs, OUT_PREFIX.ref (when the data has references), OUT_PREFIX.generate.log and,
# last, OUT_PREFIX.decode.json (which checkpoint and log the hypotheses came from; score.sh
# checks it). The earlier results of OUT_PREFIX are removed first: a failed or interrupted
# decode leaves nothing that could pass for its result.
# Defaults (override them in DECODE_ARGS or the arguments): beam 4, 64 windows a batch, at most
# 1.2 x the window's source tokens + 10 target tokens (a bound tied to the source, as the
# authors' release uses: theirs is 1.2 x + 70 for zh-en and 1 x + 50 for en-ru; fairseq's default, 200 more tokens than any source, lets an under-trained model that never
# ends a window run for tens of minutes), a progress line every 10 batches on stderr.
# Other options: those of `fairseq-generate --user-dir rfa_doc_mt --task doc_translation` (after OUT_PREFIX).
# SPLIT=valid decodes another split (default test).
set -euo pipefail
source "$(dirname "$0")/common.sh"
help_requested "$@"
[ $# -ge 4 ] || die "usage: $0 CONFIG DATA_DIR CHECKPOINT OUT_PREFIX [fairseq-generate args...]"
config=$1; data=$2; checkpoint=$3; out=$4; shift 4
load_config "$config"
[ -f "$checkpoint" ] || die "$checkpoint: checkpoint not found"
languages=$(data_languages "$data") || exit 2
read -r src tgt <<< "$languages"
split=${SPLIT:-test}
mkdir -p "$(dirname "$out")"
earlier=()
for suffix in hyp docs ref generate.log decode.json bleu.json; do
  [ -e "$out.$suffix" ] && earlier+=("$out.$suffix")
done
if [ ${#earlier[@]} -gt 0 ]; then
  log "decode: removing the earlier results this decode replaces: ${earlier[*]}"
  rm -f "${earlier[@]}"
fi
trap 'rm -f "$out.generate.log.tmp"' EXIT
log "decode: $split of $data with $checkpoint (log: $out.generate.err)"
status=0
# stdout (the translations) to the log; stderr to generate.err, its progress lines shown
# shellcheck disable=SC2086
fairseq_command fairseq-generate "$data" --user-dir "$USER_DIR" --task doc_translation \
  --source-lang "$src" --target-lang "$tgt" $TASK_ARGS --path "$checkpoint" --gen-subset "$split" \
  --beam 4 --batch-size 64 --max-len-a 1.2 --max-len-b 10 --log-format simple --log-interval 10 \
  $DECODE_ARGS "$@" 2>&1 > "$out.generate.log.tmp" | tee "$out.generate.err" \
  | { sed -u -n -E -e 's/.*progress_bar[^0-9]*([0-9]+) \/ ([0-9]+).*/decode: batch \1 of \2/p' \
        -e 's/.*(Translated [0-9,]+ sentences.*)/decode: \1/p' >&2 || true; } || status=$?
if [ "$status" != 0 ]; then
  tail -20 "$out.generate.err" >&2
  die "fairseq-generate failed; see $out.generate.err"
fi
mv "$out.generate.log.tmp" "$out.generate.log"
fixed=""; [[ " $TASK_ARGS " == *" --fixed-window "* ]] && fixed="--fixed-window"
"$PYTHON" -m rfa_doc_mt.generation.collect "$out.generate.log" --data "$data" --split "$split" \
  --target-lang "$tgt" --out "$out" --checkpoint "$checkpoint" $fixed
