#!/usr/bin/env bash
# `make demo`: the whole pipeline on the embedded synthetic corpus, on CPU.
# Generate + binarize the corpus, train each demo system, decode the test documents with
# sliding windows, score s-BLEU / d-BLEU and contrastive consistency, then print the table
# and write it with a bar plot to $DEMO_DIR (default work/demo). Re-running resumes.
# Systems run DEMO_JOBS at a time (default: one per CPU core, one torch thread each; on a GPU
# machine one per GPU, each on its own): tiny models use a second thread poorly, so two one-thread
# runs finish sooner than two in a row.
# usage: scripts/demo.sh (no options; DEMO_DIR and DEMO_JOBS in the environment)
set -euo pipefail
source "$(dirname "$0")/common.sh"
help_requested "$@"
export DEMO_DIR=${DEMO_DIR:-$ROOT/work/demo}  # configs/demo/memory_L1.sh finds its stage-1 model here
DATA=$DEMO_DIR/data
JOBS=${DEMO_JOBS:-$(default_jobs)}
GPUS=$("$PYTHON" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
# "table name=config name" in table order; configs live in configs/demo/
SYSTEMS=(
  "Transformer L=1=transformer_L1"
  "Memory (from L=1)=memory_L1"
  "Transformer L=4=transformer_L4"
  "RFA L=4=rfa_L4"
  "RFA-sgate L=4=rfa_sgate_L4"
  "Long-short L=4=lstm_L4"
  "LSH self+cross L=4=lsh_L4"
)
# the order they start in: the longest first, fine-tuned systems last (after their stage-1 run)
SCHEDULE=(lsh_L4 transformer_L1 transformer_L4 rfa_L4 rfa_sgate_L4 lstm_L4 memory_L1)
declare -A STARTS_FROM=([memory_L1]=transformer_L1)
start=$SECONDS
mkdir -p "$DEMO_DIR"

log "synthetic corpus -> $DATA"
if [ ! -f "$DATA/prep.json" ]; then
  "$ROOT/scripts/prepare_synthetic.sh" --out "$DATA" >&2
fi

declare -A PID GPU_OF
free_gpu() {  # a GPU no running system holds (several GPUs: each system on its own)
  local gpu name held
  for (( gpu = 0; gpu < GPUS; gpu++ )); do
    held=0
    for name in "${!GPU_OF[@]}"; do
      [ "${GPU_OF[$name]}" = "$gpu" ] && kill -0 "${PID[$name]}" 2>/dev/null && held=1
    done
    [ "$held" = 0 ] && { echo "$gpu"; return; }
  done
}
run_one() {  # config name [GPU]: train, decode, score; output in $DEMO_DIR/<config>.log
  local config_name=$1 begun=$SECONDS
  if [ -n "${2:-}" ]; then export CUDA_VISIBLE_DEVICES=$2; fi
  if OMP_NUM_THREADS=1 "$ROOT/scripts/run_system.sh" "$ROOT/configs/demo/$config_name.sh" "$DATA" \
      "$DEMO_DIR/$config_name" > "$DEMO_DIR/$config_name.log" 2>&1; then
    log "finished $config_name in $(( SECONDS - begun )) s"
  else
    log "FAILED $config_name; the end of $DEMO_DIR/$config_name.log:"; tail -15 "$DEMO_DIR/$config_name.log" >&2
    return 1
  fi
}
report_args=()
for system in "${SYSTEMS[@]}"; do
  name=${system%=*}; config_name=${system##*=}
  report_args+=("$name=$DEMO_DIR/$config_name")
done
[ ${#SCHEDULE[@]} = ${#SYSTEMS[@]} ] || die "SCHEDULE and SYSTEMS must list the same systems"
failed=0
for config_name in "${SCHEDULE[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || failed=1; done
  if [ -n "${STARTS_FROM[$config_name]:-}" ]; then
    first=${STARTS_FROM[$config_name]}
    while kill -0 "${PID[$first]}" 2>/dev/null; do sleep 5; done
    [ -f "$DEMO_DIR/$first/checkpoint_best.pt" ] || die "$config_name starts from $first, which failed"
  fi
  gpu=""
  if [ "$GPUS" -gt 1 ]; then gpu=$(free_gpu); GPU_OF[$config_name]=$gpu; fi
  log "started $config_name ($(( SECONDS - start )) s${gpu:+, GPU $gpu}; progress: tail -f $DEMO_DIR/$config_name.log)"
  run_one "$config_name" "$gpu" &
  PID[$config_name]=$!
done
while [ "$(jobs -rp | wc -l)" -gt 0 ]; do wait -n || failed=1; done
[ "$failed" = 0 ] || die "some systems failed (see above)"

log "results"
"$PYTHON" -m rfa_doc_mt.scoring.report --systems "${report_args[@]}" \
  --title "make demo: synthetic corpus ($(nproc) CPU cores)" \
  --markdown "$DEMO_DIR/results.md" --plot "$DEMO_DIR/consistency.png"
log "table: $DEMO_DIR/results.md, plot: $DEMO_DIR/consistency.png; $(( SECONDS - start )) s in all"
