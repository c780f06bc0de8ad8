#!/usr/bin/env bash
# Translate raw documents with a trained checkpoint:
#   scripts/translate.sh --checkpoint CKPT --data DIR [--input FILE] [--output FILE] [options]
set -euo pipefail
source "$(dirname "$0")/common.sh"
usage() {
    cat <<USAGE
usage: $(basename "$0") --checkpoint CKPT --data DIR [--input FILE] [--output FILE] [options]

  --checkpoint CKPT    the trained model (e.g. OUT/checkpoint_best.pt of scripts/train.sh)
  --data DIR           the prepared corpus it was trained on (prep.json, dictionaries, spm.model)
  --input FILE         raw source documents, one sentence a line (default: standard input)
  --output FILE        translations, one line per input sentence (default: standard output)
  --docids FILE        document id of each input line, instead of <d> or empty-line boundaries
  --boundaries FORM    auto (default), marked (<d> lines), blank (empty lines), docids, single
  --beam N             beam size (default 4, as decode.sh)
  --batch-size N       windows per batch (default 64, as decode.sh)
  --max-tokens N       source tokens per batch (default: no bound)
  --max-len-a A        at most A x source tokens + B per window (default 1.2, as decode.sh)
  --max-len-b B        (default 10, as decode.sh)
  --lenpen X           length penalty (default 1)
  --cpu                decode on the CPU even when a GPU is available
  --quiet              no progress lines on standard error

The documents are pre-processed as the corpus was (prep.json), decoded as the checkpoint was
trained (its context size, decoding mode, recurrent memory) and written back detokenized, in
the input's format with the same document boundaries. A file is written whole or not at all.
USAGE
}
for arg in "$@"; do
    case "$arg" in -h|--help) usage; exit 0 ;; esac
done
[ $# -gt 0 ] || { usage >&2; exit 2; }
exec "$PYTHON" -m rfa_doc_mt.generation.translate "$@"
