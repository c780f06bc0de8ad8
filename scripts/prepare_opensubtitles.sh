#!/usr/bin/env bash
# Prepare Voita et al.'s context-aware OpenSubtitles en-ru ({train,dev,test}.{src,dst}, each
# line four Moses-tokenized sentences joined by " _eos ") for the doc_translation task.
set -euo pipefail

source "$(dirname "$0")/common.sh"
usage() {
    cat <<USAGE
usage: $(basename "$0") --data-dir DIR [--out DIR] [--bpe-size N] [--workers N] [other options of 'prepare opensubtitles']

  --data-dir DIR   Voita et al.'s context_aware directory: {train,dev,test}.{src,dst} (required)
  --out DIR        output directory (default: $ROOT/data-bin/opensubtitles-en-ru)
  --bpe-size N     joint BPE vocabulary size (default 30000)
  --force          replace --out even when it holds files this script did not write there
USAGE
}

DATA_DIR=""
OUT="$ROOT/data-bin/opensubtitles-en-ru"
EXTRA=()
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --data-dir) [ $# -ge 2 ] || { usage >&2; exit 2; }; DATA_DIR="$2"; shift 2 ;;
        --out) [ $# -ge 2 ] || { usage >&2; exit 2; }; OUT="$2"; shift 2 ;;
        *) EXTRA+=("$1"); shift ;;
    esac
done
if [ -z "$DATA_DIR" ]; then
    echo "error: --data-dir is required" >&2
    usage >&2
    exit 2
fi

package_module rfa_doc_mt.data.prepare opensubtitles \
    --data-dir "$DATA_DIR" --out "$OUT" ${EXTRA[@]+"${EXTRA[@]}"}
echo "prepare_opensubtitles: done in ${SECONDS}s"
