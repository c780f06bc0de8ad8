#!/usr/bin/env bash
# Decoding cost of the recurrent-memory transformer against the sentence-level and the
# concatenation transformer as documents grow (Feng et al. 2022, Figure 8):
#   scripts/bench_memory_cost.sh OUT_DIR [--quick] [--device cuda] [other options of
#     python -m rfa_doc_mt.bench.memory_cost run]
# Writes OUT_DIR/memory_cost.json (machine, commit, settings, every run) and, from it,
# OUT_DIR/memory_cost.png. Paper sizes, dummy documents of 100 to 2000 tokens, beam 4: on a small
# CPU the full run takes hours (use --quick, or a GPU).
# Other options: those of `python -m rfa_doc_mt.bench.memory_cost run` (after OUT_DIR).
set -euo pipefail
source "$(dirname "$0")/common.sh"
help_requested "$@"
[ $# -ge 1 ] || die "usage: $0 OUT_DIR [memory_cost run options...]"
out=$1; shift
mkdir -p "$out"
log "decoding dummy documents -> $out/memory_cost.json"
"$PYTHON" -m rfa_doc_mt.bench.memory_cost run --out "$out/memory_cost.json" "$@"
"$PYTHON" -m rfa_doc_mt.bench.memory_cost plot "$out/memory_cost.json" --out "$out/memory_cost.png"
