#!/usr/bin/env bash
# Prepare IWSLT15 (WIT3 TED talks, zh-en by default) for the doc_translation task:
# tokenization (jieba / Moses + English truecasing), joint sentencepiece BPE, fairseq binarization.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
usage() {
    cat <<USAGE
usage: $(basename "$0") [--wit3-dir DIR] [--out DIR] [--bpe-size N] [--workers N] [other options of 'prepare iwslt15']

  --wit3-dir DIR   WIT3 files IWSLT15.TED.*.xml (+ train.tags.zh-en.* when available)
                   (default: $ROOT/../shared/data/iwslt15-zh-en)
  --out DIR        output directory (default: $ROOT/data-bin/iwslt15-zh-en)
  --bpe-size N     joint BPE vocabulary size (default 30000, lowered when the text is too small)

Without train.tags only the valid (dev2010) and test (tst2010-2013) splits are prepared.
USAGE
}

PYTHON="$ROOT/.venv/bin/python"
[ -x "$PYTHON" ] || PYTHON=python3
WIT3_DIR="$ROOT/../shared/data/iwslt15-zh-en"
OUT="$ROOT/data-bin/iwslt15-zh-en"
EXTRA=()
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --wit3-dir) [ $# -ge 2 ] || { usage >&2; exit 2; }; WIT3_DIR="$2"; shift 2 ;;
        --out) [ $# -ge 2 ] || { usage >&2; exit 2; }; OUT="$2"; shift 2 ;;
        *) EXTRA+=("$1"); shift ;;
    esac
done
if [ ! -d "$WIT3_DIR" ]; then
    echo "error: WIT3 directory not found: $WIT3_DIR" >&2
    usage >&2
    exit 2
fi

# the package is used from this checkout; PYTHONPATH is set for this command only
PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m rfa_doc_mt.data.prepare iwslt15 \
    --wit3-dir "$WIT3_DIR" --out "$OUT" ${EXTRA[@]+"${EXTRA[@]}"}
echo "prepare_iwslt15: done in ${SECONDS}s"
