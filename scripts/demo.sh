#!/usr/bin/env bash
# `make demo`: the whole pipeline on the embedded synthetic corpus, on CPU.
# Generate + binarize the corpus, train each demo system, decode the test documents with
# sliding windows, score s-BLEU / d-BLEU and contrastive consistency, then print the table
# and write it with a bar plot to $DEMO_DIR (default work/demo). Re-running resumes.
set -euo pipefail
source "$(dirname "$0")/common.sh"
DEMO_DIR=${DEMO_DIR:-$ROOT/work/demo}
DATA=$DEMO_DIR/data
# "table name=config name" in table order; configs live in configs/demo/
SYSTEMS=(
  "Transformer L=1=transformer_L1"
  "Transformer L=4=transformer_L4"
)
start=$SECONDS
total=$(( ${#SYSTEMS[@]} + 2 ))
mkdir -p "$DEMO_DIR"

log "[1/$total] synthetic corpus -> $DATA"
if [ ! -f "$DATA/prep.json" ]; then
  "$ROOT/scripts/prepare_synthetic.sh" --out "$DATA" >&2
fi

step=1
report_args=()
for system in "${SYSTEMS[@]}"; do
  step=$((step + 1))
  name=${system%=*}; config_name=${system##*=}
  config=$ROOT/configs/demo/$config_name.sh
  out=$DEMO_DIR/$config_name
  log "[$step/$total] $name ($config): train"
  "$ROOT/scripts/train.sh" "$config" "$DATA" "$out"
  if [ ! -f "$out/test.hyp" ]; then
    log "[$step/$total] $name: decode test (sliding windows, beam 4)"
    "$ROOT/scripts/decode.sh" "$config" "$DATA" "$out/checkpoint_best.pt" "$out/test" >&2
  fi
  log "[$step/$total] $name: score"
  "$ROOT/scripts/score.sh" "$out/test" >&2
  if [ ! -f "$out/consistency.json" ]; then
    "$PYTHON" -m rfa_doc_mt.scoring.consistency --path "$out/checkpoint_best.pt" --data "$DATA" \
      --sets "$DATA/consistency" --json "$out/consistency.json" > "$out/consistency.log" 2>&1 \
      || { tail -20 "$out/consistency.log" >&2; die "consistency scoring failed"; }
  fi
  report_args+=("$name=$out")
done

log "[$total/$total] results"
"$PYTHON" -m rfa_doc_mt.scoring.report --systems "${report_args[@]}" \
  --title "make demo: synthetic corpus ($(nproc) CPU cores)" \
  --markdown "$DEMO_DIR/results.md" --plot "$DEMO_DIR/consistency.png"
log "table: $DEMO_DIR/results.md, plot: $DEMO_DIR/consistency.png; $(( SECONDS - start )) s in all"
