#!/usr/bin/env bash
# Decoding speed of RFA against the transformer for L in {1,2,3,4,5,10,15} (Wu et al. 2022, Figure 4).
# usage: scripts/bench_decode_speed.sh [--out DIR] [--data DIR] [--quick] [--device cuda] [--threads N]
#                                      [other options of `python -m rfa_doc_mt.bench.decode_speed run`]
# Source text: IWSLT15's test talks (prepared on first use from ../shared/data/iwslt15-zh-en),
# or, where that is absent, the embedded synthetic corpus (its documents are short: the longest
# windows stand in for large L, and the JSON says so). Models are randomly initialised.
# Writes OUT/decode_speed.json (machine, commit, settings, every run) and OUT/decode_speed.png.
set -euo pipefail
source "$(dirname "$0")/common.sh"
OUT=$ROOT/work/bench
DATA=""
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --out) [ $# -ge 2 ] || die "--out needs a directory"; OUT=$2; shift 2 ;;
    --data) [ $# -ge 2 ] || die "--data needs a directory"; DATA=$2; shift 2 ;;
    *) EXTRA+=("$1"); shift ;;
  esac
done
mkdir -p "$OUT"

if [ -z "$DATA" ]; then
  WIT3_DIR=$ROOT/../shared/data/iwslt15-zh-en
  if [ -d "$WIT3_DIR" ]; then
    DATA=$ROOT/data-bin/iwslt15-zh-en
    if [ ! -f "$DATA/prep.json" ]; then
      log "preparing IWSLT15 test talks -> $DATA"
      "$ROOT/scripts/prepare_iwslt15.sh" --wit3-dir "$WIT3_DIR" --out "$DATA" >&2
    fi
  else
    DATA=$ROOT/data-bin/synthetic
    log "$WIT3_DIR not found: benchmarking on the synthetic corpus"
    if [ ! -f "$DATA/prep.json" ]; then
      "$ROOT/scripts/prepare_synthetic.sh" --out "$DATA" >&2
    fi
  fi
fi
[ -f "$DATA/prep.json" ] || die "$DATA: not a prepared corpus (no prep.json)"

log "decoding with transformer and RFA -> $OUT/decode_speed.json"
"$PYTHON" -m rfa_doc_mt.bench.decode_speed run --data "$DATA" --out "$OUT/decode_speed.json" \
  ${EXTRA[@]+"${EXTRA[@]}"}
"$PYTHON" -m rfa_doc_mt.bench.decode_speed plot "$OUT/decode_speed.json" --out "$OUT/decode_speed.png"
