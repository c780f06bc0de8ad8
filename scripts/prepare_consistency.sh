#!/usr/bin/env bash
# Apply a prepared corpus's tokenization + BPE to Voita et al.'s contrastive JSON sets, for
# consistency scoring.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
usage() {
    cat <<USAGE
usage: $(basename "$0") [--prep DIR] [--out DIR] [JSON ...]

  --prep DIR   corpus written by prepare_opensubtitles.sh / prepare.py
               (default: $ROOT/data-bin/opensubtitles-en-ru)
  --out DIR    output directory (default: PREP/consistency)
  JSON ...     contrastive sets (default: every *.json of $ROOT/../shared/data/voita-consistency)
USAGE
}

PYTHON="$ROOT/.venv/bin/python"
[ -x "$PYTHON" ] || PYTHON=python3
PREP="$ROOT/data-bin/opensubtitles-en-ru"
OUT=""
JSON=()
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --prep) [ $# -ge 2 ] || { usage >&2; exit 2; }; PREP="$2"; shift 2 ;;
        --out) [ $# -ge 2 ] || { usage >&2; exit 2; }; OUT="$2"; shift 2 ;;
        -*) echo "error: unknown option $1" >&2; usage >&2; exit 2 ;;
        *) JSON+=("$1"); shift ;;
    esac
done
[ -n "$OUT" ] || OUT="$PREP/consistency"
if [ ${#JSON[@]} -eq 0 ]; then
    shopt -s nullglob
    JSON=("$ROOT"/../shared/data/voita-consistency/*.json)
    shopt -u nullglob
    if [ ${#JSON[@]} -eq 0 ]; then
        echo "error: no JSON files given and none in $ROOT/../shared/data/voita-consistency" >&2
        usage >&2
        exit 2
    fi
fi

# the package is used from this checkout; PYTHONPATH is set for this command only
PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m rfa_doc_mt.data.prepare consistency \
    --json "${JSON[@]}" --prep "$PREP" --out "$OUT"
echo "prepare_consistency: done in ${SECONDS}s"
