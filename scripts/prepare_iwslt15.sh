#!/usr/bin/env bash
# Prepare IWSLT TED talks (WIT3 files; IWSLT15 zh-en by default) for the doc_translation task:
# tokenization (jieba / Moses + English truecasing), joint sentencepiece BPE, fairseq binarization.
set -euo pipefail

source "$(dirname "$0")/common.sh"
usage() {
    cat <<USAGE
usage: $(basename "$0") [--wit3-dir DIR] [--out DIR] [--valid-sets A,B] [--test-sets A,B] [options]

  --wit3-dir DIR       WIT3 files IWSLT*.TED.<set>.<pair>.<lang>.xml (+ train.tags.zh-en.* when available)
                       (default: $ROOT/../shared/data/iwslt15-zh-en)
  --out DIR            output directory (default: $ROOT/data-bin/iwslt15-zh-en)
  --valid-sets A,B     WIT3 sets joined into the valid split (default: dev2010)
  --test-sets A,B      WIT3 sets joined into the test split (default: tst2010,tst2011,tst2012,tst2013)
  --source-lang L      source language (default zh); --target-lang L: target language (default en)
  --bpe-size N         joint BPE vocabulary size (default 30000, lowered when the text is too small)
  --workers N          processes for tokenization, BPE and binarization
  --force              replace --out even when it holds files this script did not write there

A set is read from the newest campaign's files in --wit3-dir, named for either direction of
the pair: e.g. --test-sets tst2016,tst2017 reads IWSLT17's test sets, whose English side is
named IWSLT17.TED.tst2016.en-zh.en.xml.
Each split is named by what it holds ("test (IWSLT17 tst2016+tst2017): ...", and "holds" in
prep.json). Without train.tags only the valid and test splits are prepared.
USAGE
}

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

package_module rfa_doc_mt.data.prepare iwslt15 \
    --wit3-dir "$WIT3_DIR" --out "$OUT" ${EXTRA[@]+"${EXTRA[@]}"}
echo "prepare_iwslt15: done in ${SECONDS}s"
