#!/usr/bin/env bash
# The one command for a bare GPU machine (a Python with a CUDA torch and triton, nothing of this
# project's, no fairseq, no network): installs the wheels of gpu-carry/ (scripts/gpu_carry.sh
# fills it here) into a folder of their own and runs scripts/bench_gpu.sh on the text carried
# with them, within 10 minutes:
#   scripts/gpu_run.sh OUT_DIR [options of scripts/bench_gpu.sh, e.g. --dtype2 bf16 or --dry-run]
# The packages go to $GPU_SITE (default /tmp/rfa-doc-mt-site) with pip install --no-index
# --no-deps --target, first on PYTHONPATH with this checkout; nothing else on the machine changes.
# OUT_DIR/environment.txt records the machine (GPU, driver, Python, torch, triton, numpy) and
# the commit; OUT_DIR/bench_gpu.log what bench_gpu.sh printed. --dry-run (with TRITON_INTERPRET
# set by bench_gpu.sh) rehearses the same on a CPU.
# other options: those of `scripts/bench_gpu.sh`
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
case "${1:-}" in
  -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;;
esac
[ $# -ge 1 ] || { echo "usage: $0 OUT_DIR [bench_gpu.sh options]" >&2; exit 2; }
OUT=$1; shift
CARRY=$ROOT/gpu-carry
SITE=${GPU_SITE:-/tmp/rfa-doc-mt-site}
PYTHON=${PYTHON:-python3}
DATA=$(ls -d "$CARRY"/data/*/ 2>/dev/null | head -n 1)
ls "$CARRY"/wheels/*.whl >/dev/null 2>&1 || { echo "error: no wheels in $CARRY/wheels: run scripts/gpu_carry.sh first and carry gpu-carry" >&2; exit 2; }
[ -n "$DATA" ] && [ -f "$DATA/prep.json" ] || { echo "error: no prepared corpus in $CARRY/data: run scripts/gpu_carry.sh" >&2; exit 2; }
mkdir -p "$OUT"

started=$SECONDS
"$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
  "$CARRY"/wheels/*.whl
export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export RFA_DOC_MT_PYTHON=$PYTHON  # scripts/common.sh: this Python, not a .venv the checkout may have
echo "[$(date +%H:%M:%S)] installed $(ls "$CARRY"/wheels | wc -l) wheels into $SITE in $((SECONDS - started)) s" >&2
{
  echo "commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /' || echo "gpu: none"
  PYTHONWARNINGS=ignore "$PYTHON" -c 'import sys, torch, triton, numpy, fairseq
print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda)
print("triton", triton.__version__); print("numpy", numpy.__version__); print("fairseq", fairseq.__version__)'
} 2>&1 | tee "$OUT/environment.txt" >&2
status=0
"$ROOT/scripts/bench_gpu.sh" "$OUT" --data "${DATA%/}" "$@" 2>&1 | tee "$OUT/bench_gpu.log" || status=$?
echo "[$(date +%H:%M:%S)] gpu_run: $((SECONDS - started)) s in all, exit status $status" >&2
exit "$status"
