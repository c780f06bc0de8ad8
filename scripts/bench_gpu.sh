#!/usr/bin/env bash
# RFA against the transformer on one GPU, eager and fused decoding (docs/benchmarks.md, On a GPU):
#   scripts/bench_gpu.sh OUT_DIR [--data DIR] [--dtype2 fp16|bf16] [--dry-run]
# Plan, sized for at most 8.5 minutes on one H100 or H200: the four steps share a budget of 500 s, each
# capped (a step that fails or runs out of time leaves what it measured, and the next step runs); the plan's
# window sizes are L = 1, 15, 4, 10 (in that order: the ends first, so that a run cut short keeps the L that
# matter most), in both dtypes:
#   0. the cross read alone (cap 40 s, expected ~25 s): python -m rfa_doc_mt.bench.readout_bandwidth at the
#      L = 1 batch (1024 sources), the fused kernel's products in fp32 and in 3xTF32 against a plain pass
#      over the summaries' memory, and the 3xTF32 read under 12 launch settings (--sweep: projections per
#      block, warps, stages) -> OUT_DIR/readout.json; the fastest, if 5% faster than the default with the
#      same output, is the decoding steps' (decode_speed --cross-read-launch)
#   1. decode speed in fp32 (cap 190 s, expected ~2.3 min): the paper's batches (--batch-scale 1), beam 4,
#      outputs forced to the reference length, one batch per L; the transformer, RFA on the eager path, RFA
#      on the fused path (Triton kernels), the remedy (RFA with 2 of its cross heads local, rfa-crosslocal2,
#      on the fused path: its local heads in a kernel of their own) and the ceiling in one process; the
#      kernels each model's decoder steps launch and the device time they take (torch.profiler, steps 1, 2,
#      4, 8, 16 of the first batch; the first step, which reads the source, apart) -> OUT_DIR/fp32/
#   2. training speed (cap 150 s, expected ~1.8 min): a training step of the transformer and RFA at L = 1, 4,
#      15 on the GPU, RFA with its training features fused (Triton) and in torch's operators, seconds and peak
#      GPU memory per step, and one more step profiled (the kernels that take its time) -> OUT_DIR/training.json
#   3. decode speed in --dtype2 (default fp16; cap 120 s, expected ~1.8 min): as 1, without RFA's eager path
#      (step 1 compares the paths), its kernels profiled at steps 1, 2, 4 -> OUT_DIR/<dtype2>/
#   4. the plots of runs cut short, and the tables (Markdown: speeds, time per decoder step, training)
#      -> printed and OUT_DIR/tables.md
# The sizes come from the H200 runs in docs/benchmarks.md: in the second, with these four L, step 1 took
# 136 s, step 2 70 s for two models (three now) and step 3 109 s; in the first, with seven L in step 1 and
# caps of 70 s and 90 s for steps 2 and 3, none of the three finished.
# Source text: as scripts/bench_decode_speed.sh (IWSLT15's test talks, prepared on first use from
# ../shared/data/iwslt15-zh-en, else the synthetic corpus; --data DIR: a prepared corpus).
# --dry-run: the same steps on this machine's CPU, in under a minute, to check the script and the
# code paths: the *_tiny models, one window of L = 1, beam 2, bf16 as the second dtype, and the
# fused path in Triton's interpreter (TRITON_INTERPRET=1; needs triton installed). Not a measurement.
# Exit status: 0 when every step succeeded; the log names the steps that failed.
set -euo pipefail
source "$(dirname "$0")/common.sh"
help_requested "$@"
[ $# -ge 1 ] || die "usage: $0 OUT_DIR [--data DIR] [--dtype2 fp16|bf16] [--dry-run]"
OUT=$1; shift
DATA=""
DTYPE2=fp16
DRY_RUN=0
while [ $# -gt 0 ]; do
  case "$1" in
    --data) [ $# -ge 2 ] || die "--data needs a directory"; DATA=$2; shift 2 ;;
    --dtype2) [ $# -ge 2 ] || die "--dtype2 needs fp16 or bf16"; DTYPE2=$2; shift 2 ;;
    --dry-run) DRY_RUN=1; shift ;;
    *) die "unknown option $1" ;;
  esac
