#!/usr/bin/env bash
# Prepare a document-level corpus from two SWORD Bible modules (the World English Bible and the
# Reina-Valera 1909 by default): a chapter a document, a verse a sentence, verses paired by
# reference; then tokenization, first-word truecasing, joint sentencepiece BPE, fairseq
# binarization and prep.json, as for any text (docs/data.md, "The Bible, a chapter a document").
set -euo pipefail

source "$(dirname "$0")/common.sh"
usage() {
    cat <<USAGE
usage: $(basename "$0") --out DIR [--source-module M] [--target-module M] [options]

  --out DIR                          output directory (binarized corpus)
  --source-module M                  SWORD module of the source side (default engWEB2015eb)
  --source-lang L                    its language code (default en)
  --target-module M                  SWORD module of the target side (default spaRV1909eb)
  --target-lang L                    its language code (default es)
  --sword-path DIR                   folder holding the modules' mods.d/ and modules/ (default:
                                     /usr/share/sword, /usr/local/share/sword and ~/.sword)
  --books B1,B2,...                  only these books, by OSIS name (Gen, Ruth, 3John, Rev)
  --held-out-every N                 a valid and a test chapter in every N kept chapters (default 40;
                                     a few books need fewer, e.g. --books Ruth,Jonah --held-out-every 4)
  --bpe-size N                       joint BPE vocabulary size (default 8000, chosen on validation s-BLEU)
  --workers N                        processes for tokenization, BPE and binarization
  --force                            replace --out even when it holds files this script did not write

Needs pysword (pip install pysword, in requirements.txt) and the modules: apt-get install
sword-text-web sword-text-sparv, or CrossWire's installmgr for others. Verses that cannot be
paired (a book in one module only, a chapter numbered differently by the two versifications,
a verse empty on one side, ...) are left out and counted by reason, on the screen and in
prep.json. Whole chapters go to valid and test: every 40th kept chapter from the 11th and the
31st, in canonical order. For an en -> es pair the valid and test chapters' verses give a contrastive
set of third-person pronouns (English it/they/them, Spanish gender flipped) in DIR/consistency,
which scripts/run_system.sh scores; other pairs get none, and the run says why (docs/data.md,
"A contrastive pronoun test from the corpus").
USAGE
}
for arg in "$@"; do
    case "$arg" in -h|--help) usage; exit 0 ;; esac
done
[ $# -gt 0 ] || { usage >&2; exit 2; }
package_module rfa_doc_mt.data.prepare bible "$@"
echo "prepare_bible: done in ${SECONDS}s"
