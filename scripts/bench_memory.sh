#!/usr/bin/env bash
# Peak training memory of full attention vs LSH attention over context sizes (Petrick et al. 2022, Table 2):
#   scripts/bench_memory.sh OUT_DIR [python -m rfa_doc_mt.bench.training_memory run options...]
# Writes OUT_DIR/memory.json (machine, commit, settings, every run) and OUT_DIR/memory.png (drawn
# from the JSON in a separate step). Every measurement runs in a fresh process, one at a time.
# Defaults: paper sizes, 5200 tokens a batch, k in {0, 3, 9, 12}, CPU max RSS (--device cuda:
# torch.cuda.max_memory_allocated). --quick: the tiny model, 1040 tokens (a smoke test).
# Takes ~10 minutes on 2 idle CPU cores; run it alone on the machine for stable figures.
# Other options: those of `python -m rfa_doc_mt.bench.training_memory run` (after OUT_DIR).
set -euo pipefail
source "$(dirname "$0")/common.sh"
help_requested "$@"
[ $# -ge 1 ] || die "usage: $0 OUT_DIR [--quick] [--device cuda] [--threads N] [--context-sizes 0,3,9,12] ..."
out=$1; shift
mkdir -p "$out"
log "measuring (each setting in a fresh process) -> $out/memory.json"
"$PYTHON" -m rfa_doc_mt.bench.training_memory run --out "$out/memory.json" "$@"
"$PYTHON" -m rfa_doc_mt.bench.training_memory plot "$out/memory.json" --out "$out/memory.png"