done
mkdir -p "$OUT"
FAILED=()
STARTED=$SECONDS

# step NAME CAP COMMAND...: run COMMAND, logged, for at most CAP seconds and never past the budget (a
# step with under 30 seconds left is skipped); a failure is recorded, not fatal
step() {
  local name=$1 limit=$2; shift 2
  local left=$((BUDGET - (SECONDS - STARTED)))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 30 ]; then
    FAILED+=("$name (skipped: ${left}s of the budget left)")
    log "step $name skipped: ${left}s of the ${BUDGET}s budget left"
    return 0
  fi
  log "step $name (at most ${limit}s; $((SECONDS - STARTED))s elapsed): $*"
  local status=0
  timeout --signal=TERM --kill-after=15 "$limit" "$@" || status=$?
  if [ "$status" -eq 0 ]; then
    log "step $name done"
    return 0
  fi
  if [ "$status" -eq 124 ]; then
    FAILED+=("$name (out of time after ${limit}s)")
  else
    FAILED+=("$name (exit status $status)")
  fi
  log "step $name failed (exit status $status); what it wrote is kept"
}

if [ "$DRY_RUN" = 1 ]; then
  DEVICE=cpu
  DTYPE2=bf16
  export TRITON_INTERPRET=1  # the fused kernels on CPU tensors, in Triton's interpreter
  "$PYTHON" -c 'import triton' 2>/dev/null || die "--dry-run checks the fused path: install triton (the gpu extra)"
  DECODE=(--device cpu --tiny --window-sizes 1 --batch-sizes 1 --batches 1 --beam 2 --threads 1)
  FIRST=()
  SECOND=()
  KERNEL_COUNTS=(--kernel-counts 2)
  KERNEL_COUNTS2=(--kernel-counts 1)
  READOUT=(--fused --sources 2 --heads 2 --features 16 --head-dim 4 --layers 2 --repeats 1 --sweep)
  TRAINING=(--device cpu --tiny --window-sizes 1 --tokens 256 --steps 1 --profile 3 --rfa-features auto,torch)
  LIMITS=(120 60 120 60)
  BUDGET=360
else
  DEVICE=cuda
  "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' \
    || die "no CUDA device (use --dry-run to check the script on a CPU)"
  "$PYTHON" -c 'import triton' 2>/dev/null \
    || die "triton is not installed: pip install -c requirements.txt triton (the gpu extra)"
  DECODE=(--device cuda --batch-scale 1 --batches 1 --threads 4)
  FIRST=(--window-sizes 1,15,4,10)
  SECOND=(--window-sizes 1,15,4,10)
  KERNEL_COUNTS=(--kernel-counts 5)
  KERNEL_COUNTS2=(--kernel-counts 3)
  READOUT=(--device cuda --sources 1024 --repeats 10 --sweep)  # the L = 1 batch, where the read weighs most
  TRAINING=(--device cuda --window-sizes 1,4,15 --steps 3 --threads 4 --profile 8 --rfa-features auto,torch)
  LIMITS=(190 150 120 40)  # the cross read: 10 s in the last run, and its sweep's 12 compilations
  BUDGET=500  # seconds for the four steps: with the installation, the checks and the tables, 8.5 minutes
fi
export KINETO_LOG_LEVEL=${KINETO_LOG_LEVEL:-5}  # the profiler's own messages: errors only
# the remedy the toolkit recommends (configs/demo/rfa_cross_local_L4.sh's heads on the benchmark's ungated
# RFA), on the fused path with RFA's (decode_speed: the variants take the fused path when it is measured)
REMEDY=(--rfa-variant "crosslocal2=--rfa-cross-local-heads 2")
DATA_ARGS=()
[ -z "$DATA" ] || DATA_ARGS=(--data "$DATA")
"$PYTHON" -c 'import torch; print("torch", torch.__version__, "|", torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU")' >&2

