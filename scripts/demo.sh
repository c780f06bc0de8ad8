#!/usr/bin/env bash
# `make demo`: the whole pipeline on the embedded synthetic corpus, on CPU.
# Generate + binarize the corpus, train each demo system, decode the test documents with
# sliding windows, score s-BLEU / d-BLEU and contrastive consistency, then print the table
# and write it with a bar plot to $DEMO_DIR (default work/demo). Re-running resumes.
set -euo pipefail
source "$(dirname "$0")/common.sh"
export DEMO_DIR=${DEMO_DIR:-$ROOT/work/demo}  # configs/demo/memory_L1.sh finds its stage-1 model here
DATA=$DEMO_DIR/data
# "table name=config name" in table order; configs live in configs/demo/
SYSTEMS=(
  "Transformer L=1=transformer_L1"
  "Memory (from L=1)=memory_L1"
  "Transformer L=4=transformer_L4"
  "Long-short L=4=lstm_L4"
  "LSH self+cross L=4=lsh_L4"
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
  log "[$step/$total] $name"
  "$ROOT/scripts/run_system.sh" "$ROOT/configs/demo/$config_name.sh" "$DATA" "$DEMO_DIR/$config_name"
  report_args+=("$name=$DEMO_DIR/$config_name")
done

log "[$total/$total] results"
"$PYTHON" -m rfa_doc_mt.scoring.report --systems "${report_args[@]}" \
  --title "make demo: synthetic corpus ($(nproc) CPU cores)" \
  --markdown "$DEMO_DIR/results.md" --plot "$DEMO_DIR/consistency.png"
log "table: $DEMO_DIR/results.md, plot: $DEMO_DIR/consistency.png; $(( SECONDS - start )) s in all"
