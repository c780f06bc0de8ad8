#!/usr/bin/env bash
# Fills gpu-carry/ (git-ignored) with what a bare GPU machine lacks for scripts/gpu_run.sh:
#   scripts/gpu_carry.sh [--python-version 3.12] [--data DIR]
# gpu-carry/wheels: fairseq-fixed and the packages of its that such a machine does not have
# (hydra-core, omegaconf, antlr4-python3-runtime, bitarray), as wheels for CPython 3.12 on
# manylinux x86-64, the versions requirements.txt pins (antlr4-python3-runtime 4.9.3, which
# omegaconf 2.3 needs, is published as source only: its pure-Python wheel is built here);
# gpu-carry/data/iwslt15-zh-en: the benchmark's text, IWSLT15's test talks as
# scripts/bench_decode_speed.sh prepares them (from ../shared/data/iwslt15-zh-en; --data DIR: a
# prepared corpus instead), binarized, so that GPU figures are on the text the CPU ones are.
# A GPU machine with another Python needs --python-version of its own. About 30 MB in all;
# re-running fetches nothing that is there.
set -euo pipefail
source "$(dirname "$0")/common.sh"
help_requested "$@"
PY_VERSION=3.12
DATA=""
while [ $# -gt 0 ]; do
  case "$1" in
    --python-version) [ $# -ge 2 ] || die "--python-version needs a version (3.12)"; PY_VERSION=$2; shift 2 ;;
    --data) [ $# -ge 2 ] || die "--data needs a prepared corpus"; DATA=$2; shift 2 ;;
    *) die "unknown option $1" ;;
  esac
done
CARRY=$ROOT/gpu-carry
WHEELS=$CARRY/wheels
mkdir -p "$WHEELS" "$CARRY/data"

pin() {  # pin NAME: NAME==VERSION as requirements.txt pins it
  local line
  line=$(grep -iE "^$1==" "$ROOT/requirements.txt") || die "requirements.txt pins no version of $1"
  echo "$line"
}
PLATFORMS=()
for platform in manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  PLATFORMS+=(--platform "$platform")
done
log "wheels for CPython $PY_VERSION -> $WHEELS"
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version "$PY_VERSION" --implementation cp \
  "${PLATFORMS[@]}" -d "$WHEELS" fairseq-fixed==0.12.3.1 "$(pin hydra-core)" "$(pin omegaconf)" "$(pin bitarray)"
ls "$WHEELS"/antlr4_python3_runtime-4.9.3-*.whl >/dev/null 2>&1 \
  || "$PYTHON" -m pip wheel -q --no-deps -w "$WHEELS" antlr4-python3-runtime==4.9.3

if [ -z "$DATA" ]; then
  DATA=$ROOT/data-bin/iwslt15-zh-en
  if [ ! -f "$DATA/prep.json" ]; then
    WIT3_DIR=$ROOT/../shared/data/iwslt15-zh-en
    [ -d "$WIT3_DIR" ] || die "$WIT3_DIR not found: give a prepared corpus with --data DIR"
    log "preparing IWSLT15 test talks -> $DATA"
    "$ROOT/scripts/prepare_iwslt15.sh" --wit3-dir "$WIT3_DIR" --out "$DATA" >&2
  fi
fi
[ -f "$DATA/prep.json" ] || die "$DATA: not a prepared corpus (no prep.json)"
TARGET=$CARRY/data/$(basename "$DATA")
# what the benchmark reads: the preparation's record, the dictionaries and the binarized test split
rm -rf "$TARGET.partial"
mkdir -p "$TARGET.partial"
cp "$DATA"/prep.json "$DATA"/dict.*.txt "$DATA"/test.* "$TARGET.partial"/
rm -rf "$TARGET"
mv "$TARGET.partial" "$TARGET"
du -sh "$WHEELS" "$TARGET" >&2
log "gpu-carry ready: scripts/gpu_run.sh OUT_DIR on the GPU machine, carrying gpu-carry"