step "cross read" "${LIMITS[3]}" "$PYTHON" -m rfa_doc_mt.bench.readout_bandwidth "${READOUT[@]}" \
  --out "$OUT/readout.json"
# the decoding steps read the source summaries with the sweep's fastest launch setting, where one beats the default
CROSS_LAUNCH=()
if [ -f "$OUT/readout.json" ]; then
  best=$("$PYTHON" -m rfa_doc_mt.bench.readout_bandwidth --best "$OUT/readout.json" || true)
  if [ -n "$best" ]; then
    CROSS_LAUNCH=(--cross-read-launch "$best")
    log "the cross read's fastest launch setting, for the decoding steps: $best"
  else
    log "the cross read's default launch setting is as fast as any swept (within 5%)"
  fi
fi
step "decode fp32" "${LIMITS[0]}" "$ROOT/scripts/bench_decode_speed.sh" --out "$OUT/fp32" \
  ${DATA_ARGS[@]+"${DATA_ARGS[@]}"} --dtype fp32 --rfa-decoding eager,fused "${DECODE[@]}" \
  ${FIRST[@]+"${FIRST[@]}"} "${REMEDY[@]}" "${KERNEL_COUNTS[@]}" ${CROSS_LAUNCH[@]+"${CROSS_LAUNCH[@]}"}
step "training" "${LIMITS[1]}" "$PYTHON" -m rfa_doc_mt.bench.training_speed run --out "$OUT/training.json" \
  "${TRAINING[@]}"
step "decode $DTYPE2" "${LIMITS[2]}" "$ROOT/scripts/bench_decode_speed.sh" --out "$OUT/$DTYPE2" \
  ${DATA_ARGS[@]+"${DATA_ARGS[@]}"} --dtype "$DTYPE2" --rfa-decoding fused "${DECODE[@]}" ${SECOND[@]+"${SECOND[@]}"} \
  "${REMEDY[@]}" "${KERNEL_COUNTS2[@]}" ${CROSS_LAUNCH[@]+"${CROSS_LAUNCH[@]}"}

DECODED=()
for dtype in fp32 "$DTYPE2"; do
  [ -f "$OUT/$dtype/decode_speed.json" ] && DECODED+=("$OUT/$dtype/decode_speed.json")
done
TRAINED=()
[ -f "$OUT/training.json" ] && TRAINED+=("$OUT/training.json")
for dtype in fp32 "$DTYPE2"; do  # a run cut short leaves its JSON (every L so far) but no plot
  if [ -f "$OUT/$dtype/decode_speed.json" ] && [ ! -f "$OUT/$dtype/decode_speed.png" ]; then
    "$PYTHON" -m rfa_doc_mt.bench.decode_speed plot "$OUT/$dtype/decode_speed.json" \
      --out "$OUT/$dtype/decode_speed.png" || FAILED+=("plot $dtype")
  fi
done
READ=()
[ -f "$OUT/readout.json" ] && READ+=("$OUT/readout.json")
"$PYTHON" -m rfa_doc_mt.bench.speed_table --readout ${READ[@]+"${READ[@]}"} --decode ${DECODED[@]+"${DECODED[@]}"} \
  --training ${TRAINED[@]+"${TRAINED[@]}"} --steps ${DECODED[@]+"${DECODED[@]}"} | tee "$OUT/tables.md" \
  || FAILED+=("tables")
log "bench_gpu: $((SECONDS - STARTED))s on $DEVICE; results in $OUT"
if [ ${#FAILED[@]} -gt 0 ]; then
  log "steps that failed: ${FAILED[*]}"
  exit 1
fi
