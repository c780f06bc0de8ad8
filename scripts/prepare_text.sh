#!/usr/bin/env bash
# Prepare raw document-level parallel text of any language pair for the doc_translation task:
# tokenization (jieba for Chinese, Moses otherwise) and first-word truecasing, joint
# sentencepiece BPE, fairseq binarization, prep.json (which translation and scoring read).
set -euo pipefail

source "$(dirname "$0")/common.sh"
usage() {
    cat <<USAGE
usage: $(basename "$0") --source-lang S --target-lang T --out DIR --train SRC TGT [--valid SRC TGT] [--test SRC TGT] [options]

  --source-lang S, --target-lang T   language codes (e.g. en de; zh is segmented with jieba)
  --out DIR                          output directory (binarized corpus)
  --train SRC TGT                    training split: raw source and target file, one sentence a line
  --valid SRC TGT, --test SRC TGT    validation and test splits (train or valid must be given)
  --train-docids FILE                document id of each line of the train files (likewise
  --valid-docids, --test-docids)     --valid-docids, --test-docids)
  --boundaries FORM                  auto (default), marked, blank, docids or single
  --bpe-size N                       joint BPE vocabulary size (default 30000, lowered for small text)
  --workers N                        processes for tokenization, BPE and binarization
  --force                            replace --out even when it holds files this script did not write

Documents: a line <d> before each document (Maruf et al.'s release), an empty line between two
documents, or a document-id file per split; detected per file unless --boundaries says.
Windows line endings, a byte-order mark and white space at the ends of lines are ignored;
anything else wrong (sides that disagree, an empty document, text that is not UTF-8) stops
with the file and line, and nothing is written.
USAGE
}
for arg in "$@"; do
    case "$arg" in -h|--help) usage; exit 0 ;; esac
done
[ $# -gt 0 ] || { usage >&2; exit 2; }
package_module rfa_doc_mt.data.prepare text "$@"
echo "prepare_text: done in ${SECONDS}s"
