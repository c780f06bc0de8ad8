#!/usr/bin/env bash
# Apply a prepared corpus's tokenization + BPE to contrastive sets (Voita et al.'s JSON, ContraPro,
# Bawden et al. 2018), for consistency scoring.
set -euo pipefail

source "$(dirname "$0")/common.sh"
usage() {
    cat <<USAGE
usage: $(basename "$0") [--prep DIR] [--out DIR] [--source-lang L --target-lang L] [--documents DIR]
       [--context-sentences N] [--force] [JSON ...]

  --prep DIR        corpus written by prepare_opensubtitles.sh / prepare.py
                    (default: $ROOT/data-bin/opensubtitles-en-ru)
  --out DIR         output directory (default: PREP/consistency); sets already there, prepared
                    for the same corpus, are kept: the new ones are added
  --source-lang L, --target-lang L
                    languages of the sets, checked against the corpus's (default: ContraPro's
                    en-de and Bawden et al.'s en-fr, else guessed from the writing system of
                    their text; a set for another pair stops the run)
  --documents DIR   ContraPro: the OpenSubtitles2018 documents folder of its setup_opensubs.sh
                    (DIR/<year>/<document>.{en,de}), where each example's context comes from
  --context-sentences N
                    ContraPro: document sentences before each example's sentence carried as its
                    context (default 3, as Voita et al.'s examples)
  --force           replace --out with only these sets
  JSON ...          contrastive sets, each in the format it is published in, read from the file:
                    Voita et al.'s JSON, ContraPro's contrapro.json, Bawden et al.'s anaphora.json
                    and lexical-choice.json (default: every *.json of
                    $ROOT/../shared/data/voita-consistency)

Examples that repeat a candidate (Voita et al.'s ellipsis_infl and ellipsis_vp test sets) are
counted and kept: identical candidates are one candidate, scored once; an example left with a
single distinct candidate is skipped by the scorer.
USAGE
}

PREP="$ROOT/data-bin/opensubtitles-en-ru"
OUT=""
JSON=()
EXTRA=()
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --prep) [ $# -ge 2 ] || { usage >&2; exit 2; }; PREP="$2"; shift 2 ;;
        --out) [ $# -ge 2 ] || { usage >&2; exit 2; }; OUT="$2"; shift 2 ;;
        --source-lang|--target-lang|--documents|--context-sentences)
            [ $# -ge 2 ] || { usage >&2; exit 2; }; EXTRA+=("$1" "$2"); shift 2 ;;
        --force) EXTRA+=("$1"); shift ;;
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

package_module rfa_doc_mt.data.prepare consistency \
    --json "${JSON[@]}" --prep "$PREP" --out "$OUT" ${EXTRA[@]+"${EXTRA[@]}"}
echo "prepare_consistency: done in ${SECONDS}s"
