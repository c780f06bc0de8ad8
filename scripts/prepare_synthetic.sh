#!/usr/bin/env bash
# Write and binarize the embedded synthetic corpus (pseudo-languages src -> tgt, no BPE) with
# its contrastive sets in OUT/consistency/.
set -euo pipefail

source "$(dirname "$0")/common.sh"
usage() {
    cat <<USAGE
usage: $(basename "$0") [--out DIR] [--seed N] [--{train,valid,test}-documents N] [--contrastive-pairs N]
       [--valid-contrastive-pairs N] [--max-distance D] [--document-sentences LEAST-MOST] [--workers N]

  --out DIR              output directory (default: $ROOT/data-bin/synthetic)
  --seed N               corpus seed (default 1)
  --train-documents N    number of training documents (default: the generator's; also --valid-documents,
                         --test-documents)
  --max-distance D       largest antecedent distance in sentences (default 3); the long-range
                         corpus: --max-distance 14 --document-sentences 30-50
  --force                replace --out even when it holds files this script did not write there
other options: those of \`python -m rfa_doc_mt.data.prepare synthetic\`
USAGE
}

OUT="$ROOT/data-bin/synthetic"
EXTRA=()
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --out) [ $# -ge 2 ] || { usage >&2; exit 2; }; OUT="$2"; shift 2 ;;
        *) EXTRA+=("$1"); shift ;;
    esac
done

package_module rfa_doc_mt.data.prepare synthetic \
    --out "$OUT" ${EXTRA[@]+"${EXTRA[@]}"}
echo "prepare_synthetic: done in ${SECONDS}s"
